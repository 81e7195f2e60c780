// f32 convolutions and their gradients through oneDNN's JIT kernels (Debian's libdnnl).
//
// Conv, ConvGradData and ConvGradFilter in f32 ask oneDNN at load for a direct convolution with
// the layouts it prefers (channels blocked by 8 or 16); when the kernel it picks is one of its
// JIT ones for this CPU (not its GEMM or reference fallbacks, which are slower than the im2col
// kernels), the node keeps that primitive as its KernelState and each call reorders the NC...
// operands into those layouts in the workspace, runs the primitive, and reorders the result back.
// Otherwise the node has no state and the im2col + GEMM kernels run (f64, f16 and bf16 always
// do).
//
// Accumulation contract: a GEMM-class reduction (docs/architecture.md): oneDNN sums each output's
// products in f32 in an order of its own, so results are within the length-scaled tolerance of
// the im2col kernels, not bit-equal to them; exact sums (small integers times powers of two) are
// exact either way. A plan's primitives are made and run with cpu_threads() threads, and give the
// same bits on every run with that count; the filter gradient splits its sum over the batch by
// thread, so its bits may depend on the count.
//
// AMPC_CPU_CONV=im2col in the environment keeps every node on the im2col kernels (for
// measurements and comparisons); any other value but `onednn` (the default) fails the load.
#pragma once

#include <memory>

#include "ampc/status.h"
#include "runtime/kernel.h"

namespace ampc::runtime::cpu {

enum class ConvPass { kForward, kGradData, kGradFilter };

// The state of an f32 convolution node: the oneDNN primitive for `pass`, or null when the node
// should run on the im2col kernels. Fails only for a bad AMPC_CPU_CONV.
absl::StatusOr<std::unique_ptr<KernelState>> make_onednn_conv(const KernelContext& ctx,
                                                              ConvPass pass);

// Runs the primitive `ctx.state` holds (made by make_onednn_conv) on ctx's tensors.
absl::Status run_onednn_conv(const KernelContext& ctx);

// The name of the oneDNN kernel `state` runs ("jit:avx512_core"), for tests and reports.
const char* onednn_conv_kernel_name(const KernelState& state);

}  // namespace ampc::runtime::cpu
