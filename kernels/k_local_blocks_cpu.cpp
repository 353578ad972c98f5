// Local blocks of T_s and the hop's BFS on them, on the CPU (C++ with OpenMP).
//
//   local_blocks(ids, rows, crow, col, inv_degree)                      -> [Q, M, M]
//   local_bfs(ids, rows, crow, col, inv_degree, theta, sources, depths, reverse) -> [Q, M, B] int64
//
// Equivalent PyTorch (the twins they are tested against, tests/kernels/test_hop_kernels.py):
//
//   block = TransitionOperator.local_blocks(ids)              # the sort-and-join, _join_into
//   block = torch.nn.functional.threshold(block, theta, 0.0)  # edges T*_ij > theta
//   dist[..., b] = batched_bfs(block, sources[..., b], depths[b], reverse=reverse[b])
//
// Slot i of question q holds fact ids[q, i] (-1: padding); its incidence columns are
// col[crow[r] : crow[r + 1]] with r = rows[q, i] (rows = ids for a plain B; for a factored B the
// caller passes the expanded rows, one CSR row per slot). The block entry of slots i != j with
// facts f_i != f_j is
//
//   T*[i, j] = sum over shared columns c, ascending:  inv_degree[c] * inv_row[i]
//   inv_row[i] = 1 / sum over the columns c of f_i, ascending:  inv_degree[c] * (g_c - mult_i)
//
// (g_c: slots of the question holding column c; mult_i: slots holding f_i; 1 / 0 gives 0), and 0
// elsewhere (the diagonal, equal facts, padding). These are the sums the PyTorch join forms, in its
// order: its index_add_ visits the entries sorted by column, each from 0, without fused
// multiply-add (-ffp-contract=off, hpengine/sparse/_dispatch.py), so the blocks have the same bits.
//
// Why a kernel: the PyTorch join materialises every (slot, slot, column) pair with a dozen index
// passes and fills a dense [Q, M, M] block that the BFS then reads with a batched matrix product
// per round. Here each question is one loop: its entries bucketed by column (each slot's columns
// ascending, as its CSR row holds them) and each slot's row accumulated in a scratch row. local_bfs
// keeps only the edges, as adjacency lists (rows whose small terms cannot add up to an edge are
// not even summed: Join::edges), so the BFS walks edges instead of M x M blocks and the hop writes
// no block at all. Questions are split over OpenMP threads; each question's result does not depend
// on the thread that computed it.
#include <ATen/Dispatch.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

namespace {

// One question's join: each slot's incidence columns (ascending), the slots of each column (its
// group) and each slot's inverse row sum. The buffers are reused across the questions of one
// thread; the per-column arrays span all C columns and are reset through a stamp per question.
template <typename scalar_t>
struct Join {
  int64_t m = 0;
  std::vector<int32_t> slot_ptr;    // [m + 1] each slot's entries in cols
  std::vector<int64_t> cols;        // the entries' columns, ascending within a slot
  std::vector<int32_t> ent_start;   // per entry: where its column's group starts in members
  std::vector<int32_t> ent_size;    // per entry: the size g_c of its column's group
  std::vector<int32_t> members;     // the slots of each group, group after group
  std::vector<int64_t> fact;        // [m] fact id of each slot (-1 padding)
  std::vector<int32_t> mult;        // [m] slots of the question holding the same fact
  std::vector<scalar_t> inv_row;    // [m]
  std::vector<std::pair<int64_t, int32_t>> by_fact;
  std::vector<int64_t> col_stamp;   // [C] the question that last touched each column
  std::vector<int32_t> col_count, col_start, col_fill;  // [C]
  std::vector<int64_t> touched_cols;
  int64_t stamp = 0;

  explicit Join(int64_t num_columns)
      : col_stamp(num_columns, -1), col_count(num_columns), col_start(num_columns), col_fill(num_columns) {}

  // Fill the join of one question; inv_degree[c] is 1 / d_c (0 for an empty column).
  template <typename index_t>
  void build(const int64_t* ids, const int64_t* rows, const index_t* crow, const index_t* col,
             const scalar_t* inv_degree, int64_t m_) {
    m = m_;
    ++stamp;
    fact.assign(ids, ids + m);
    // multiplicity of each slot's fact (pairs of equal facts are diagonal entries of T_s: zero)
    by_fact.clear();
    for (int64_t i = 0; i < m; ++i)
      if (fact[i] >= 0) by_fact.emplace_back(fact[i], static_cast<int32_t>(i));
    std::sort(by_fact.begin(), by_fact.end());
    mult.assign(m, 0);
    for (size_t a = 0; a < by_fact.size();) {
      size_t b = a;
      while (b < by_fact.size() && by_fact[b].first == by_fact[a].first) ++b;
      for (size_t k = a; k < b; ++k) mult[by_fact[k].second] = static_cast<int32_t>(b - a);
      a = b;
    }
    // each slot's columns, ascending (CSR rows usually are; a row that is not is sorted), counted
    cols.clear();
    touched_cols.clear();
    slot_ptr.assign(m + 1, 0);
    for (int64_t i = 0; i < m; ++i) {
      const size_t lo = cols.size();
      if (fact[i] >= 0) {
        const int64_t r = rows[i];
        for (int64_t k = crow[r], e = crow[r + 1]; k < e; ++k) cols.push_back(static_cast<int64_t>(col[k]));
        if (!std::is_sorted(cols.begin() + lo, cols.end())) std::sort(cols.begin() + lo, cols.end());
        for (size_t p = lo; p < cols.size(); ++p) {
          const int64_t c = cols[p];
          if (col_stamp[c] != stamp) {
            col_stamp[c] = stamp;
            col_count[c] = 0;
            touched_cols.push_back(c);
          }
          ++col_count[c];
        }
      }
      slot_ptr[i + 1] = static_cast<int32_t>(cols.size());
    }
    // the groups, one after the other, and each entry's group
    int32_t offset = 0;
    for (int64_t c : touched_cols) {
      col_start[c] = col_fill[c] = offset;
      offset += col_count[c];
    }
    const int64_t n = static_cast<int64_t>(cols.size());
    members.resize(n);
    ent_start.resize(n);
    ent_size.resize(n);
    for (int64_t i = 0; i < m; ++i) {
      for (int32_t p = slot_ptr[i]; p < slot_ptr[i + 1]; ++p) {
        const int64_t c = cols[p];
        members[col_fill[c]++] = static_cast<int32_t>(i);
        ent_start[p] = col_start[c];
        ent_size[p] = col_count[c];
      }
    }
    // row sums from the group sizes alone (every partner except the equal facts), in column order
    inv_row.assign(m, scalar_t(0));
    for (int64_t i = 0; i < m; ++i) {
      scalar_t sum = scalar_t(0);
      for (int32_t p = slot_ptr[i]; p < slot_ptr[i + 1]; ++p)
        sum += inv_degree[cols[p]] * static_cast<scalar_t>(ent_size[p] - mult[i]);
      const scalar_t inv = scalar_t(1) / sum;  // inverse_or_zero: 1 / 0 (or a denormal) gives 0
      inv_row[i] = std::isinf(inv) ? scalar_t(0) : inv;
    }
  }

  // Row i of the block: acc[j] += T*[i, j] for every partner j (acc is zero on entry at the
  // touched slots); the slots touched for the first time are appended to touched.
  void row(int64_t i, const scalar_t* inv_degree, scalar_t* acc, std::vector<int32_t>& touched,
           std::vector<int32_t>& seen, int32_t stamp) const {
    const int64_t fi = fact[i];
    if (fi < 0) return;
    const scalar_t ir = inv_row[i];
    for (int32_t p = slot_ptr[i]; p < slot_ptr[i + 1]; ++p) {
      const int32_t lo = ent_start[p], hi = lo + ent_size[p];
      if (hi - lo < 2) continue;
      const scalar_t w = inv_degree[cols[p]] * ir;
      for (int32_t e = lo; e < hi; ++e) {
        const int32_t j = members[e];
        if (fact[j] == fi) continue;  // the slot itself and equal facts: zero in T_s
        if (seen[j] != stamp) {
          seen[j] = stamp;
          touched.push_back(j);
        }
        acc[j] += w;
      }
    }
  }

  // The edges of row i (T*[i, j] > theta, theta >= 0) appended to adj. Exact without the sums
  // where it can be: every term t_c = inv_degree[c] * inv_row[i] of the row is >= 0, so an entry
  // is at least each of its terms (a term t_c > theta makes every partner in column c an edge) and
  // at most the sum, in the same order, of all the row's terms it could hold (rounding is monotone).
  // When the terms <= theta sum to <= theta, an entry without a larger term is no edge, and the
  // large terms' columns give the edges; otherwise the row's entries are summed in full. Hub
  // columns (many partners, tiny terms) are then never enumerated.
  void edges(int64_t i, const scalar_t* inv_degree, scalar_t theta, scalar_t* acc, std::vector<int32_t>& touched,
             std::vector<int32_t>& seen, std::vector<int32_t>& adj) const {
    const int64_t fi = fact[i];
    if (fi < 0) return;
    const scalar_t ir = inv_row[i];
    scalar_t small = scalar_t(0);
    for (int32_t p = slot_ptr[i]; p < slot_ptr[i + 1]; ++p) {
      if (ent_size[p] < 2) continue;
      const scalar_t t = inv_degree[cols[p]] * ir;
      if (!(t > theta)) small += t;
    }
    const int32_t stamp = static_cast<int32_t>(i);
    if (small <= theta) {
      for (int32_t p = slot_ptr[i]; p < slot_ptr[i + 1]; ++p) {
        const int32_t lo = ent_start[p], hi = lo + ent_size[p];
        if (hi - lo < 2 || !(inv_degree[cols[p]] * ir > theta)) continue;
        for (int32_t e = lo; e < hi; ++e) {
          const int32_t j = members[e];
          if (fact[j] == fi || seen[j] == stamp) continue;
          seen[j] = stamp;
          adj.push_back(j);
        }
      }
      return;
    }
    touched.clear();
    row(i, inv_degree, acc, touched, seen, stamp);
    for (int32_t j : touched) {
      if (acc[j] > theta) adj.push_back(j);
      acc[j] = scalar_t(0);
    }
  }
};

void check_join(const at::Tensor& ids, const at::Tensor& rows, const at::Tensor& crow, const at::Tensor& col,
                const at::Tensor& inv_degree, const char* name) {
  TORCH_CHECK(ids.device().is_cpu() && rows.device().is_cpu() && crow.device().is_cpu() && col.device().is_cpu() &&
                  inv_degree.device().is_cpu(),
              name, ": CPU tensors expected");
  TORCH_CHECK(ids.dim() == 2 && ids.scalar_type() == at::kLong && rows.scalar_type() == at::kLong &&
                  rows.sizes() == ids.sizes(),
              name, ": ids and rows must be int64 [Q, M] (got ", ids.sizes(), ", ", rows.sizes(), ")");
  TORCH_CHECK((crow.scalar_type() == at::kLong || crow.scalar_type() == at::kInt) &&
                  col.scalar_type() == crow.scalar_type(),
              name, ": int32 or int64 crow/col of one dtype expected");
  TORCH_CHECK(inv_degree.scalar_type() == at::kFloat || inv_degree.scalar_type() == at::kDouble, name,
              ": float32 or float64 inv_degree expected");
  TORCH_CHECK(ids.is_contiguous() && rows.is_contiguous() && crow.is_contiguous() && col.is_contiguous() &&
                  inv_degree.is_contiguous(),
              name, ": contiguous tensors expected");
  TORCH_CHECK(ids.size(1) < (int64_t(1) << 31) && col.numel() < (int64_t(1) << 31), name,
              ": M and nnz below 2^31 expected");
}

// The blocks of questions [0, q_count), one question per iteration (OpenMP, outside the dispatch
// macros: a pragma cannot sit in a macro argument).
template <typename scalar_t, typename index_t>
void blocks_questions(const int64_t* ids, const int64_t* rows, const index_t* crow, const index_t* col,
                      const scalar_t* inv_degree, int64_t num_columns, scalar_t* out, int64_t q_count, int64_t m) {
#pragma omp parallel
  {
    Join<scalar_t> join(num_columns);
    std::vector<int32_t> touched, seen(m, -1);
#pragma omp for schedule(dynamic, 4)
    for (int64_t q = 0; q < q_count; ++q) {
      scalar_t* block = out + q * m * m;
      std::fill(block, block + m * m, scalar_t(0));
      join.build(ids + q * m, rows + q * m, crow, col, inv_degree, m);
      std::fill(seen.begin(), seen.end(), -1);
      for (int64_t i = 0; i < m; ++i) {
        touched.clear();
        join.row(i, inv_degree, block + i * m, touched, seen, static_cast<int32_t>(i));
      }
    }
  }
}

// out [Q, M, M] (contiguous, any content) := the local blocks.
void local_blocks_out(const at::Tensor& ids, const at::Tensor& rows, const at::Tensor& crow, const at::Tensor& col,
                      const at::Tensor& inv_degree, at::Tensor& out) {
  check_join(ids, rows, crow, col, inv_degree, "hpengine::local_blocks_out");
  const int64_t q_count = ids.size(0), m = ids.size(1);
  TORCH_CHECK(out.is_contiguous() && out.scalar_type() == inv_degree.scalar_type() && out.dim() == 3 &&
                  out.size(0) == q_count && out.size(1) == m && out.size(2) == m,
              "hpengine::local_blocks_out: out must be a contiguous [", q_count, ", ", m, ", ", m, "] tensor of ",
              inv_degree.scalar_type(), " (got ", out.sizes(), " ", out.scalar_type(), ")");
  if (q_count == 0 || m == 0) return;
  AT_DISPATCH_FLOATING_TYPES(inv_degree.scalar_type(), "hpengine_local_blocks", [&] {
    AT_DISPATCH_INDEX_TYPES(crow.scalar_type(), "hpengine_local_blocks_index", [&] {
      blocks_questions<scalar_t, index_t>(ids.data_ptr<int64_t>(), rows.data_ptr<int64_t>(), crow.data_ptr<index_t>(),
                                          col.data_ptr<index_t>(), inv_degree.data_ptr<scalar_t>(),
                                          inv_degree.numel(), out.data_ptr<scalar_t>(), q_count, m);
    });
  });
}

at::Tensor local_blocks(const at::Tensor& ids, const at::Tensor& rows, const at::Tensor& crow, const at::Tensor& col,
                        const at::Tensor& inv_degree) {
  at::Tensor out = at::empty({ids.size(0), ids.size(1), ids.size(1)}, inv_degree.options());
  local_blocks_out(ids.contiguous(), rows.contiguous(), crow.contiguous(), col.contiguous(), inv_degree.contiguous(),
                   out);
  return out;
}

at::Tensor local_blocks_meta(const at::Tensor& ids, const at::Tensor& rows, const at::Tensor& crow,
                             const at::Tensor& col, const at::Tensor& inv_degree) {
  return at::empty({ids.size(0), ids.size(1), ids.size(1)}, inv_degree.options());
}

// Level-synchronous BFS over one question's edges (adjacency lists of i -> j), as batched_bfs's
// rounds: forwards, j is reached in round s when some i reached before round s has an edge i -> j;
// reverse, i is reached when some edge i -> j ends in a j reached before round s. dist (stride
// `stride`) holds 0 at the sources and -1 elsewhere on entry.
void bfs_rounds(const std::vector<int32_t>& ptr, const std::vector<int32_t>& adj, int64_t m, int64_t depth,
                bool reverse, int64_t* dist, int64_t stride, std::vector<int32_t>& level) {
  for (int64_t step = 1; step <= depth; ++step) {
    level.clear();
    if (reverse) {
      for (int64_t i = 0; i < m; ++i) {
        if (dist[i * stride] >= 0) continue;
        for (int32_t e = ptr[i]; e < ptr[i + 1]; ++e) {
          const int64_t d = dist[adj[e] * stride];
          if (d >= 0 && d < step) {
            level.push_back(static_cast<int32_t>(i));
            break;
          }
        }
      }
    } else {
      for (int64_t i = 0; i < m; ++i) {
        const int64_t d = dist[i * stride];
        if (d < 0 || d >= step) continue;
        for (int32_t e = ptr[i]; e < ptr[i + 1]; ++e)
          if (dist[adj[e] * stride] < 0) level.push_back(adj[e]);
      }
    }
    if (level.empty()) return;  // nothing new: later rounds find nothing either
    for (int32_t j : level) dist[j * stride] = step;
  }
}

// The searches of questions [0, q_count): each question's join kept as adjacency lists of its
// edges, then its nb searches. An edge is T*_ij > theta (threshold_ keeps x > theta, the BFS then
// x > 0: the caller passes max(theta, 0), in the block's dtype as threshold_ compares).
template <typename scalar_t, typename index_t>
void bfs_questions(const int64_t* ids, const int64_t* rows, const index_t* crow, const index_t* col,
                   const scalar_t* inv_degree, int64_t num_columns, scalar_t theta, const bool* sources,
                   const std::vector<int64_t>& depth, const std::vector<int64_t>& reverse, int64_t* dist,
                   int64_t q_count, int64_t m, int64_t nb) {
#pragma omp parallel
  {
    Join<scalar_t> join(num_columns);
    std::vector<scalar_t> acc(m, scalar_t(0));
    std::vector<int32_t> touched, seen(m, -1), ptr(m + 1), adj, level;
#pragma omp for schedule(dynamic, 4)
    for (int64_t q = 0; q < q_count; ++q) {
      join.build(ids + q * m, rows + q * m, crow, col, inv_degree, m);
      std::fill(seen.begin(), seen.end(), -1);
      adj.clear();
      ptr[0] = 0;
      for (int64_t i = 0; i < m; ++i) {
        join.edges(i, inv_degree, theta, acc.data(), touched, seen, adj);
        ptr[i + 1] = static_cast<int32_t>(adj.size());
      }
      int64_t* dq = dist + q * m * nb;
      const bool* sq = sources + q * m * nb;
      for (int64_t k = 0; k < m * nb; ++k) dq[k] = sq[k] ? 0 : -1;
      for (int64_t b = 0; b < nb; ++b) bfs_rounds(ptr, adj, m, depth[b], reverse[b] != 0, dq + b, nb, level);
    }
  }
}

at::Tensor local_bfs(const at::Tensor& ids, const at::Tensor& rows, const at::Tensor& crow, const at::Tensor& col,
                     const at::Tensor& inv_degree, double theta, const at::Tensor& sources, at::IntArrayRef depths,
                     at::IntArrayRef reverse) {
  check_join(ids, rows, crow, col, inv_degree, "hpengine::local_bfs");
  const int64_t q_count = ids.size(0), m = ids.size(1);
  TORCH_CHECK(sources.scalar_type() == at::kBool && sources.dim() == 3 && sources.size(0) == q_count &&
                  sources.size(1) == m && sources.device().is_cpu(),
              "hpengine::local_bfs: sources must be a bool [", q_count, ", ", m, ", B] CPU tensor (got ",
              sources.sizes(), " ", sources.scalar_type(), ")");
  const int64_t nb = sources.size(2);
  TORCH_CHECK(static_cast<int64_t>(depths.size()) == nb && static_cast<int64_t>(reverse.size()) == nb,
              "hpengine::local_bfs: one depth and one direction per search expected (B = ", nb, ")");
  for (int64_t d : depths) TORCH_CHECK(d >= 0, "hpengine::local_bfs: depths must be >= 0 (got ", d, ")");
  const at::Tensor src = sources.contiguous();
  at::Tensor dist = at::empty({q_count, m, nb}, ids.options());
  if (q_count == 0 || m == 0 || nb == 0) return dist;
  const std::vector<int64_t> depth(depths.begin(), depths.end());
  const std::vector<int64_t> rev(reverse.begin(), reverse.end());  // 0 or 1
  AT_DISPATCH_FLOATING_TYPES(inv_degree.scalar_type(), "hpengine_local_bfs", [&] {
    AT_DISPATCH_INDEX_TYPES(crow.scalar_type(), "hpengine_local_bfs_index", [&] {
      bfs_questions<scalar_t, index_t>(ids.data_ptr<int64_t>(), rows.data_ptr<int64_t>(), crow.data_ptr<index_t>(),
                                       col.data_ptr<index_t>(), inv_degree.data_ptr<scalar_t>(), inv_degree.numel(),
                                       std::max(static_cast<scalar_t>(theta), scalar_t(0)), src.data_ptr<bool>(),
                                       depth, rev,
                                       dist.data_ptr<int64_t>(), q_count, m, nb);
    });
  });
  return dist;
}

at::Tensor local_bfs_meta(const at::Tensor& ids, const at::Tensor& rows, const at::Tensor& crow,
                          const at::Tensor& col, const at::Tensor& inv_degree, double theta, const at::Tensor& sources,
                          at::IntArrayRef depths, at::IntArrayRef reverse) {
  return at::empty({ids.size(0), ids.size(1), sources.size(2)}, ids.options());
}

}  // namespace

// A fragment: the namespace itself is defined by k_csr_addmm_cpu.cpp (one TORCH_LIBRARY per namespace).
TORCH_LIBRARY_FRAGMENT(hpengine, m) {
  m.def("local_blocks(Tensor ids, Tensor rows, Tensor crow, Tensor col, Tensor inv_degree) -> Tensor");
  m.def("local_blocks_out(Tensor ids, Tensor rows, Tensor crow, Tensor col, Tensor inv_degree, Tensor(a!) out) -> ()");
  m.def("local_bfs(Tensor ids, Tensor rows, Tensor crow, Tensor col, Tensor inv_degree, float theta, Tensor sources, "
        "int[] depths, int[] reverse) -> Tensor");
}

TORCH_LIBRARY_IMPL(hpengine, CPU, m) {
  m.impl("local_blocks", &local_blocks);
  m.impl("local_blocks_out", [](const at::Tensor& ids, const at::Tensor& rows, const at::Tensor& crow,
                                const at::Tensor& col, const at::Tensor& inv_degree,
                                at::Tensor out) { local_blocks_out(ids, rows, crow, col, inv_degree, out); });
  m.impl("local_bfs", &local_bfs);
}

TORCH_LIBRARY_IMPL(hpengine, Meta, m) {
  m.impl("local_blocks", &local_blocks_meta);
  m.impl("local_bfs", &local_bfs_meta);
}
