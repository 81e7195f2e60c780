// CPU kernels for Pad, ampc.PadGrad and Tile (ops/pad.cc).
//
// Each output element of Pad reads the input element its index maps to, axis by axis: index
// o - begin, then, outside [0, n): constant mode writes the value (0 without one), reflect
// mirrors without repeating the edge (-1 -> 1, n -> n - 2), edge clamps, wrap takes the other end
// (-1 -> n - 1, n -> 0; pads up to n). Elements are copied as
// bytes, so every dtype is exact. PadGrad walks dY with the same map and adds each element into
// the dX element it was read from, in the compute type (f32 for f16 and bf16), in row-major
// order of dY, rounding each dX element once at the end; it runs on one thread, so its bits do
// not depend on the thread count.
#include <cstring>
#include <vector>

#include "compiler/strings.h"
#include "runtime/cpu/cpu_kernel_util.h"

namespace ampc::runtime::cpu {
namespace {

enum class Mode { kConstant, kReflect, kEdge, kWrap };

Mode mode_of(const Node& node) {
  const std::string& mode = node.string_attr("mode");
  if (mode == "reflect") return Mode::kReflect;
  if (mode == "edge") return Mode::kEdge;
  return mode == "wrap" ? Mode::kWrap : Mode::kConstant;
}

// The pads of every axis, [begin..., end...], from Pad's pads and axes operands.
std::vector<int64_t> full_pads(const KernelContext& ctx, int64_t rank) {
  const std::span<const int64_t> pads = ctx.input(1).in<int64_t>();
  std::vector<int64_t> axes;
  if (ctx.has_input(3)) {
    for (int64_t axis : ctx.input(3).in<int64_t>()) axes.push_back(axis < 0 ? axis + rank : axis);
  } else {
    for (int64_t d = 0; d < rank; ++d) axes.push_back(d);
  }
  const size_t n = axes.size();
  std::vector<int64_t> full(2 * rank, 0);
  for (size_t k = 0; k < n; ++k) {
    full[axes[k]] = pads[k];
    full[rank + axes[k]] = pads[n + k];
  }
  return full;
}

// The input index that output index `o` of an axis of size `n` with `begin` padding reads, or
// -1 for the constant.
int64_t source_index(int64_t o, int64_t begin, int64_t n, Mode mode) {
  int64_t i = o - begin;
  if (i >= 0 && i < n) return i;
  switch (mode) {
    case Mode::kConstant:
      return -1;
    case Mode::kReflect:
      return i < 0 ? -i : 2 * (n - 1) - i;  // pads < n: one reflection suffices
    case Mode::kEdge:
      return i < 0 ? 0 : n - 1;
    case Mode::kWrap:
      return i < 0 ? i + n : i - n;  // pads <= n: one wrap suffices
  }
  return -1;
}

// The input offset of each output element (-1: a constant), row-major over the output, where
// index(d, o) is the input index that output index o of axis d reads (-1: none).
template <typename IndexMap>
std::vector<int64_t> source_offsets(const Shape& in, const Shape& out, IndexMap index) {
  const int64_t rank = static_cast<int64_t>(in.size());
  std::vector<int64_t> offsets = {0};
  int64_t stride = 1;
  std::vector<int64_t> in_strides(rank);
  for (int64_t d = rank - 1; d >= 0; --d) {
    in_strides[d] = stride;
    stride *= in[d];
  }
  for (int64_t d = 0; d < rank; ++d) {
    std::vector<int64_t> next;
    next.reserve(offsets.size() * out[d]);
    for (int64_t base : offsets) {
      for (int64_t o = 0; o < out[d]; ++o) {
        const int64_t i = index(d, o);
        next.push_back(base < 0 || i < 0 ? -1 : base + i * in_strides[d]);
      }
    }
    offsets = std::move(next);
  }
  return offsets;
}

std::vector<int64_t> pad_offsets(const Shape& in, const Shape& out,
                                 const std::vector<int64_t>& pads, Mode mode) {
  return source_offsets(
      in, out, [&](int64_t d, int64_t o) { return source_index(o, pads[d], in[d], mode); });
}

template <typename Word>
absl::Status pad_kernel(const KernelContext& ctx) {
  const Shape& in_shape = ctx.input(0).shape();
  const std::vector<int64_t> pads = full_pads(ctx, static_cast<int64_t>(in_shape.size()));
  const std::vector<int64_t> offsets =
      pad_offsets(in_shape, ctx.output(0).shape(), pads, mode_of(ctx.node));
  Word value{0};
  if (ctx.has_input(2)) std::memcpy(&value, ctx.input(2).in<Word>().data(), sizeof(Word));
  const Word* in = ctx.input(0).in<Word>().data();
  Word* out = ctx.output(0).out<Word>().data();
  for (size_t k = 0; k < offsets.size(); ++k) out[k] = offsets[k] < 0 ? value : in[offsets[k]];
  return absl::OkStatus();
}

template <typename T>
absl::Status pad_grad_kernel(const KernelContext& ctx) {
  const Shape& x_shape = ctx.input(1).shape();
  const std::span<const int64_t> pads_in = ctx.input(2).in<int64_t>();
  const std::vector<int64_t> pads(pads_in.begin(), pads_in.end());
  const std::vector<int64_t> offsets =
      pad_offsets(x_shape, ctx.input(0).shape(), pads, mode_of(ctx.node));
  std::span<const T> dy = ctx.input(0).in<T>();
  std::span<T> dx = ctx.output(0).out<T>();
  std::vector<compute_t<T>> sums(dx.size(), compute_t<T>(0));
  for (size_t k = 0; k < offsets.size(); ++k) {
    if (offsets[k] >= 0) sums[offsets[k]] += load(dy[k]);
  }
  for (size_t i = 0; i < dx.size(); ++i) dx[i] = store<T>(sums[i]);
  return absl::OkStatus();
}

// Tile: output index o of an axis of size n reads input index o mod n; elements copied as bytes.
template <typename Word>
absl::Status tile_kernel(const KernelContext& ctx) {
  const Shape& in_shape = ctx.input(0).shape();
  const std::vector<int64_t> offsets = source_offsets(
      in_shape, ctx.output(0).shape(), [&](int64_t d, int64_t o) { return o % in_shape[d]; });
  const Word* in = ctx.input(0).in<Word>().data();
  Word* out = ctx.output(0).out<Word>().data();
  for (size_t k = 0; k < offsets.size(); ++k) out[k] = in[offsets[k]];
  return absl::OkStatus();
}

void register_pad_kernels(KernelRegistry& r) {
  add_kernels_by_element_size(r, kernel_def("Tile"),
                              []<typename Word>() { return &tile_kernel<Word>; });
  add_kernels_by_element_size(r, kernel_def("Pad"),
                              []<typename Word>() { return &pad_kernel<Word>; });
  add_kernels<float, double, Float16, BFloat16>(r, ampc_kernel_def("PadGrad"),
                                                []<typename T>() { return &pad_grad_kernel<T>; });
}

static KernelRegistration kPadKernels(&register_pad_kernels);

}  // namespace
}  // namespace ampc::runtime::cpu
