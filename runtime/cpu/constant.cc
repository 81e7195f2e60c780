// CPU kernels for the tensor generators: Constant, ConstantOfShape and Range.
//
// Constant and ConstantOfShape copy attribute bytes, so they serve every dtype (keyed on output
// 0, the only tensor whose type they have). Range computes in its element type, as the OpDef's
// fold does: start + i * delta, with i converted to the element type (f32 or f64), or in
// wrapping 64-bit integer arithmetic for integers (exact: every element lies between start and
// limit).
#include <algorithm>
#include <cstring>

#include "compiler/strings.h"
#include "ops/op_util.h"
#include "runtime/cpu/cpu_kernel_util.h"

namespace ampc::runtime::cpu {
namespace {

// ---- Constant ---------------------------------------------------------------------------------

using ops::constant_value;

absl::Status constant_kernel(const KernelContext& ctx) {
  AMPC_ASSIGN_OR_RETURN(const Tensor value, constant_value(ctx.node));
  if (!value.has_data()) {
    return absl::FailedPreconditionError(
        "the value's data was elided (text IR printed without large constants); it cannot run");
  }
  AMPC_CHECK(value.type() == *ctx.output(0).type);
  std::memcpy(ctx.output(0).data, value.bytes().data(), value.bytes().size());
  return absl::OkStatus();
}

// ---- ConstantOfShape --------------------------------------------------------------------------

// Every element is the one element of the `value` attribute (default: f32 0).
template <typename Word>
absl::Status constant_of_shape_kernel(const KernelContext& ctx) {
  const Tensor& value = ctx.node.tensor_attr("value");
  if (!value.has_data()) {
    return absl::FailedPreconditionError(
        "attribute 'value' has elided data (text IR printed without large constants)");
  }
  const Word element = value.data<Word>()[0];
  const std::span<Word> out = ctx.output(0).out<Word>();
  parallel_for(out.size(), kGrainElements, [&](int64_t begin, int64_t end) {
    std::fill(out.begin() + begin, out.begin() + end, element);
  });
  return absl::OkStatus();
}

// ---- Range ------------------------------------------------------------------------------------

// Element i is start + i * delta; the length was inferred at load from the same inputs.
template <typename T>
absl::Status range_kernel(const KernelContext& ctx) {
  const T start = ctx.input(0).in<T>()[0];
  const T delta = ctx.input(2).in<T>()[0];
  const std::span<T> out = ctx.output(0).out<T>();
  parallel_for(out.size(), kGrainElements, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      if constexpr (std::is_floating_point_v<T>) {
        out[i] = start + static_cast<T>(i) * delta;
      } else {
        // Unsigned, so a range spanning more than INT64_MAX does not overflow on the way.
        const uint64_t value = static_cast<uint64_t>(int64_t{start}) +
                               static_cast<uint64_t>(i) * static_cast<uint64_t>(int64_t{delta});
        out[i] = static_cast<T>(static_cast<int64_t>(value));
      }
    }
  });
  return absl::OkStatus();
}

void register_constant_kernels(KernelRegistry& r) {
  // Constant and ConstantOfShape have no data operand: their key is output 0.
  const KernelOptions keyed_on_output_0{.keyed_on = {.output = true, .index = 0}};
  add_kernel_for_all_dtypes(r, kernel_def("Constant", keyed_on_output_0), &constant_kernel);
  add_kernels_by_element_size(r, kernel_def("ConstantOfShape", keyed_on_output_0),
                              []<typename Word>() { return &constant_of_shape_kernel<Word>; });
  // The element types Range's OpDef admits.
  add_kernels<float, double, int32_t, int64_t>(r, kernel_def("Range"),
                                               []<typename T>() { return &range_kernel<T>; });
}

static KernelRegistration kConstantKernels(&register_constant_kernels);

}  // namespace
}  // namespace ampc::runtime::cpu
