// The CUDA kernel of ampc.FusedElementwise: one generated kernel per distinct body and operand
// types (runtime/fused_codegen.h), compiled by NVRTC for the device at load, kept in the kernel
// cache (runtime/cuda/nvrtc.h), loaded as a CUDA library and launched like any other kernel.
// Numerics: those of the nodes the body replaced, as on the CPU (each instruction rounds to its
// dtype; no FMA contraction).
#include <cuda_runtime_api.h>

#include <algorithm>

#include "compiler/fused_body.h"
#include "compiler/strings.h"
#include "runtime/cuda/cuda_util.h"
#include "runtime/cuda/nvrtc.h"
#include "runtime/fused_codegen.h"

namespace ampc::runtime::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = 8192;  // the grid-stride loop covers the rest

struct FusedKernel : KernelState {
  cudaLibrary_t library = nullptr;
  cudaKernel_t kernel = nullptr;
  int num_outputs = 0;
  std::vector<BroadcastWindow> windows;
  int64_t size = 0;

  ~FusedKernel() override {
    if (library != nullptr) cudaLibraryUnload(library);
  }
};

// The compute capability of the current device (the backend's), as 90 for sm_90.
absl::StatusOr<int> device_arch() {
  int major = 0;
  int minor = 0;
  int device = 0;
  AMPC_CUDA_RETURN_IF_ERROR(cudaGetDevice(&device));
  AMPC_CUDA_RETURN_IF_ERROR(
      cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  AMPC_CUDA_RETURN_IF_ERROR(
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device));
  return major * 10 + minor;
}

absl::StatusOr<std::unique_ptr<KernelState>> init_fused(const KernelContext& ctx) {
  auto state = std::make_unique<FusedKernel>();
  const std::string& text = ctx.node.string_attr("body");
  AMPC_ASSIGN_OR_RETURN(const FusedBody body,
                        FusedBody::parse(text, static_cast<int>(ctx.inputs.size())));
  std::vector<DType> input_dtypes;
  const Shape& shape = ctx.output(0).shape();
  for (const TensorArg& input : ctx.inputs) {
    input_dtypes.push_back(input.dtype());
    std::optional<BroadcastWindow> window = broadcast_window(input.shape(), shape);
    if (!window) {
      return absl::InvalidArgumentError(str_cat("operand ", type_to_string(*input.type),
                                                " is not a block broadcast of ",
                                                shape_to_string(shape)));
    }
    state->windows.push_back(*window);
  }
  state->num_outputs = static_cast<int>(body.outputs.size());
  state->size = num_elements(shape);
  AMPC_ASSIGN_OR_RETURN(const int arch, device_arch());
  const std::string name = fused_kernel_name(fused_body_hash(text, input_dtypes));
  const std::string source = fused_cuda_source(body, input_dtypes, name);
  AMPC_ASSIGN_OR_RETURN(const std::string cubin,
                        cached_cubin(source, str_cat(name, "_sm", arch), arch));
  AMPC_CUDA_RETURN_IF_ERROR(
      cudaLibraryLoadData(&state->library, cubin.data(), nullptr, nullptr, 0, nullptr, nullptr, 0));
  AMPC_CUDA_RETURN_IF_ERROR(cudaLibraryGetKernel(&state->kernel, state->library, name.c_str()));
  return state;
}

absl::Status fused(const KernelContext& ctx) {
  const auto& state = static_cast<const FusedKernel&>(*ctx.state);
  if (state.size == 0) return absl::OkStatus();
  // The kernel's parameters (runtime/fused_codegen.h), and a pointer to each.
  long long n = state.size;
  std::vector<const void*> pointers;
  std::vector<long long> windows;
  for (size_t i = 0; i < ctx.inputs.size(); ++i) {
    pointers.push_back(ctx.inputs[i].data);
    windows.push_back(state.windows[i].inner);
    windows.push_back(state.windows[i].count);
  }
  for (int j = 0; j < state.num_outputs; ++j) pointers.push_back(ctx.outputs[j].data);
  std::vector<void*> args = {&n};
  for (size_t i = 0; i < ctx.inputs.size(); ++i) {
    args.push_back(&pointers[i]);
    args.push_back(&windows[2 * i]);
    args.push_back(&windows[2 * i + 1]);
  }
  for (int j = 0; j < state.num_outputs; ++j) args.push_back(&pointers[ctx.inputs.size() + j]);
  const int64_t blocks = std::min<int64_t>((state.size + kThreads - 1) / kThreads, kMaxBlocks);
  return launched(cudaLaunchKernel(reinterpret_cast<const void*>(state.kernel),
                                   dim3(static_cast<unsigned>(blocks)), dim3(kThreads), args.data(),
                                   0, stream_of(ctx)),
                  ctx);
}

void register_fused_kernels(KernelRegistry& r) {
  // Output 0 may take over operand 0's buffer: each thread reads its element of every operand
  // before it writes that element.
  r.add(cuda_ampc_kernel_def("FusedElementwise",
                             {DType::kF32, DType::kF16, DType::kBF16, DType::kBool}, &fused,
                             &init_fused, /*in_place_operand=*/0));
}

const KernelRegistration kFusedKernels(&register_fused_kernels);

}  // namespace
}  // namespace ampc::runtime::cuda
