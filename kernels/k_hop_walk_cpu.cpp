// The hop's walk steps on the CPU (C++ with OpenMP): its two sparse products per step, the second
// fused with the step's dense passes, both skipping the rows known to be zero.
//
//   walk_product_out(crow, col, val, x, x_rows, alpha, out, out_rows)
//     out = alpha * (A @ x)                (A: CSR [m, n], x: [n, w]; the first product, beta = 0)
//   walk_step_out(crow, col, val, y, x, scale, rptr, rcol, rval, y_rows, out, visits, out_rows)
//     out    = x * scale[:, None]          (the diagonal of W_s, removed)
//     out[i, rcol[k]] += rval[k]           for k in rptr[i] : rptr[i + 1], in that order (+ c r0)
//     out    = out + A @ y                 (A: CSR [m, n], y: [n, w])
//     visits = visits + out
//
// Equivalent PyTorch (the twins they are tested against, hpengine.sparse._dispatch.walk_product_torch
// and walk_step_torch):
//
//   torch.addmm(out, A, x, beta=0, alpha=alpha, out=out)
//   torch.mul(x, scale.unsqueeze(1), out=out); out.view(-1).index_add_(0, flat, values)
//   torch.addmm(out, A, y, out=out); visits.add_(out)
//
// where (rptr, rcol, rval) is the restart list (flat = row * w + col) stably sorted by row, so each
// element receives its restart terms in index_add_'s order. Per element a product sums
// a_ik * x_kj in CSR order from zero without fused multiply-add (-ffp-contract=off), then scales
// or adds the input, as k_csr_addmm_cpu.cpp and torch.addmm do.
//
// Zero rows: x_rows / y_rows (bool [n], or empty: every row) mark the rows of x / y that may be
// nonzero; a product skips the others, which is exact (a zero row adds +-0 to a sum that starts at
// +0, which changes nothing). out_rows (bool [m], or empty: not wanted) receives which rows of the
// result may be nonzero, for the next product. The walk starts from its restart rows (a few per
// question), so its first step's products read a small part of the [H, Qc] block (bench_hop
// H = 100k: 6% and 43% of the gathered rows).
//
// walk_step_out replaces four passes over the [H, Qc] blocks by one pass over each row of x, out
// and visits. Rows are split over OpenMP threads with a static schedule.
#include <ATen/Dispatch.h>
#include <ATen/core/Tensor.h>
#include <torch/library.h>

#include <cstdint>
#include <initializer_list>

#include "k_vec.h"

namespace {

// acc[u] (NV vectors) = sum over the row's entries k of a_k * x[col_k, j0 + ...], in CSR order,
// skipping the rows of x that `rows` marks zero (rows == nullptr: none).
template <int NV, typename scalar_t, typename index_t>
inline void gather_sum(const index_t* col, const scalar_t* val, int64_t lo, int64_t hi, const scalar_t* x,
                       const bool* rows, int64_t w, int64_t j0, typename Vec<scalar_t>::type* acc) {
  using V = Vec<scalar_t>;
  for (int u = 0; u < NV; ++u) acc[u] = typename V::type{};
  for (int64_t k = lo; k < hi; ++k) {
    const int64_t c = static_cast<int64_t>(col[k]);
    if (rows != nullptr && !rows[c]) continue;
    const scalar_t a = val[k];
    const scalar_t* xr = x + c * w + j0;
    for (int u = 0; u < NV; ++u) acc[u] += a * V::load(xr + u * V::lanes);
  }
}

template <typename scalar_t, typename index_t>
inline void gather_sum_tail(const index_t* col, const scalar_t* val, int64_t lo, int64_t hi, const scalar_t* x,
                            const bool* rows, int64_t w, int64_t j0, scalar_t* acc) {
  const int64_t n = w - j0;
  for (int64_t j = 0; j < n; ++j) acc[j] = scalar_t(0);
  for (int64_t k = lo; k < hi; ++k) {
    const int64_t c = static_cast<int64_t>(col[k]);
    if (rows != nullptr && !rows[c]) continue;
    const scalar_t a = val[k];
    const scalar_t* xr = x + c * w + j0;
    for (int64_t j = 0; j < n; ++j) acc[j] += a * xr[j];
  }
}

// Whether the row's entries gather any row that may be nonzero.
template <typename index_t>
inline bool gathers_any(const index_t* col, int64_t lo, int64_t hi, const bool* rows) {
  if (rows == nullptr) return hi > lo;
  for (int64_t k = lo; k < hi; ++k)
    if (rows[static_cast<int64_t>(col[k])]) return true;
  return false;
}

template <typename scalar_t>
inline bool any_nonzero(const scalar_t* o, int64_t w) {
  for (int64_t j = 0; j < w; ++j)
    if (o[j] != scalar_t(0)) return true;
  return false;
}

// out = alpha * (A @ x), row by row; out_rows[i]: some row of x gathered by row i may be nonzero.
template <typename scalar_t, typename index_t>
void product_rows(const index_t* crow, const index_t* col, const scalar_t* val, const scalar_t* x,
                  const bool* x_rows, scalar_t alpha, scalar_t* out, bool* out_rows, int64_t m, int64_t w) {
  using V = Vec<scalar_t>;
  constexpr int64_t L = V::lanes;
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < m; ++i) {
    const int64_t lo = crow[i], hi = crow[i + 1];
    scalar_t* o = out + i * w;
    const bool live = gathers_any(col, lo, hi, x_rows);
    if (out_rows != nullptr) out_rows[i] = live;
    if (!live) {  // no term: the sum is +0, and +0 * alpha is what the full product gives
      for (int64_t j = 0; j < w; ++j) o[j] = scalar_t(0) * alpha;
      continue;
    }
    typename V::type acc[2];
    int64_t j0 = 0;
    for (; j0 + 2 * L <= w; j0 += 2 * L) {
      gather_sum<2>(col, val, lo, hi, x, x_rows, w, j0, acc);
      for (int u = 0; u < 2; ++u) V::store(o + j0 + u * L, acc[u] * alpha);
    }
    for (; j0 + L <= w; j0 += L) {
      gather_sum<1>(col, val, lo, hi, x, x_rows, w, j0, acc);
      V::store(o + j0, acc[0] * alpha);
    }
    if (j0 < w) {
      scalar_t tail[L];
      gather_sum_tail(col, val, lo, hi, x, x_rows, w, j0, tail);
      for (int64_t j = 0; j < w - j0; ++j) o[j0 + j] = tail[j] * alpha;
    }
  }
}

// The fused step, row by row: o = x * scale (+ restart terms), o = acc + o, v += o.
template <typename scalar_t, typename index_t>
void step_rows(const index_t* crow, const index_t* col, const scalar_t* val, const scalar_t* y, const scalar_t* x,
               const scalar_t* scale, const int64_t* rptr, const int64_t* rcol, const scalar_t* rval,
               const bool* y_rows, scalar_t* out, scalar_t* visits, bool* out_rows, int64_t m, int64_t w) {
  using V = Vec<scalar_t>;
  constexpr int64_t L = V::lanes;
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < m; ++i) {
    scalar_t* o = out + i * w;
    scalar_t* v = visits + i * w;
    const scalar_t* xi = x + i * w;
    const scalar_t s = scale[i];
    for (int64_t j = 0; j < w; ++j) o[j] = xi[j] * s;
    for (int64_t k = rptr[i]; k < rptr[i + 1]; ++k) o[rcol[k]] += rval[k];
    const int64_t lo = crow[i], hi = crow[i + 1];
    typename V::type acc[2];
    int64_t j0 = 0;
    for (; j0 + 2 * L <= w; j0 += 2 * L) {
      gather_sum<2>(col, val, lo, hi, y, y_rows, w, j0, acc);
      for (int u = 0; u < 2; ++u) {
        const int64_t j = j0 + u * L;
        const typename V::type r = acc[u] + V::load(o + j);
        V::store(o + j, r);
        V::store(v + j, V::load(v + j) + r);
      }
    }
    for (; j0 + L <= w; j0 += L) {
      gather_sum<1>(col, val, lo, hi, y, y_rows, w, j0, acc);
      const typename V::type r = acc[0] + V::load(o + j0);
      V::store(o + j0, r);
      V::store(v + j0, V::load(v + j0) + r);
    }
    if (j0 < w) {
      scalar_t tail[L];
      gather_sum_tail(col, val, lo, hi, y, y_rows, w, j0, tail);
      for (int64_t j = 0; j < w - j0; ++j) {
        o[j0 + j] = tail[j] + o[j0 + j];
        v[j0 + j] = v[j0 + j] + o[j0 + j];
      }
    }
    if (out_rows != nullptr) out_rows[i] = any_nonzero(o, w);
  }
}

void check_common(const char* name, const at::Tensor& crow, const at::Tensor& col, const at::Tensor& val,
                  const at::Tensor& x, int64_t m, int64_t n, const at::Tensor& x_rows, const at::Tensor& out_rows) {
  TORCH_CHECK(crow.device().is_cpu() && x.device().is_cpu(), name, ": CPU tensors expected");
  TORCH_CHECK((crow.scalar_type() == at::kLong || crow.scalar_type() == at::kInt) &&
                  col.scalar_type() == crow.scalar_type(),
              name, ": int32 or int64 crow/col of one dtype expected");
  TORCH_CHECK(val.scalar_type() == x.scalar_type(), name, ": one float dtype expected");
  TORCH_CHECK(x.dim() == 2 && x.size(0) == n, name, ": a [", n, ", w] input expected (got ", x.sizes(), ")");
  TORCH_CHECK(x_rows.numel() == 0 || (x_rows.scalar_type() == at::kBool && x_rows.numel() == n), name,
              ": the input's row mask must be empty or bool [", n, "]");
  TORCH_CHECK(out_rows.numel() == 0 || (out_rows.scalar_type() == at::kBool && out_rows.numel() == m), name,
              ": out_rows must be empty or bool [", m, "]");
  for (const at::Tensor* t : std::initializer_list<const at::Tensor*>{&crow, &col, &val, &x, &x_rows, &out_rows})
    TORCH_CHECK(t->is_contiguous(), name, ": contiguous tensors expected");
}

void walk_product_out(const at::Tensor& crow, const at::Tensor& col, const at::Tensor& val, const at::Tensor& x,
                      const at::Tensor& x_rows, double alpha, at::Tensor out, at::Tensor out_rows) {
  const int64_t m = crow.numel() - 1;
  check_common("hpengine::walk_product_out", crow, col, val, x, m, x.size(0), x_rows, out_rows);
  const int64_t w = x.size(1);
  TORCH_CHECK(out.scalar_type() == x.scalar_type() && out.dim() == 2 && out.size(0) == m && out.size(1) == w &&
                  out.is_contiguous() && !out.is_same(x),
              "hpengine::walk_product_out: out must be a contiguous [", m, ", ", w, "] tensor, not x");
  if (m == 0 || w == 0) return;
  AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "hpengine_walk_product", [&] {
    AT_DISPATCH_INDEX_TYPES(crow.scalar_type(), "hpengine_walk_product_index", [&] {
      product_rows<scalar_t, index_t>(crow.data_ptr<index_t>(), col.data_ptr<index_t>(), val.data_ptr<scalar_t>(),
                                      x.data_ptr<scalar_t>(), x_rows.numel() ? x_rows.data_ptr<bool>() : nullptr,
                                      static_cast<scalar_t>(alpha), out.data_ptr<scalar_t>(),
                                      out_rows.numel() ? out_rows.data_ptr<bool>() : nullptr, m, w);
    });
  });
}

void walk_step_out(const at::Tensor& crow, const at::Tensor& col, const at::Tensor& val, const at::Tensor& y,
                   const at::Tensor& x, const at::Tensor& scale, const at::Tensor& rptr, const at::Tensor& rcol,
                   const at::Tensor& rval, const at::Tensor& y_rows, at::Tensor out, at::Tensor visits,
                   at::Tensor out_rows) {
  const int64_t m = crow.numel() - 1;
  check_common("hpengine::walk_step_out", crow, col, val, y, m, y.size(0), y_rows, out_rows);
  const int64_t w = x.size(1);
  const auto dt = x.scalar_type();
  TORCH_CHECK(rptr.scalar_type() == at::kLong && rcol.scalar_type() == at::kLong,
              "hpengine::walk_step_out: int64 rptr/rcol expected");
  TORCH_CHECK(y.scalar_type() == dt && scale.scalar_type() == dt && rval.scalar_type() == dt &&
                  out.scalar_type() == dt && visits.scalar_type() == dt,
              "hpengine::walk_step_out: one float dtype expected");
  TORCH_CHECK(x.dim() == 2 && y.size(1) == w && x.size(0) == m && out.sizes() == x.sizes() &&
                  visits.sizes() == x.sizes() && scale.numel() == m && rptr.numel() == m + 1 &&
                  rcol.numel() == rval.numel(),
              "hpengine::walk_step_out: x, out, visits [", m, ", w], y [n, w], scale [", m, "], rptr [", m + 1,
              "] expected");
  for (const at::Tensor* t : std::initializer_list<const at::Tensor*>{&x, &scale, &rptr, &rcol, &rval, &out, &visits})
    TORCH_CHECK(t->is_contiguous(), "hpengine::walk_step_out: contiguous tensors expected");
  TORCH_CHECK(!out.is_same(x) && !out.is_same(y) && !out.is_same(visits) && !visits.is_same(x),
              "hpengine::walk_step_out: out and visits must be distinct from x, y and each other");
  if (m == 0 || w == 0) return;
  AT_DISPATCH_FLOATING_TYPES(dt, "hpengine_walk_step", [&] {
    AT_DISPATCH_INDEX_TYPES(crow.scalar_type(), "hpengine_walk_step_index", [&] {
      step_rows<scalar_t, index_t>(crow.data_ptr<index_t>(), col.data_ptr<index_t>(), val.data_ptr<scalar_t>(),
                                   y.data_ptr<scalar_t>(), x.data_ptr<scalar_t>(), scale.data_ptr<scalar_t>(),
                                   rptr.data_ptr<int64_t>(), rcol.data_ptr<int64_t>(), rval.data_ptr<scalar_t>(),
                                   y_rows.numel() ? y_rows.data_ptr<bool>() : nullptr, out.data_ptr<scalar_t>(),
                                   visits.data_ptr<scalar_t>(), out_rows.numel() ? out_rows.data_ptr<bool>() : nullptr,
                                   m, w);
    });
  });
}

// Shapes only: the ops write their arguments in place.
void walk_product_meta(const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&,
                       double, at::Tensor, at::Tensor) {}
void walk_step_meta(const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&,
                    const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&,
                    at::Tensor, at::Tensor, at::Tensor) {}

}  // namespace

// A fragment: the namespace itself is defined by k_csr_addmm_cpu.cpp (one TORCH_LIBRARY per namespace).
TORCH_LIBRARY_FRAGMENT(hpengine, m) {
  m.def("walk_product_out(Tensor crow, Tensor col, Tensor val, Tensor x, Tensor x_rows, float alpha, "
        "Tensor(a!) out, Tensor(b!) out_rows) -> ()");
  m.def("walk_step_out(Tensor crow, Tensor col, Tensor val, Tensor y, Tensor x, Tensor scale, Tensor rptr, "
        "Tensor rcol, Tensor rval, Tensor y_rows, Tensor(a!) out, Tensor(b!) visits, Tensor(c!) out_rows) -> ()");
}

TORCH_LIBRARY_IMPL(hpengine, CPU, m) {
  m.impl("walk_product_out", &walk_product_out);
  m.impl("walk_step_out", &walk_step_out);
}

TORCH_LIBRARY_IMPL(hpengine, Meta, m) {
  m.impl("walk_product_out", &walk_product_meta);
  m.impl("walk_step_out", &walk_step_meta);
}
