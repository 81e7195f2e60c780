// CUDA C++ for an ampc.FusedElementwise body, compiled at load by NVRTC (runtime/cuda/fused.cc).
//
// The source includes the project's own per-element math (runtime/numeric.h,
// runtime/gradient_math.h, ampc/float_types.h), handed to NVRTC as in-memory headers, so each
// formula exists once for the CPU kernels, the nvcc-built CUDA kernels and the generated ones.
// NVRTC has no C++ standard library; the few declarations those headers take from it come from
// small stand-ins (fused_cuda_headers()). Host code only: the source is built and compiled
// without a GPU, which is how the tests check it.
//
// The kernel, `extern "C" __global__ void NAME(...)`, takes in order:
//   long long n                                  the elements of the output shape
//   per operand i:  const T* xi, long long inner, long long count
//                   (element e reads xi[(e / inner) % count], compiler/fused_body.h's window)
//   per output j:   T* yj
// with T float, ampc::Float16, ampc::BFloat16 or bool by dtype, and runs a grid-stride loop.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "ampc/dtype.h"
#include "compiler/fused_body.h"

namespace ampc::runtime {

// "ampc_fused_" and the body hash in hex: the kernel's name, and its cache file's.
std::string fused_kernel_name(uint64_t body_hash);

// The kernel's source for `body` over operands of `input_dtypes`.
std::string fused_cuda_source(const FusedBody& body, const std::vector<DType>& input_dtypes,
                              std::string_view kernel_name);

// The headers the source includes, by include name.
struct SourceHeader {
  std::string_view name;
  std::string_view text;
};
const std::vector<SourceHeader>& fused_cuda_headers();

// The NVRTC options every fused kernel is compiled with (the architecture is added by the
// caller): C++17, and no FMA contraction, as for the nvcc-built element-wise kernels.
std::vector<std::string> fused_nvrtc_options();

}  // namespace ampc::runtime
