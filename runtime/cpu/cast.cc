// CPU kernel for Cast, between every pair of element types: f32, f16, bf16, f64, i64, i32, i8,
// u8, bool, f8e4m3fn and f8e5m2. The conversions are runtime/cast_math.h's (shared with CUDA),
// which says how each pair rounds. A cast to the same type copies the bytes, NaN payloads
// included.
#include <cstring>
#include <type_traits>

#include "runtime/cast_math.h"
#include "runtime/cpu/broadcast.h"
#include "runtime/cpu/f16_convert.h"
#include "runtime/storage_type.h"

namespace ampc::runtime::cpu {
namespace {

// ---- Kernel -------------------------------------------------------------------------------

template <typename From, typename To>
void cast_elements(const TensorArg& in, const TensorArg& out, bool saturate) {
  const From* src = in.in<From>().data();
  To* dst = out.out<To>().data();
  parallel_for(out.num_elements(), kElementwiseGrain, [&](int64_t begin, int64_t end) {
    // f16 <-> f32 through F16C where the CPU has it: the same rounding (runtime/cpu/f16_convert.h).
    if constexpr (std::is_same_v<From, Float16> && std::is_same_v<To, float>) {
      widen_f16(src + begin, dst + begin, end - begin);
    } else if constexpr (std::is_same_v<From, float> && std::is_same_v<To, Float16>) {
      narrow_to_f16(src + begin, dst + begin, end - begin);
    } else {
      for (int64_t i = begin; i < end; ++i) dst[i] = cast_math::cast<From, To>(src[i], saturate);
    }
  });
}

template <typename From>
absl::Status cast_kernel(const KernelContext& ctx) {
  const TensorArg& in = ctx.input(0);
  const TensorArg& out = ctx.output(0);
  if (in.dtype() == out.dtype()) {
    if (in.data != out.data) std::memcpy(out.data, in.data, out.byte_size());
    return absl::OkStatus();
  }
  const bool saturate = ctx.node.int_attr("saturate") != 0;
  visit_storage_type(out.dtype(), [&]<typename To>(std::type_identity<To>) {
    cast_elements<From, To>(in, out, saturate);
  });
  return absl::OkStatus();
}

void register_cast_kernels(KernelRegistry& r) {
  for (DType dtype : kAllDTypes) {
    // Element i is read before it is written, at the same byte offset when the sizes match.
    KernelDef def = kernel_def("Cast", {.in_place_operand = 0});
    def.dtypes = {dtype};
    def.fn = visit_storage_type(
        dtype, []<typename From>(std::type_identity<From>) { return &cast_kernel<From>; });
    r.add(std::move(def));
  }
}

static KernelRegistration kCastKernels(&register_cast_kernels);

}  // namespace
}  // namespace ampc::runtime::cpu
