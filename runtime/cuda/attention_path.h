// Which kernels run ampc.Attention and ampc.AttentionGrad on CUDA (runtime/cuda/attention.cc),
// as the environment variable AMPC_CUDA_ATTENTION says. Host-only, so that the CPU tests read the
// same rule.
#pragma once

#include <string_view>

#include "ampc/status.h"
#include "compiler/strings.h"

namespace ampc::runtime::cuda {

enum class AttentionPath {
  kRows,       // `rows` (the default): ampc's row kernels, one query or key row per block
  kGemm,       // `gemm`: the scores on cuBLASLt where they fit the workspace, else the rows
  kCudnn,      // `cudnn`: cuDNN's fused attention where it applies, else as `gemm`
  kCudnnOnly,  // `cudnn-only`: cuDNN's fused attention, and an error at load where it does not
};

// The path `value` (the variable's value; null when unset) names.
inline absl::StatusOr<AttentionPath> parse_attention_path(const char* value) {
  if (value == nullptr) return AttentionPath::kRows;
  const std::string_view v(value);
  if (v == "rows") return AttentionPath::kRows;
  if (v == "gemm") return AttentionPath::kGemm;
  if (v == "cudnn") return AttentionPath::kCudnn;
  if (v == "cudnn-only") return AttentionPath::kCudnnOnly;
  return absl::InvalidArgumentError(str_cat("AMPC_CUDA_ATTENTION=", v,
                                            ": expected `rows` (the default), `gemm`, `cudnn` "
                                            "or `cudnn-only`"));
}

}  // namespace ampc::runtime::cuda
