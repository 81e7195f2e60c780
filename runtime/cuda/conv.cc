// CUDA kernels of Conv and its gradients ConvGradData and ConvGradFilter (cuDNN), and of
// BatchNormalization (own kernels): registration, descriptors and algorithms made once at load,
// launches.
//
// Conv: 1-D convolutions run as 2-D ones over a height of 1, 3-D ones as 3-D; groups, strides
// and dilations go into the convolution descriptor. cuDNN pads symmetrically, so where a dim's
// pads differ (explicit pads, or the odd pad of SAME_UPPER / SAME_LOWER) the shared part stays in
// the descriptor and X is first copied into the workspace with the difference made explicit
// (zeros). The forward algorithm is chosen once by cuDNN's heuristics
// (cudnnGetConvolutionForwardAlgorithm_v7), its workspace counted in the state. Numerics: f32
// accumulation everywhere (compute type CUDNN_DATA_FLOAT); f32 data uses FMA math only (no TF32)
// unless ExecutionContext::allow_tf32. The bias is written into Y first (an exact broadcast
// copy) and the convolution blends onto it (beta = 1), so acc + b is formed before Y is rounded
// to f16/bf16, as the CPU's y = store(acc + b).
//
// BatchNormalization: cuDNN's batch norm computes y through a reciprocal square root and moves
// the running variance by the unbiased batch variance, and the CPU kernel
// (runtime/cpu/normalization.cc) does neither, so it runs pool_kernels.cu's kernels: the CPU's
// per-element formula operation by operation (bit-exact in inference), batch statistics in f32
// with one block per channel in training, and the running statistics as the CPU moves them
// (biased variance; the batchnorm-state pass rescales for PyTorch's convention in the graph).
#include <algorithm>
#include <climits>
#include <vector>

#include "compiler/strings.h"
#include "runtime/cpu/window.h"
#include "runtime/cuda/cuda_util.h"
#include "runtime/cuda/pool_kernels.h"

namespace ampc::runtime::cuda {
namespace {

constexpr int64_t kWorkspaceAlignment = 256;
// Algorithms asking for more scratch than this (FFT on large images) are passed over.
constexpr size_t kMaxConvWorkspaceBytes = size_t{1} << 30;

int64_t align_up(int64_t bytes) {
  return (bytes + kWorkspaceAlignment - 1) / kWorkspaceAlignment * kWorkspaceAlignment;
}

cudnnHandle_t cudnn_of(const KernelContext& ctx) {
  return static_cast<cudnnHandle_t>(ctx.exec->cudnn);
}

absl::StatusOr<cudnnDataType_t> cudnn_type(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return CUDNN_DATA_FLOAT;
    case DType::kF16:
      return CUDNN_DATA_HALF;
    case DType::kBF16:
      return CUDNN_DATA_BFLOAT16;
    default:
      return absl::UnimplementedError(
          str_cat("no cuDNN convolution for ", dtype_name(dtype), " (f32, f16, bf16)"));
  }
}

// ---- Conv ------------------------------------------------------------------------------------

struct ConvState : KernelState {
  ~ConvState() override {
    if (conv_desc != nullptr) cudnnDestroyConvolutionDescriptor(conv_desc);
    if (w_desc != nullptr) cudnnDestroyFilterDescriptor(w_desc);
    if (bias_desc != nullptr) cudnnDestroyTensorDescriptor(bias_desc);
    if (y_desc != nullptr) cudnnDestroyTensorDescriptor(y_desc);
    if (x_desc != nullptr) cudnnDestroyTensorDescriptor(x_desc);
  }

  bool empty = false;  // Y has no elements: nothing to run
  cudnnTensorDescriptor_t x_desc = nullptr;
  cudnnTensorDescriptor_t y_desc = nullptr;
  cudnnTensorDescriptor_t bias_desc = nullptr;
  cudnnFilterDescriptor_t w_desc = nullptr;
  cudnnConvolutionDescriptor_t conv_desc = nullptr;
  cudnnConvolutionFwdAlgo_t algo = CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM;
  size_t algo_workspace_bytes = 0;
  // X copied into the workspace with the asymmetric part of the pads (pad_input), the
  // algorithm's workspace after it at algo_workspace_offset.
  bool pad_input = false;
  int element_bytes = 0;
  int64_t planes = 0;
  int64_t in[3] = {1, 1, 1};
  int64_t padded[3] = {1, 1, 1};
  int64_t extra_begin[3] = {0, 0, 0};
  int64_t algo_workspace_offset = 0;
  // The backward algorithms (ConvGradData, ConvGradFilter).
  cudnnConvolutionBwdDataAlgo_t data_algo = CUDNN_CONVOLUTION_BWD_DATA_ALGO_1;
  cudnnConvolutionBwdFilterAlgo_t filter_algo = CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1;
  bool strict_f32 = false;
  cudnnDataType_t type = CUDNN_DATA_FLOAT;
  std::vector<int64_t> y_dims;
};

absl::StatusOr<int> to_int(int64_t value, std::string_view what) {
  if (value < 0 || value > INT_MAX) {
    return absl::UnimplementedError(str_cat(what, " ", value, " does not fit cuDNN's int"));
  }
  return static_cast<int>(value);
}

// Dims [lead..., spatial...] as cuDNN's ints, with packed row-major strides.
struct NdDims {
  std::vector<int> dims;
  std::vector<int> strides;
};

absl::StatusOr<NdDims> nd_dims(const std::vector<int64_t>& dims, std::string_view what) {
  NdDims nd;
  for (int64_t dim : dims) {
    AMPC_ASSIGN_OR_RETURN(int value, to_int(dim, what));
    nd.dims.push_back(value);
  }
  nd.strides.assign(dims.size(), 1);
  int64_t stride = 1;
  for (size_t d = dims.size(); d-- > 0;) {
    AMPC_ASSIGN_OR_RETURN(nd.strides[d], to_int(stride, what));
    stride *= dims[d];
  }
  return nd;
}

absl::Status set_tensor(cudnnTensorDescriptor_t desc, cudnnDataType_t type,
                        const std::vector<int64_t>& dims, std::string_view what) {
  AMPC_ASSIGN_OR_RETURN(NdDims nd, nd_dims(dims, what));
  AMPC_CUDNN_RETURN_IF_ERROR(cudnnSetTensorNdDescriptor(
      desc, type, static_cast<int>(nd.dims.size()), nd.dims.data(), nd.strides.data()));
  return absl::OkStatus();
}

std::string describe_conv(std::string_view op, const Shape& x, const Shape& w_shape, const Shape& y,
                          DType dtype, const cpu::Window& w, int64_t group) {
  auto dims = [](const cpu::Window::Dims& d) { return str_join(d, ","); };
  return str_cat(op, " X ", shape_to_string(x), " W ", shape_to_string(w_shape), " Y ",
                 shape_to_string(y), " ", dtype_name(dtype), " (group ", group, ", strides [",
                 dims(w.stride), "], dilations [", dims(w.dilation), "], pads [", dims(w.pad_begin),
                 "] [", dims(w.pad_end), "])");
}

// Picks the first heuristic algorithm whose math keeps the numeric contract and whose workspace
// is bounded, and sets the descriptor's math type to it.
absl::Status choose_algorithm(const KernelContext& ctx, ConvState& s, bool strict_f32,
                              std::string_view described) {
  cudnnHandle_t handle = cudnn_of(ctx);
  int max_count = 0;
  AMPC_CUDNN_RETURN_IF_ERROR(cudnnGetConvolutionForwardAlgorithmMaxCount(handle, &max_count));
  std::vector<cudnnConvolutionFwdAlgoPerf_t> perf(std::max(max_count, 1));
  int returned = 0;
  AMPC_CUDNN_RETURN_IF_ERROR(cudnnGetConvolutionForwardAlgorithm_v7(
      handle, s.x_desc, s.w_desc, s.conv_desc, s.y_desc, static_cast<int>(perf.size()), &returned,
      perf.data()));
  for (int i = 0; i < returned; ++i) {
    const cudnnConvolutionFwdAlgoPerf_t& p = perf[i];
    if (p.status != CUDNN_STATUS_SUCCESS || p.memory > kMaxConvWorkspaceBytes) continue;
    // No TF32 for f32 unless allowed (the descriptor stays on FMA math, which rules out tensor
    // cores whatever the heuristic reports); no down-conversion of the f32 compute type anywhere.
    if (p.mathType == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION ||
        (strict_f32 && p.mathType == CUDNN_TENSOR_OP_MATH)) {
      continue;
    }
    const cudnnMathType_t math = strict_f32 ? CUDNN_FMA_MATH : p.mathType;
    if (cudnnSetConvolutionMathType(s.conv_desc, math) != CUDNN_STATUS_SUCCESS) continue;
    size_t bytes = 0;
    if (cudnnGetConvolutionForwardWorkspaceSize(handle, s.x_desc, s.w_desc, s.conv_desc, s.y_desc,
                                                p.algo, &bytes) != CUDNN_STATUS_SUCCESS ||
        bytes > kMaxConvWorkspaceBytes) {
      continue;
    }
    s.algo = p.algo;
    s.algo_workspace_bytes = bytes;
    return absl::OkStatus();
  }
  return absl::UnimplementedError(str_cat("cuDNN offers no forward algorithm for ", described,
                                          strict_f32 ? " with FMA math (TF32 not allowed)" : "",
                                          " within ", kMaxConvWorkspaceBytes,
                                          " bytes of workspace"));
}

// The descriptors of the convolution of X [N, C, ...] by W [M, C/group, k...] into Y [N, M, ...]
// as `ctx.node`'s attributes (and the window they resolve to) say, with X padded
// asymmetrically where cuDNN's symmetric pads fall short. `s.empty` when Y or X is empty.
absl::Status make_conv(const KernelContext& ctx, std::string_view op, const Shape& x,
                       const Shape& w_shape, const Shape& y, DType dtype, ConvState& s,
                       std::string& described) {
  const Node& node = ctx.node;
  AMPC_ASSIGN_OR_RETURN(cudnnDataType_t type, cudnn_type(dtype));
  const cpu::Window w =
      cpu::resolve_window(node, x, y, std::vector<int64_t>(w_shape.begin() + 2, w_shape.end()));
  const int64_t group = node.int_attr("group");
  described = describe_conv(op, x, w_shape, y, dtype, w, group);
  if (num_elements(y) == 0 || num_elements(x) == 0) {
    s.empty = true;
    return absl::OkStatus();
  }
  if (num_elements(w_shape) == 0) {
    return absl::UnimplementedError(str_cat("empty operands are not supported: ", described));
  }

  // cuDNN takes 2-D or 3-D convolutions: 1-D ones get a leading spatial dim of 1. The window's
  // dims are already widened to 3 that way.
  const int nd = x.size() == 5 ? 3 : 2;
  const int first = 3 - nd;
  std::vector<int> pads, strides, dilations;
  std::vector<int64_t> x_dims = {x[0], x[1]}, y_dims = {y[0], y[1]};
  std::vector<int64_t> w_dims = {w_shape[0], w_shape[1]};
  for (int d = 0; d < 3; ++d) {
    const int64_t shared = std::min(w.pad_begin[d], w.pad_end[d]);
    s.in[d] = w.in[d];
    s.extra_begin[d] = w.pad_begin[d] - shared;
    s.padded[d] = w.in[d] + w.pad_begin[d] + w.pad_end[d] - 2 * shared;
    s.pad_input |= s.padded[d] != s.in[d];
    if (d < first) continue;
    x_dims.push_back(s.padded[d]);
    y_dims.push_back(w.out[d]);
    w_dims.push_back(w.kernel[d]);
    AMPC_ASSIGN_OR_RETURN(int pad, to_int(shared, "pad"));
    AMPC_ASSIGN_OR_RETURN(int stride, to_int(w.stride[d], "stride"));
    AMPC_ASSIGN_OR_RETURN(int dilation, to_int(w.dilation[d], "dilation"));
    pads.push_back(pad);
    strides.push_back(stride);
    dilations.push_back(dilation);
  }
  s.element_bytes = dtype_size(dtype);
  s.planes = x[0] * x[1];

  AMPC_CUDNN_RETURN_IF_ERROR(cudnnCreateTensorDescriptor(&s.x_desc));
  AMPC_CUDNN_RETURN_IF_ERROR(cudnnCreateTensorDescriptor(&s.y_desc));
  AMPC_CUDNN_RETURN_IF_ERROR(cudnnCreateFilterDescriptor(&s.w_desc));
  AMPC_CUDNN_RETURN_IF_ERROR(cudnnCreateConvolutionDescriptor(&s.conv_desc));
  AMPC_RETURN_IF_ERROR(set_tensor(s.x_desc, type, x_dims, "a dim of X"));
  AMPC_RETURN_IF_ERROR(set_tensor(s.y_desc, type, y_dims, "a dim of Y"));
  AMPC_ASSIGN_OR_RETURN(NdDims filter, nd_dims(w_dims, "a dim of W"));
  AMPC_CUDNN_RETURN_IF_ERROR(cudnnSetFilterNdDescriptor(
      s.w_desc, type, CUDNN_TENSOR_NCHW, static_cast<int>(filter.dims.size()), filter.dims.data()));
  AMPC_CUDNN_RETURN_IF_ERROR(
      cudnnSetConvolutionNdDescriptor(s.conv_desc, nd, pads.data(), strides.data(),
                                      dilations.data(), CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
  AMPC_ASSIGN_OR_RETURN(int groups, to_int(group, "group"));
  AMPC_CUDNN_RETURN_IF_ERROR(cudnnSetConvolutionGroupCount(s.conv_desc, groups));
  s.strict_f32 = dtype == DType::kF32 && !ctx.exec->allow_tf32;
  AMPC_CUDNN_RETURN_IF_ERROR(cudnnSetConvolutionMathType(
      s.conv_desc, s.strict_f32
                       ? CUDNN_FMA_MATH
                       : (dtype == DType::kF32 ? CUDNN_DEFAULT_MATH : CUDNN_TENSOR_OP_MATH)));

  // cuDNN's output size must be the inferred one (the explicit pads make it so).
  std::vector<int> out_dims(y_dims.size());
  AMPC_CUDNN_RETURN_IF_ERROR(cudnnGetConvolutionNdForwardOutputDim(
      s.conv_desc, s.x_desc, s.w_desc, static_cast<int>(out_dims.size()), out_dims.data()));
  for (size_t d = 0; d < y_dims.size(); ++d) {
    if (out_dims[d] != y_dims[d]) {
      return absl::InternalError(str_cat("cuDNN computes output dims [", str_join(out_dims, ","),
                                         "] where [", str_join(y_dims, ","), "] were inferred for ",
                                         described));
    }
  }
  s.y_dims = y_dims;
  s.type = type;
  return absl::OkStatus();
}

// The workspace: X (or dX) padded first where the pads are asymmetric, then the algorithm's.
void size_workspace(ConvState& s) {
  if (s.pad_input) {
    s.algo_workspace_offset =
        align_up(s.planes * s.padded[0] * s.padded[1] * s.padded[2] * s.element_bytes);
  }
  s.workspace_bytes = s.algo_workspace_offset + static_cast<int64_t>(s.algo_workspace_bytes);
}

absl::StatusOr<std::unique_ptr<KernelState>> init_conv(const KernelContext& ctx) {
  auto state = std::make_unique<ConvState>();
  ConvState& s = *state;
  std::string described;
  AMPC_RETURN_IF_ERROR(make_conv(ctx, "Conv", ctx.input(0).shape(), ctx.input(1).shape(),
                                 ctx.output(0).shape(), ctx.input(0).dtype(), s, described));
  if (s.empty) return state;
  if (ctx.has_input(2)) {
    std::vector<int64_t> bias_dims(s.y_dims.size(), 1);
    bias_dims[1] = ctx.output(0).shape()[1];
    AMPC_CUDNN_RETURN_IF_ERROR(cudnnCreateTensorDescriptor(&s.bias_desc));
    AMPC_RETURN_IF_ERROR(set_tensor(s.bias_desc, s.type, bias_dims, "the size of B"));
  }
  AMPC_RETURN_IF_ERROR(choose_algorithm(ctx, s, s.strict_f32, described));
  size_workspace(s);
  return state;
}

absl::Status conv(const KernelContext& ctx) {
  const auto& s = static_cast<const ConvState&>(*ctx.state);
  if (s.empty) return absl::OkStatus();
  cudnnHandle_t handle = cudnn_of(ctx);
  const void* x = ctx.input(0).data;
  if (s.pad_input) {
    AMPC_RETURN_IF_ERROR(
        cuda_status(launch_conv_input_pad(s.element_bytes, x, ctx.workspace.data(), s.planes, s.in,
                                          s.padded, s.extra_begin, stream_of(ctx)),
                    "launching the Conv input padding kernel"));
    x = ctx.workspace.data();
  }
  void* algo_workspace =
      s.algo_workspace_bytes > 0 ? ctx.workspace.data() + s.algo_workspace_offset : nullptr;
  void* y = ctx.output(0).data;
  const float one = 1.0f, zero = 0.0f;
  float beta = 0.0f;
  if (ctx.has_input(2)) {
    // Y = B broadcast (beta 0: Y is not read), then the convolution blends onto it.
    AMPC_CUDNN_RETURN_IF_ERROR(
        cudnnAddTensor(handle, &one, s.bias_desc, ctx.input(2).data, &zero, s.y_desc, y));
    beta = 1.0f;
  }
  AMPC_CUDNN_RETURN_IF_ERROR(
      cudnnConvolutionForward(handle, &one, s.x_desc, x, s.w_desc, ctx.input(1).data, s.conv_desc,
                              s.algo, algo_workspace, s.algo_workspace_bytes, &beta, s.y_desc, y));
  return absl::OkStatus();
}

// ---- ConvGradData(dY, W) -> dX, ConvGradFilter(X, dY) -> dW ----------------------------------
//
// cuDNN's backward-data and backward-filter convolutions over the descriptors of the forward
// Conv the node was the gradient of (its X shape is dX's, its W shape dW's). Only algorithms
// cuDNN reports deterministic are taken, so two runs give the same bits; where the pads are
// asymmetric, dX is computed for the padded X in the workspace and its interior copied out, and
// X is padded into the workspace for dW, as the forward pads it.

// The first heuristic algorithm that is deterministic, keeps the numeric contract's math and
// fits the workspace bound; sets the descriptor's math type to it. `workspace(algo, bytes)` asks
// cuDNN for the algorithm's scratch.
template <typename Perf, typename Workspace>
absl::StatusOr<decltype(Perf{}.algo)> choose_backward(const std::vector<Perf>& perf, int returned,
                                                      ConvState& s, Workspace&& workspace,
                                                      std::string_view described) {
  for (int i = 0; i < returned; ++i) {
    const Perf& p = perf[i];
    if (p.status != CUDNN_STATUS_SUCCESS || p.memory > kMaxConvWorkspaceBytes ||
        p.determinism != CUDNN_DETERMINISTIC) {
      continue;
    }
    if (p.mathType == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION ||
        (s.strict_f32 && p.mathType == CUDNN_TENSOR_OP_MATH)) {
      continue;
    }
    const cudnnMathType_t math = s.strict_f32 ? CUDNN_FMA_MATH : p.mathType;
    if (cudnnSetConvolutionMathType(s.conv_desc, math) != CUDNN_STATUS_SUCCESS) continue;
    size_t bytes = 0;
    if (workspace(p.algo, bytes) != CUDNN_STATUS_SUCCESS || bytes > kMaxConvWorkspaceBytes) {
      continue;
    }
    s.algo_workspace_bytes = bytes;
    return p.algo;
  }
  return absl::UnimplementedError(str_cat("cuDNN offers no deterministic algorithm for ", described,
                                          s.strict_f32 ? " with FMA math (TF32 not allowed)" : "",
                                          " within ", kMaxConvWorkspaceBytes,
                                          " bytes of workspace"));
}

absl::StatusOr<std::unique_ptr<KernelState>> init_conv_grad_data(const KernelContext& ctx) {
  auto state = std::make_unique<ConvState>();
  ConvState& s = *state;
  std::string described;
  AMPC_RETURN_IF_ERROR(make_conv(ctx, "ConvGradData", ctx.output(0).shape(), ctx.input(1).shape(),
                                 ctx.input(0).shape(), ctx.input(0).dtype(), s, described));
  if (s.empty) return state;
  cudnnHandle_t handle = cudnn_of(ctx);
  int max_count = 0;
  AMPC_CUDNN_RETURN_IF_ERROR(cudnnGetConvolutionBackwardDataAlgorithmMaxCount(handle, &max_count));
  std::vector<cudnnConvolutionBwdDataAlgoPerf_t> perf(std::max(max_count, 1));
  int returned = 0;
  AMPC_CUDNN_RETURN_IF_ERROR(cudnnGetConvolutionBackwardDataAlgorithm_v7(
      handle, s.w_desc, s.y_desc, s.conv_desc, s.x_desc, static_cast<int>(perf.size()), &returned,
      perf.data()));
  AMPC_ASSIGN_OR_RETURN(s.data_algo, choose_backward(
                                         perf, returned, s,
                                         [&](cudnnConvolutionBwdDataAlgo_t algo, size_t& bytes) {
                                           return cudnnGetConvolutionBackwardDataWorkspaceSize(
                                               handle, s.w_desc, s.y_desc, s.conv_desc, s.x_desc,
                                               algo, &bytes);
                                         },
                                         described));
  size_workspace(s);
  return state;
}

absl::Status conv_grad_data(const KernelContext& ctx) {
  const auto& s = static_cast<const ConvState&>(*ctx.state);
  void* dx = ctx.output(0).data;
  if (s.empty) {
    return cuda_status(cudaMemsetAsync(dx, 0, ctx.output(0).byte_size(), stream_of(ctx)),
                       "cudaMemsetAsync for ConvGradData");
  }
  void* target = s.pad_input ? static_cast<void*>(ctx.workspace.data()) : dx;
  void* algo_workspace =
      s.algo_workspace_bytes > 0 ? ctx.workspace.data() + s.algo_workspace_offset : nullptr;
  const float one = 1.0f, zero = 0.0f;
  AMPC_CUDNN_RETURN_IF_ERROR(cudnnConvolutionBackwardData(
      cudnn_of(ctx), &one, s.w_desc, ctx.input(1).data, s.y_desc, ctx.input(0).data, s.conv_desc,
      s.data_algo, algo_workspace, s.algo_workspace_bytes, &zero, s.x_desc, target));
  if (s.pad_input) {
    AMPC_RETURN_IF_ERROR(
        cuda_status(launch_conv_input_crop(s.element_bytes, target, dx, s.planes, s.in, s.padded,
                                           s.extra_begin, stream_of(ctx)),
                    "launching the ConvGradData crop kernel"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<KernelState>> init_conv_grad_filter(const KernelContext& ctx) {
  auto state = std::make_unique<ConvState>();
  ConvState& s = *state;
  std::string described;
  AMPC_RETURN_IF_ERROR(make_conv(ctx, "ConvGradFilter", ctx.input(0).shape(), ctx.output(0).shape(),
                                 ctx.input(1).shape(), ctx.input(0).dtype(), s, described));
  if (s.empty) return state;
  cudnnHandle_t handle = cudnn_of(ctx);
  int max_count = 0;
  AMPC_CUDNN_RETURN_IF_ERROR(
      cudnnGetConvolutionBackwardFilterAlgorithmMaxCount(handle, &max_count));
  std::vector<cudnnConvolutionBwdFilterAlgoPerf_t> perf(std::max(max_count, 1));
  int returned = 0;
  AMPC_CUDNN_RETURN_IF_ERROR(cudnnGetConvolutionBackwardFilterAlgorithm_v7(
      handle, s.x_desc, s.y_desc, s.conv_desc, s.w_desc, static_cast<int>(perf.size()), &returned,
      perf.data()));
  AMPC_ASSIGN_OR_RETURN(s.filter_algo,
                        choose_backward(
                            perf, returned, s,
                            [&](cudnnConvolutionBwdFilterAlgo_t algo, size_t& bytes) {
                              return cudnnGetConvolutionBackwardFilterWorkspaceSize(
                                  handle, s.x_desc, s.y_desc, s.conv_desc, s.w_desc, algo, &bytes);
                            },
                            described));
  size_workspace(s);
  return state;
}

absl::Status conv_grad_filter(const KernelContext& ctx) {
  const auto& s = static_cast<const ConvState&>(*ctx.state);
  void* dw = ctx.output(0).data;
  if (s.empty) {
    return cuda_status(cudaMemsetAsync(dw, 0, ctx.output(0).byte_size(), stream_of(ctx)),
                       "cudaMemsetAsync for ConvGradFilter");
  }
  const void* x = ctx.input(0).data;
  if (s.pad_input) {
    AMPC_RETURN_IF_ERROR(
        cuda_status(launch_conv_input_pad(s.element_bytes, x, ctx.workspace.data(), s.planes, s.in,
                                          s.padded, s.extra_begin, stream_of(ctx)),
                    "launching the ConvGradFilter input padding kernel"));
    x = ctx.workspace.data();
  }
  void* algo_workspace =
      s.algo_workspace_bytes > 0 ? ctx.workspace.data() + s.algo_workspace_offset : nullptr;
  const float one = 1.0f, zero = 0.0f;
  AMPC_CUDNN_RETURN_IF_ERROR(cudnnConvolutionBackwardFilter(
      cudnn_of(ctx), &one, s.x_desc, x, s.y_desc, ctx.input(1).data, s.conv_desc, s.filter_algo,
      algo_workspace, s.algo_workspace_bytes, &zero, s.w_desc, dw));
  return absl::OkStatus();
}

// ---- BatchNormalization ----------------------------------------------------------------------

float float_attr_or(const Node& node, std::string_view name, float fallback) {
  const AttrValue* value = node.find_attr(name);
  if (value == nullptr) return fallback;
  if (const int64_t* integer = std::get_if<int64_t>(value)) return static_cast<float>(*integer);
  return std::get<float>(*value);
}

struct BatchNormState : KernelState {
  BatchNormShape shape;
  Elem param_type = Elem::kF32;
  Elem stats_type = Elem::kF32;
};

absl::StatusOr<Elem> float_elem(const TensorArg& arg, std::string_view what) {
  const DType dtype = arg.dtype();
  if (dtype != DType::kF32 && dtype != DType::kF16 && dtype != DType::kBF16) {
    return absl::UnimplementedError(str_cat("the cuda BatchNormalization kernel takes ", what,
                                            " in f32, f16 or bf16, not ", dtype_name(dtype)));
  }
  return *elem_of(dtype);
}

absl::StatusOr<std::unique_ptr<KernelState>> init_batch_norm(const KernelContext& ctx) {
  const Node& node = ctx.node;
  auto state = std::make_unique<BatchNormState>();
  AMPC_ASSIGN_OR_RETURN(state->param_type, float_elem(ctx.input(1), "scale and B"));
  AMPC_ASSIGN_OR_RETURN(state->stats_type, float_elem(ctx.input(3), "input_mean and input_var"));
  for (int i = 1; i <= 2; ++i) {
    if (ctx.has_output(i) && ctx.output(i).dtype() != ctx.input(3).dtype()) {
      return absl::InvalidArgumentError(str_cat(
          "output ", i, " is ", dtype_name(ctx.output(i).dtype()),
          "; the running statistics take input_mean's type ", dtype_name(ctx.input(3).dtype())));
    }
  }
  const Shape& shape = ctx.input(0).shape();
  BatchNormShape& s = state->shape;
  s.batch = shape[0];
  s.channels = shape.size() >= 2 ? shape[1] : 1;
  s.spatial = 1;
  for (size_t d = 2; d < shape.size(); ++d) s.spatial *= shape[d];
  // Every opset has training_mode: the importer records opsets 9-13's training form in it.
  const AttrValue* training = node.find_attr("training_mode");
  s.training = training != nullptr && std::get<int64_t>(*training) != 0;
  s.epsilon = float_attr_or(node, "epsilon", 1e-5f);
  s.momentum = float_attr_or(node, "momentum", 0.9f);
  state->workspace_bytes =
      batch_norm_table_floats(s.channels) * static_cast<int64_t>(sizeof(float));
  return state;
}

absl::Status batch_norm(const KernelContext& ctx) {
  const auto& state = static_cast<const BatchNormState&>(*ctx.state);
  void* running_mean = ctx.has_output(1) ? ctx.output(1).data : nullptr;
  void* running_var = ctx.has_output(2) ? ctx.output(2).data : nullptr;
  return cuda_status(
      launch_batch_norm(*elem_of(ctx.input(0).dtype()), state.param_type, state.stats_type,
                        ctx.input(0).data, ctx.input(1).data, ctx.input(2).data, ctx.input(3).data,
                        ctx.input(4).data, ctx.output(0).data, running_mean, running_var,
                        reinterpret_cast<float*>(ctx.workspace.data()), state.shape,
                        stream_of(ctx)),
      "launching the BatchNormalization kernels");
}

void register_cuda_conv_kernels(KernelRegistry& r) {
  KernelDef conv_def = cuda_kernel_def("Conv", kCudaFloatTypes, &conv);
  conv_def.init = &init_conv;
  r.add(std::move(conv_def));
  r.add(
      cuda_ampc_kernel_def("ConvGradData", kCudaFloatTypes, &conv_grad_data, &init_conv_grad_data));
  r.add(cuda_ampc_kernel_def("ConvGradFilter", kCudaFloatTypes, &conv_grad_filter,
                             &init_conv_grad_filter));
  // Y may take X's buffer: each element is read before its own output is written, and the
  // training statistics are complete before the first output is.
  KernelDef batch_norm_def = cuda_kernel_def("BatchNormalization", kCudaFloatTypes, &batch_norm,
                                             /*in_place_operand=*/0);
  batch_norm_def.init = &init_batch_norm;
  r.add(std::move(batch_norm_def));
}

static KernelRegistration kCudaConvKernels(&register_cuda_conv_kernels);

}  // namespace
}  // namespace ampc::runtime::cuda
