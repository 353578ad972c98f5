// CSR x dense product for hpengine's sparse chains on the CPU (C++ with OpenMP).
//
//   out = beta * input + alpha * (A @ x)        A: CSR [m, n], x: dense [n, w], input/out: [m, w]
//
// Equivalent PyTorch (the twin it is tested against, hpengine.sparse._dispatch.csr_addmm_torch):
//
//   torch.addmm(input, A, x, beta=beta, alpha=alpha, out=out)
//
// It is the hot product of PPR's iteration and of the hop's walk: w (questions of a chunk) is
// small (<= 32 on the CPU), so each output row's w accumulators stay in registers and each row of
// x gathered by a nonzero is one contiguous read. Rows are split over OpenMP threads (static
// schedule: the row ranges, hence the result, do not depend on the thread count).
//
// Accumulation order (records must not change): per output element, the products a_ik * x_kj are
// summed in CSR order starting from 0, in the tensor's dtype, without fused multiply-add; the sum
// is then scaled, acc * alpha, and beta * input is added (input is not read when beta == 0, as in
// torch.addmm). The build flags (-ffp-contract=off, hpengine/sparse/_dispatch.py) keep the compiler
// from contracting to FMA.
//
// Indices: int32 or int64 crow/col as the CSR stores them (hpengine builds int32 when they fit).
// out may be input (accumulate in place: each row's input is read before its output is written),
// never x.
// Only the ATen and registration headers (no torch/extension.h, no pybind11): the op is reached through
// torch.ops.hpengine, and the build on first use stays short.
#include <ATen/Dispatch.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <torch/library.h>

#include <algorithm>

#include "k_vec.h"

namespace {

// NV vectors of output columns [j0, j0 + NV * lanes) of one row: the accumulators stay in registers.
template <int NV, typename scalar_t, typename index_t>
inline void row_vectors(const index_t* col, const scalar_t* val, int64_t lo, int64_t hi, const scalar_t* x,
                        const scalar_t* in, scalar_t* o, int64_t w, int64_t j0, scalar_t beta, scalar_t alpha,
                        bool use_input) {
  using V = Vec<scalar_t>;
  typename V::type acc[NV];
  for (int v = 0; v < NV; ++v) acc[v] = typename V::type{} ;
  for (int64_t k = lo; k < hi; ++k) {
    const scalar_t a = val[k];
    const scalar_t* xr = x + static_cast<int64_t>(col[k]) * w + j0;
    for (int v = 0; v < NV; ++v) acc[v] += a * V::load(xr + v * V::lanes);
  }
  for (int v = 0; v < NV; ++v) {
    typename V::type r = acc[v] * alpha;
    if (use_input) r += beta * V::load(in + j0 + v * V::lanes);
    V::store(o + j0 + v * V::lanes, r);
  }
}

// The columns [j0, w) left over (fewer than one vector), one scalar accumulator each.
template <typename scalar_t, typename index_t>
inline void row_tail(const index_t* col, const scalar_t* val, int64_t lo, int64_t hi, const scalar_t* x,
                     const scalar_t* in, scalar_t* o, int64_t w, int64_t j0, scalar_t beta, scalar_t alpha,
                     bool use_input) {
  scalar_t acc[Vec<scalar_t>::lanes];
  const int64_t n = w - j0;
  for (int64_t j = 0; j < n; ++j) acc[j] = scalar_t(0);
  for (int64_t k = lo; k < hi; ++k) {
    const scalar_t a = val[k];
    const scalar_t* xr = x + static_cast<int64_t>(col[k]) * w + j0;
    for (int64_t j = 0; j < n; ++j) acc[j] += a * xr[j];
  }
  for (int64_t j = 0; j < n; ++j) o[j0 + j] = use_input ? acc[j] * alpha + beta * in[j0 + j] : acc[j] * alpha;
}

template <typename scalar_t, typename index_t>
void addmm_rows(const index_t* crow, const index_t* col, const scalar_t* val, const scalar_t* x,
                const scalar_t* input, scalar_t* out, int64_t m, int64_t w, scalar_t beta, scalar_t alpha,
                bool use_input) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < m; ++i) {
    const int64_t lo = crow[i], hi = crow[i + 1];
    const scalar_t* in = use_input ? input + i * w : nullptr;
    scalar_t* o = out + i * w;
    constexpr int64_t L = Vec<scalar_t>::lanes;
    int64_t j0 = 0;
    for (; j0 + 2 * L <= w; j0 += 2 * L) row_vectors<2>(col, val, lo, hi, x, in, o, w, j0, beta, alpha, use_input);
    for (; j0 + L <= w; j0 += L) row_vectors<1>(col, val, lo, hi, x, in, o, w, j0, beta, alpha, use_input);
    if (j0 < w) row_tail(col, val, lo, hi, x, in, o, w, j0, beta, alpha, use_input);
  }
}

void check(const at::Tensor& crow, const at::Tensor& col, const at::Tensor& val, const at::Tensor& x,
           const at::Tensor& input, const at::Tensor& out) {
  TORCH_CHECK(crow.device().is_cpu() && x.device().is_cpu() && out.device().is_cpu(),
              "hpengine::csr_addmm: CPU tensors expected (got ", x.device(), ")");
  TORCH_CHECK((crow.scalar_type() == at::kLong || crow.scalar_type() == at::kInt) &&
                  col.scalar_type() == crow.scalar_type(),
              "hpengine::csr_addmm: int32 or int64 crow/col of one dtype expected (got ", crow.scalar_type(), ", ",
              col.scalar_type(), ")");
  TORCH_CHECK(x.dim() == 2 && out.dim() == 2 && input.dim() == 2, "hpengine::csr_addmm: 2-D x, input, out expected");
  TORCH_CHECK(val.scalar_type() == x.scalar_type() && out.scalar_type() == x.scalar_type() &&
                  input.scalar_type() == x.scalar_type(),
              "hpengine::csr_addmm: one float dtype expected (got ", val.scalar_type(), ", ", x.scalar_type(), ")");
  TORCH_CHECK(x.is_contiguous() && out.is_contiguous() && input.is_contiguous() && crow.is_contiguous() &&
                  col.is_contiguous() && val.is_contiguous(),
              "hpengine::csr_addmm: contiguous tensors expected");
  const int64_t m = crow.numel() - 1;
  TORCH_CHECK(out.size(0) == m && out.size(1) == x.size(1) && input.sizes() == out.sizes(),
              "hpengine::csr_addmm: out/input must be [", m, ", ", x.size(1), "] (got ", out.sizes(), ")");
  TORCH_CHECK(!out.is_same(x), "hpengine::csr_addmm: out must not be x");
}

// out = beta * input + alpha * (A @ x), in place into out (which may be input).
void csr_addmm_out(const at::Tensor& crow, const at::Tensor& col, const at::Tensor& val, const at::Tensor& x,
                   const at::Tensor& input, double beta, double alpha, at::Tensor& out) {
  check(crow, col, val, x, input, out);
  const int64_t m = crow.numel() - 1, w = x.size(1);
  if (m == 0 || w == 0) return;
  AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "hpengine_csr_addmm", [&] {
    AT_DISPATCH_INDEX_TYPES(crow.scalar_type(), "hpengine_csr_addmm_index", [&] {
      addmm_rows<scalar_t, index_t>(crow.data_ptr<index_t>(), col.data_ptr<index_t>(), val.data_ptr<scalar_t>(),
                                    x.data_ptr<scalar_t>(), input.data_ptr<scalar_t>(), out.data_ptr<scalar_t>(), m,
                                    w, static_cast<scalar_t>(beta), static_cast<scalar_t>(alpha), beta != 0.0);
    });
  });
}

// Functional form (what torch.compile traces): a new [m, w] tensor.
at::Tensor csr_addmm(const at::Tensor& crow, const at::Tensor& col, const at::Tensor& val, const at::Tensor& x,
                     const at::Tensor& input, double beta, double alpha) {
  at::Tensor out = at::empty({crow.numel() - 1, x.size(1)}, x.options());
  csr_addmm_out(crow, col, val, x.contiguous(), input.contiguous(), beta, alpha, out);
  return out;
}

// Shapes only (meta/fake tensors: what torch.compile traces with).
at::Tensor csr_addmm_meta(const at::Tensor& crow, const at::Tensor& col, const at::Tensor& val, const at::Tensor& x,
                          const at::Tensor& input, double beta, double alpha) {
  return at::empty({crow.size(0) - 1, x.size(1)}, x.options());
}

}  // namespace

TORCH_LIBRARY(hpengine, m) {
  m.def("csr_addmm(Tensor crow, Tensor col, Tensor val, Tensor x, Tensor input, float beta, float alpha) -> Tensor");
  m.def("csr_addmm_out(Tensor crow, Tensor col, Tensor val, Tensor x, Tensor input, float beta, float alpha, "
        "Tensor(a!) out) -> ()");
}

TORCH_LIBRARY_IMPL(hpengine, CPU, m) {
  m.impl("csr_addmm", &csr_addmm);
  m.impl("csr_addmm_out", [](const at::Tensor& crow, const at::Tensor& col, const at::Tensor& val,
                             const at::Tensor& x, const at::Tensor& input, double beta, double alpha,
                             at::Tensor out) { csr_addmm_out(crow, col, val, x, input, beta, alpha, out); });
}

TORCH_LIBRARY_IMPL(hpengine, Meta, m) { m.impl("csr_addmm", &csr_addmm_meta); }
