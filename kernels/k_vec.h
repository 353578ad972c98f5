// 64-byte vectors for the CPU kernels (GCC/Clang vector extensions: AVX-512 registers with
// -march=native on a machine that has them, pairs of AVX2 or SSE registers elsewhere); lane-wise,
// so the sum order per output element is the scalar loop's. Included by k_*_cpu.cpp (one
// translation unit each: the anonymous namespace keeps each copy private to it).
#pragma once

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

}  // namespace
