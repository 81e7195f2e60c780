// Element-wise exponentials over arrays, for the CPU kernels whose time goes to exp: the fused
// element-wise kernel (Exp, Sigmoid), Softmax, the cross-entropy losses and attention.
//
// Each result is bit for bit the C library's expf (so the numeric contract's "transcendentals are
// those of the C library", docs/architecture.md, holds unchanged), but eight lanes at a time
// where the CPU has AVX2 and FMA: glibc computes expf in double precision from a 32-entry table
// of 2^(i/32) and a cubic, and on such CPUs it runs that method compiled with FMA; the vector
// form repeats the same operations in the same order, so it rounds the same double to f32.
// tests/runtime/cpu/vector_math_test.cc compares every f32 input. Without AVX2 and FMA, and for
// NaN inputs, the C library is called.
#pragma once

#include <cstdint>

namespace ampc::runtime::cpu {

// y[i] = std::exp(x[i]) for i < n; x and y may be the same array.
void exp_array(const float* x, float* y, int64_t n);
void exp_array(const double* x, double* y, int64_t n);

// y[i] = numeric::Sigmoid{}(x[i]) for i < n, bit for bit; x and y may be the same array.
void sigmoid_array(const float* x, float* y, int64_t n);
void sigmoid_array(const double* x, double* y, int64_t n);

}  // namespace ampc::runtime::cpu
