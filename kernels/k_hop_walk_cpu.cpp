// One step of the hop's walk after its first product, fused, on the CPU (C++ with OpenMP).
//
//   walk_step_out(crow, col, val, y, x, scale, rptr, rcol, rval, out, visits)
//     out    = x * scale[:, None]          (the diagonal of W_s, removed)
//     out[i, rcol[k]] += rval[k]           for k in rptr[i] : rptr[i + 1], in that order (+ c r0)
//     out    = out + A @ y                 (A: CSR [m, n], y: [n, w])
//     visits = visits + out
//
// Equivalent PyTorch (the twin it is tested against, hpengine.sparse._dispatch.walk_step_torch):
//
//   torch.mul(x, scale.unsqueeze(1), out=out); out.view(-1).index_add_(0, flat, values)
//   torch.addmm(out, A, y, out=out); visits.add_(out)
//
// where (rptr, rcol, rval) is the restart list (flat = row * w + col) stably sorted by row, so each
// element receives its restart terms in index_add_'s order. Per element the product sums
// a_ik * y_kj in CSR order from zero without fused multiply-add (-ffp-contract=off), then adds the
// input, as k_csr_addmm_cpu.cpp and torch.addmm do: the same bits as the four passes, which this
// kernel replaces by one pass over each row of x, out and visits (they are [H, Qc] blocks of
// 100 MB and more at H = 100k; the walk's time is mostly those passes and the products' gathers).
// Rows are split over OpenMP threads with a static schedule.
#include <ATen/Dispatch.h>
#include <ATen/core/Tensor.h>
#include <torch/library.h>

#include <cstdint>
#include <initializer_list>

namespace {

template <typename scalar_t>
struct Vec {
  typedef scalar_t type __attribute__((vector_size(64)));
  static constexpr int lanes = 64 / sizeof(scalar_t);
  static type load(const scalar_t* p) {
    type v;
    __builtin_memcpy(&v, p, sizeof(v));
    return v;
  }
  static void store(scalar_t* p, type v) { __builtin_memcpy(p, &v, sizeof(v)); }
};

// Columns [j0, j0 + NV * lanes) of one row: o = acc + o (o holds the input), v += o.
template <int NV, typename scalar_t, typename index_t>
inline void row_vectors(const index_t* col, const scalar_t* val, int64_t lo, int64_t hi, const scalar_t* y,
                        scalar_t* o, scalar_t* v, int64_t w, int64_t j0) {
  using V = Vec<scalar_t>;
  typename V::type acc[NV];
  for (int u = 0; u < NV; ++u) acc[u] = typename V::type{};
  for (int64_t k = lo; k < hi; ++k) {
    const scalar_t a = val[k];
    const scalar_t* yr = y + static_cast<int64_t>(col[k]) * w + j0;
    for (int u = 0; u < NV; ++u) acc[u] += a * V::load(yr + u * V::lanes);
  }
  for (int u = 0; u < NV; ++u) {
    const int64_t j = j0 + u * V::lanes;
    const typename V::type r = acc[u] + V::load(o + j);
    V::store(o + j, r);
    V::store(v + j, V::load(v + j) + r);
  }
}

template <typename scalar_t, typename index_t>
inline void row_tail(const index_t* col, const scalar_t* val, int64_t lo, int64_t hi, const scalar_t* y,
                     scalar_t* o, scalar_t* v, int64_t w, int64_t j0) {
  scalar_t acc[Vec<scalar_t>::lanes];
  const int64_t n = w - j0;
  for (int64_t j = 0; j < n; ++j) acc[j] = scalar_t(0);
  for (int64_t k = lo; k < hi; ++k) {
    const scalar_t a = val[k];
    const scalar_t* yr = y + static_cast<int64_t>(col[k]) * w + j0;
    for (int64_t j = 0; j < n; ++j) acc[j] += a * yr[j];
  }
  for (int64_t j = 0; j < n; ++j) {
    o[j0 + j] = acc[j] + o[j0 + j];
    v[j0 + j] = v[j0 + j] + o[j0 + j];
  }
}

template <typename scalar_t, typename index_t>
void walk_rows(const index_t* crow, const index_t* col, const scalar_t* val, const scalar_t* y, const scalar_t* x,
               const scalar_t* scale, const int64_t* rptr, const int64_t* rcol, const scalar_t* rval, scalar_t* out,
               scalar_t* visits, int64_t m, int64_t w) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < m; ++i) {
    scalar_t* o = out + i * w;
    scalar_t* v = visits + i * w;
    const scalar_t* xi = x + i * w;
    const scalar_t s = scale[i];
    for (int64_t j = 0; j < w; ++j) o[j] = xi[j] * s;
    for (int64_t k = rptr[i]; k < rptr[i + 1]; ++k) o[rcol[k]] += rval[k];
    const int64_t lo = crow[i], hi = crow[i + 1];
    constexpr int64_t L = Vec<scalar_t>::lanes;
    int64_t j0 = 0;
    for (; j0 + 2 * L <= w; j0 += 2 * L) row_vectors<2>(col, val, lo, hi, y, o, v, w, j0);
    for (; j0 + L <= w; j0 += L) row_vectors<1>(col, val, lo, hi, y, o, v, w, j0);
    if (j0 < w) row_tail(col, val, lo, hi, y, o, v, w, j0);
  }
}

void walk_step_out(const at::Tensor& crow, const at::Tensor& col, const at::Tensor& val, const at::Tensor& y,
                   const at::Tensor& x, const at::Tensor& scale, const at::Tensor& rptr, const at::Tensor& rcol,
                   const at::Tensor& rval, at::Tensor out, at::Tensor visits) {
  const int64_t m = crow.numel() - 1, w = x.size(1);
  TORCH_CHECK(crow.device().is_cpu() && y.device().is_cpu() && x.device().is_cpu() && out.device().is_cpu(),
              "hpengine::walk_step_out: CPU tensors expected");
  TORCH_CHECK((crow.scalar_type() == at::kLong || crow.scalar_type() == at::kInt) &&
                  col.scalar_type() == crow.scalar_type() && rptr.scalar_type() == at::kLong &&
                  rcol.scalar_type() == at::kLong,
              "hpengine::walk_step_out: int32/int64 crow/col and int64 rptr/rcol expected");
  const auto dt = x.scalar_type();
  TORCH_CHECK(val.scalar_type() == dt && y.scalar_type() == dt && scale.scalar_type() == dt &&
                  rval.scalar_type() == dt && out.scalar_type() == dt && visits.scalar_type() == dt,
              "hpengine::walk_step_out: one float dtype expected");
  TORCH_CHECK(x.dim() == 2 && y.dim() == 2 && y.size(1) == w && x.size(0) == m && out.sizes() == x.sizes() &&
                  visits.sizes() == x.sizes() && scale.numel() == m && rptr.numel() == m + 1 &&
                  rcol.numel() == rval.numel(),
              "hpengine::walk_step_out: x, out, visits [", m, ", w], y [n, w], scale [", m, "], rptr [", m + 1,
              "] expected");
  for (const at::Tensor* t : std::initializer_list<const at::Tensor*>{&crow, &col, &val, &y, &x, &scale, &rptr,
                                                                         &rcol, &rval, &out, &visits})
    TORCH_CHECK(t->is_contiguous(), "hpengine::walk_step_out: contiguous tensors expected");
  TORCH_CHECK(!out.is_same(x) && !out.is_same(y) && !out.is_same(visits) && !visits.is_same(x),
              "hpengine::walk_step_out: out and visits must be distinct from x, y and each other");
  if (m == 0 || w == 0) return;
  AT_DISPATCH_FLOATING_TYPES(dt, "hpengine_walk_step", [&] {
    AT_DISPATCH_INDEX_TYPES(crow.scalar_type(), "hpengine_walk_step_index", [&] {
      walk_rows<scalar_t, index_t>(crow.data_ptr<index_t>(), col.data_ptr<index_t>(), val.data_ptr<scalar_t>(),
                                   y.data_ptr<scalar_t>(), x.data_ptr<scalar_t>(), scale.data_ptr<scalar_t>(),
                                   rptr.data_ptr<int64_t>(), rcol.data_ptr<int64_t>(), rval.data_ptr<scalar_t>(),
                                   out.data_ptr<scalar_t>(), visits.data_ptr<scalar_t>(), m, w);
    });
  });
}

// Shapes only: the op writes its arguments in place.
void walk_step_meta(const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&,
                    const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&, at::Tensor,
                    at::Tensor) {}

}  // namespace

// A fragment: the namespace itself is defined by k_csr_addmm_cpu.cpp (one TORCH_LIBRARY per namespace).
TORCH_LIBRARY_FRAGMENT(hpengine, m) {
  m.def("walk_step_out(Tensor crow, Tensor col, Tensor val, Tensor y, Tensor x, Tensor scale, Tensor rptr, "
        "Tensor rcol, Tensor rval, Tensor(a!) out, Tensor(b!) visits) -> ()");
}

TORCH_LIBRARY_IMPL(hpengine, CPU, m) { m.impl("walk_step_out", &walk_step_out); }

TORCH_LIBRARY_IMPL(hpengine, Meta, m) { m.impl("walk_step_out", &walk_step_meta); }
