// f32 convolutions through oneDNN; runtime/cpu/onednn_conv.h states what runs where.
#include "runtime/cpu/onednn_conv.h"

#include <omp.h>

#include <cstdlib>
#include <oneapi/dnnl/dnnl.hpp>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "compiler/strings.h"
#include "runtime/cpu/cpu_kernel_util.h"
#include "runtime/cpu/gemm_core.h"
#include "runtime/cpu/window.h"

namespace ampc::runtime::cpu {
namespace {

using dnnl::memory;
using Dims = memory::dims;

const dnnl::engine& cpu_engine() {
  static const dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  return engine;
}

// Runs `fn` with the OpenMP thread count oneDNN reads set to cpu_threads(), then restores it.
template <typename Fn>
auto with_cpu_threads(Fn&& fn) {
  const int saved = omp_get_max_threads();
  const int wanted = cpu_threads();
  if (wanted != saved) omp_set_num_threads(wanted);
  struct Restore {
    int saved, wanted;
    ~Restore() {
      if (wanted != saved) omp_set_num_threads(saved);
    }
  } restore{saved, wanted};
  return fn();
}

// Whether AMPC_CPU_CONV lets oneDNN run convolutions.
absl::StatusOr<bool> onednn_allowed() {
  const char* value = std::getenv("AMPC_CPU_CONV");
  if (value == nullptr || std::string_view(value) == "onednn") return true;
  if (std::string_view(value) == "im2col") return false;
  return absl::InvalidArgumentError(
      str_cat("AMPC_CPU_CONV=", value, ": expected `onednn` (the default) or `im2col`"));
}

// Row-major strides of `dims`.
Dims dense_strides(const Dims& dims) {
  Dims strides(dims.size(), 1);
  for (int d = static_cast<int>(dims.size()) - 2; d >= 0; --d) {
    strides[d] = strides[d + 1] * dims[d + 1];
  }
  return strides;
}

memory::desc plain_f32(const Dims& dims) {
  return memory::desc(dims, memory::data_type::f32, dense_strides(dims));
}

memory::desc any_f32(const Dims& dims) {
  return memory::desc(dims, memory::data_type::f32, memory::format_tag::any);
}

// One tensor of the call: the operand or output `index` of the node, in the layout the
// primitive wants. When that differs from the plain NC... layout, a reorder moves it through
// `bytes` of workspace at `offset`.
struct StagedTensor {
  int dnnl_arg = 0;
  bool output = false;
  int index = 0;
  memory plain;
  memory blocked;         // empty when the primitive reads the plain layout
  dnnl::reorder reorder;  // plain -> blocked for an operand, blocked -> plain for an output
  int64_t offset = 0;
};

struct OnednnConvState final : KernelState {
  dnnl::stream stream;
  dnnl::primitive primitive;
  std::string kernel_name;
  std::vector<StagedTensor> tensors;
  memory scratchpad;
  int64_t scratchpad_offset = 0;
  std::unordered_map<int, memory> args;
};

// The convolution's geometry in oneDNN's terms: spatial dims only, dilation counted from 0.
struct Geometry {
  Dims x, w, y;  // [N, C, in...], [M, C / group, k...] or [G, M / G, C / G, k...], [N, M, out...]
  Dims strides, dilations, pad_begin, pad_end;
};

Geometry geometry(const Node& node, const Shape& x, const Shape& w, const Shape& y) {
  const std::vector<int64_t> kernel(w.begin() + 2, w.end());
  const Window win = resolve_window(node, x, y, kernel);
  const int64_t group = node.int_attr("group");
  const size_t rank = kernel.size(), lead = 3 - rank;
  Geometry g;
  g.x.assign(x.begin(), x.end());
  g.y.assign(y.begin(), y.end());
  if (group == 1) {
    g.w.assign(w.begin(), w.end());
  } else {
    g.w = {group, w[0] / group};
    g.w.insert(g.w.end(), w.begin() + 1, w.end());
  }
  for (size_t d = lead; d < 3; ++d) {
    g.strides.push_back(win.stride[d]);
    g.dilations.push_back(win.dilation[d] - 1);
    g.pad_begin.push_back(win.pad_begin[d]);
    g.pad_end.push_back(win.pad_end[d]);
  }
  return g;
}

// Reserves `bytes` of workspace after the first `used`, aligned as the GEMM core's buffers are;
// returns its offset.
int64_t reserve(int64_t& used, size_t bytes) {
  constexpr int64_t kAlign = WorkspaceCarver::kAlignment;
  const int64_t offset = (used + kAlign - 1) / kAlign * kAlign;
  used = offset + static_cast<int64_t>(bytes);
  return offset;
}

// Whether oneDNN's choice is one of its JIT convolution kernels.
bool is_jit_kernel(std::string_view name) {
  return name.find("gemm") == std::string_view::npos && name.rfind("ref", 0) != 0;
}

// Adds tensor `index` (an operand, or an output when `output`) as argument `dnnl_arg` of the
// primitive, which wants it as `wanted`.
void stage(OnednnConvState& state, int dnnl_arg, bool output, int index, const Dims& dims,
           const memory::desc& wanted, int64_t& workspace) {
  const dnnl::engine& engine = cpu_engine();
  StagedTensor t;
  t.dnnl_arg = dnnl_arg;
  t.output = output;
  t.index = index;
  const memory::desc plain = plain_f32(dims);
  t.plain = memory(plain, engine, DNNL_MEMORY_NONE);
  if (wanted == plain) {
    state.args[dnnl_arg] = t.plain;
  } else {
    t.blocked = memory(wanted, engine, DNNL_MEMORY_NONE);
    t.reorder = output ? dnnl::reorder(t.blocked, t.plain) : dnnl::reorder(t.plain, t.blocked);
    t.offset = reserve(workspace, wanted.get_size());
    state.args[dnnl_arg] = t.blocked;
  }
  state.tensors.push_back(std::move(t));
}

template <typename PrimitiveDesc, typename Primitive>
void finish(OnednnConvState& state, const PrimitiveDesc& pd, int64_t& workspace) {
  state.primitive = Primitive(pd);
  state.kernel_name = pd.impl_info_str();
  const memory::desc scratch = pd.scratchpad_desc();
  if (scratch.get_size() > 0) {
    state.scratchpad = memory(scratch, cpu_engine(), DNNL_MEMORY_NONE);
    state.scratchpad_offset = reserve(workspace, scratch.get_size());
    state.args[DNNL_ARG_SCRATCHPAD] = state.scratchpad;
  }
}

std::unique_ptr<OnednnConvState> make_state(const KernelContext& ctx, ConvPass pass) {
  const Node& node = ctx.node;
  const bool forward = pass == ConvPass::kForward;
  const Shape& x = pass == ConvPass::kGradData ? ctx.output(0).shape() : ctx.input(0).shape();
  const Shape& w = pass == ConvPass::kGradFilter ? ctx.output(0).shape() : ctx.input(1).shape();
  const Shape& y = forward                       ? ctx.output(0).shape()
                   : pass == ConvPass::kGradData ? ctx.input(0).shape()
                                                 : ctx.input(1).shape();
  const Geometry g = geometry(node, x, w, y);
  const bool bias = forward && ctx.has_input(2);
  const Dims bias_dims = {g.y[1]};
  const dnnl::engine& engine = cpu_engine();
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);

  // The forward descriptor: the primitive of Conv, and the hint the gradients' need.
  const dnnl::convolution_forward::desc forward_desc =
      bias ? dnnl::convolution_forward::desc(dnnl::prop_kind::forward_training,
                                             dnnl::algorithm::convolution_direct, any_f32(g.x),
                                             any_f32(g.w), plain_f32(bias_dims), any_f32(g.y),
                                             g.strides, g.dilations, g.pad_begin, g.pad_end)
           : dnnl::convolution_forward::desc(dnnl::prop_kind::forward_training,
                                             dnnl::algorithm::convolution_direct, any_f32(g.x),
                                             any_f32(g.w), any_f32(g.y), g.strides, g.dilations,
                                             g.pad_begin, g.pad_end);
  const dnnl::convolution_forward::primitive_desc forward_pd(forward_desc, attr, engine);

  auto state = std::make_unique<OnednnConvState>();
  int64_t workspace = 0;
  switch (pass) {
    case ConvPass::kForward: {
      if (!is_jit_kernel(forward_pd.impl_info_str())) return nullptr;
      stage(*state, DNNL_ARG_SRC, false, 0, g.x, forward_pd.src_desc(), workspace);
      stage(*state, DNNL_ARG_WEIGHTS, false, 1, g.w, forward_pd.weights_desc(), workspace);
      if (bias)
        stage(*state, DNNL_ARG_BIAS, false, 2, bias_dims, forward_pd.bias_desc(), workspace);
      stage(*state, DNNL_ARG_DST, true, 0, g.y, forward_pd.dst_desc(), workspace);
      finish<dnnl::convolution_forward::primitive_desc, dnnl::convolution_forward>(
          *state, forward_pd, workspace);
      break;
    }
    case ConvPass::kGradData: {
      const dnnl::convolution_backward_data::desc desc(
          dnnl::algorithm::convolution_direct, any_f32(g.x), any_f32(g.w), any_f32(g.y), g.strides,
          g.dilations, g.pad_begin, g.pad_end);
      const dnnl::convolution_backward_data::primitive_desc pd(desc, attr, engine, forward_pd);
      if (!is_jit_kernel(pd.impl_info_str())) return nullptr;
      stage(*state, DNNL_ARG_DIFF_DST, false, 0, g.y, pd.diff_dst_desc(), workspace);
      stage(*state, DNNL_ARG_WEIGHTS, false, 1, g.w, pd.weights_desc(), workspace);
      stage(*state, DNNL_ARG_DIFF_SRC, true, 0, g.x, pd.diff_src_desc(), workspace);
      finish<dnnl::convolution_backward_data::primitive_desc, dnnl::convolution_backward_data>(
          *state, pd, workspace);
      break;
    }
    case ConvPass::kGradFilter: {
      const dnnl::convolution_backward_weights::desc desc(
          dnnl::algorithm::convolution_direct, any_f32(g.x), any_f32(g.w), any_f32(g.y), g.strides,
          g.dilations, g.pad_begin, g.pad_end);
      const dnnl::convolution_backward_weights::primitive_desc pd(desc, attr, engine, forward_pd);
      if (!is_jit_kernel(pd.impl_info_str())) return nullptr;
      stage(*state, DNNL_ARG_SRC, false, 0, g.x, pd.src_desc(), workspace);
      stage(*state, DNNL_ARG_DIFF_DST, false, 1, g.y, pd.diff_dst_desc(), workspace);
      stage(*state, DNNL_ARG_DIFF_WEIGHTS, true, 0, g.w, pd.diff_weights_desc(), workspace);
      finish<dnnl::convolution_backward_weights::primitive_desc,
             dnnl::convolution_backward_weights>(*state, pd, workspace);
      break;
    }
  }
  state->stream = dnnl::stream(engine);
  state->workspace_bytes = workspace;  // offsets from the arena's base, which is aligned
  return state;
}

}  // namespace

absl::StatusOr<std::unique_ptr<KernelState>> make_onednn_conv(const KernelContext& ctx,
                                                              ConvPass pass) {
  AMPC_ASSIGN_OR_RETURN(const bool allowed, onednn_allowed());
  // An empty batch or image has nothing to compute; the im2col kernels handle it.
  for (const TensorArg& arg : ctx.inputs) {
    if (arg.present() && arg.num_elements() == 0) return nullptr;
  }
  if (!allowed || ctx.output(0).num_elements() == 0) return nullptr;
  try {
    return with_cpu_threads(
        [&]() -> std::unique_ptr<KernelState> { return make_state(ctx, pass); });
  } catch (const dnnl::error&) {
    // oneDNN has no kernel for this convolution: the im2col kernels run it.
    return nullptr;
  }
}

absl::Status run_onednn_conv(const KernelContext& ctx) {
  auto& state = static_cast<OnednnConvState&>(*ctx.state);
  try {
    with_cpu_threads([&] {
      for (StagedTensor& t : state.tensors) {
        const TensorArg& arg = t.output ? ctx.output(t.index) : ctx.input(t.index);
        t.plain.set_data_handle(arg.data);
        if (t.blocked) t.blocked.set_data_handle(ctx.workspace.data() + t.offset);
      }
      if (state.scratchpad) {
        state.scratchpad.set_data_handle(ctx.workspace.data() + state.scratchpad_offset);
      }
      for (StagedTensor& t : state.tensors) {
        if (t.blocked && !t.output) t.reorder.execute(state.stream, t.plain, t.blocked);
      }
      state.primitive.execute(state.stream, state.args);
      for (StagedTensor& t : state.tensors) {
        if (t.blocked && t.output) t.reorder.execute(state.stream, t.blocked, t.plain);
      }
      state.stream.wait();
    });
  } catch (const dnnl::error& e) {
    return absl::InternalError(str_cat("oneDNN ", state.kernel_name, ": ", e.what()));
  }
  return absl::OkStatus();
}

const char* onednn_conv_kernel_name(const KernelState& state) {
  return static_cast<const OnednnConvState&>(state).kernel_name.c_str();
}

}  // namespace ampc::runtime::cpu
