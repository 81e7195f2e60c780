// What the CPU kernels share: the element types they are written over, the compute type of
// each, typed registration, a parallel loop whose results do not depend on the thread count, and
// the strided copy of the byte-moving kernels.
//
// The numeric contract: a kernel over Float16 or BFloat16 converts each element it reads to f32,
// computes in f32 and rounds once when it stores (round to nearest even). f32 kernels compute in
// f32 and f64 kernels in f64. GEMM-like ops accumulate in f32 (f64 for f64).
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "ampc/float_types.h"
#include "runtime/element_types.h"
#include "runtime/kernel.h"

namespace ampc::runtime::cpu {

// The C++ type that stores one element of each DType the CPU kernels handle.
template <typename T>
constexpr DType dtype_of() {
  if constexpr (std::is_same_v<T, float>) return DType::kF32;
  if constexpr (std::is_same_v<T, double>) return DType::kF64;
  if constexpr (std::is_same_v<T, Float16>) return DType::kF16;
  if constexpr (std::is_same_v<T, BFloat16>) return DType::kBF16;
  if constexpr (std::is_same_v<T, int64_t>) return DType::kI64;
  if constexpr (std::is_same_v<T, int32_t>) return DType::kI32;
  if constexpr (std::is_same_v<T, int8_t>) return DType::kI8;
  if constexpr (std::is_same_v<T, uint8_t>) return DType::kU8;
  if constexpr (std::is_same_v<T, bool>) return DType::kBool;
}

// compute_t, load, store and is_float_v are runtime/element_types.h's, shared with CUDA.
using ampc::compute_t;
using ampc::is_float_v;
using ampc::load;
using ampc::store;

// What a KernelDef may say besides its op; every field has a default, so the designated form
// `{.in_place_operand = 0}` leaves the others out without -Wmissing-field-initializers (which
// KernelDef itself, whose strings and vectors have no initializers, would trigger).
struct KernelOptions {
  int in_place_operand = -1;  // as KernelDef documents
  WorkspaceFn workspace_bytes = nullptr;
  KeyedOn keyed_on = {};
  std::vector<int> in_place_operands = {};  // as KernelDef documents
};

// A CPU KernelDef of the standard-domain op `op`; the registration helpers below fill in its
// dtypes and kernel.
KernelDef kernel_def(std::string op, KernelOptions options = {});
// The same for an internal op of the ampc domain (gradients, optimizer updates).
KernelDef ampc_kernel_def(std::string op, KernelOptions options = {});

// decimal_attr and int_attr_or are runtime/kernel.h's, shared with CUDA.
using runtime::decimal_attr;
using runtime::int_attr_or;

// Element i of a float operand of any float element type, in the compute type C: for kernels
// whose operands may differ in dtype (f16 activations with f32 statistics).
template <typename C>
C read_as(const TensorArg& arg, int64_t i) {
  switch (arg.dtype()) {
    case DType::kF32:
      return static_cast<C>(arg.in<float>()[i]);
    case DType::kF64:
      return static_cast<C>(arg.in<double>()[i]);
    case DType::kF16:
      return static_cast<C>(static_cast<float>(arg.in<Float16>()[i]));
    case DType::kBF16:
      return static_cast<C>(static_cast<float>(arg.in<BFloat16>()[i]));
    default:
      AMPC_CHECK(false && "not a float operand");
  }
  return C(0);
}

// Every element of a float operand, in the compute type C.
template <typename C>
std::vector<C> read_all_as(const TensorArg& arg) {
  std::vector<C> values(arg.num_elements());
  for (int64_t i = 0; i < arg.num_elements(); ++i) values[i] = read_as<C>(arg, i);
  return values;
}

// Rounds `value` once into element i of a float output of any float element type.
template <typename C>
void write_as(const TensorArg& arg, int64_t i, C value) {
  switch (arg.dtype()) {
    case DType::kF32:
      arg.out<float>()[i] = static_cast<float>(value);
      return;
    case DType::kF64:
      arg.out<double>()[i] = static_cast<double>(value);
      return;
    case DType::kF16:
      arg.out<Float16>()[i] = Float16(static_cast<float>(value));
      return;
    case DType::kBF16:
      arg.out<BFloat16>()[i] = BFloat16(static_cast<float>(value));
      return;
    default:
      AMPC_CHECK(false && "not a float output");
  }
}

// Registers one KernelDef per type in Ts, each a copy of `base` keyed on that type, with the
// function `make.template operator()<T>()` returns:
//   add_kernels<float, double, Float16, BFloat16>(
//       registry, kernel_def("Relu"), []<typename T>() { return &relu<T>; });
template <typename... Ts, typename Make>
void add_kernels(KernelRegistry& registry, const KernelDef& base, Make make) {
  (
      [&] {
        KernelDef def = base;
        def.device = Device::kCpu;
        def.dtypes = {dtype_of<Ts>()};
        def.fn = make.template operator()<Ts>();
        registry.add(std::move(def));
      }(),
      ...);
}

// Registers `base` once per element size (1, 2, 4, 8 bytes), keyed on every DType of that size,
// with the kernel `make.template operator()<Word>()` that moves elements as Word: one kernel
// serves every dtype of a size, fp8 and bool included, since no value is converted.
template <typename Make>
void add_kernels_by_element_size(KernelRegistry& registry, const KernelDef& base, Make make) {
  auto add = [&]<typename Word>() {
    KernelDef def = base;
    def.device = Device::kCpu;
    def.dtypes.clear();
    for (DType dtype : kAllDTypes) {
      if (dtype_size(dtype) == sizeof(Word)) def.dtypes.push_back(dtype);
    }
    def.fn = make.template operator()<Word>();
    if (!def.dtypes.empty()) registry.add(std::move(def));
  };
  add.template operator()<uint8_t>();
  add.template operator()<uint16_t>();
  add.template operator()<uint32_t>();
  add.template operator()<uint64_t>();
}

// Registers `base` with the kernel `fn` for every DType: kernels that never look at elements.
void add_kernel_for_all_dtypes(KernelRegistry& registry, KernelDef base, KernelFn fn);

// Calls body(begin, end) on disjoint ranges covering [0, n), in parallel when n is at least
// `grain` per thread. Each index is handled by exactly one call and nothing is combined across
// calls, so a kernel that writes only its own indices gives the same bits on any thread count.
void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& body);

// The grains of the loops that only move or set data: elements, or bytes, per thread below which
// a loop stays on one thread.
constexpr int64_t kGrainElements = 1 << 16;
constexpr int64_t kGrainBytes = 1 << 20;

// The number of threads parallel_for uses (at least 1): OMP_NUM_THREADS when set, else one per
// core, unless set_cpu_threads says otherwise.
int cpu_threads();
// Sets it (0: back to the default). For tests that check results do not depend on it.
void set_cpu_threads(int threads);

// Elements per thread below which strided_copy stays on one thread.
inline constexpr int64_t kStridedCopyGrain = 1 << 16;

// out[o] = in[base + sum_d o_d * in_strides[d]] for every multi-index o of `out_shape`, walked
// in row-major order; rows of the last dim are split across threads. A stride is only ever
// multiplied by an index below its dim, so steps as large as INT64_MAX on dims of output size 1
// cannot overflow. A last dim of stride 0 (a broadcast) fills its row with one element.
template <typename Word>
void strided_copy(const Word* in, int64_t base, const std::vector<int64_t>& in_strides,
                  const Shape& out_shape, Word* out) {
  const int64_t total = num_elements(out_shape);
  if (total == 0) return;
  const int rank = static_cast<int>(out_shape.size());
  const int64_t inner = rank == 0 ? 1 : out_shape[rank - 1];
  const int64_t inner_stride = rank == 0 ? 0 : in_strides[rank - 1];
  const int64_t rows = total / inner;
  const int64_t grain = std::max<int64_t>(1, kStridedCopyGrain / inner);
  parallel_for(rows, grain, [&](int64_t begin, int64_t end) {
    std::vector<int64_t> index(std::max(rank - 1, 0), 0);
    int64_t offset = base;
    for (int64_t d = rank - 2, rest = begin; d >= 0; --d) {
      index[d] = rest % out_shape[d];
      rest /= out_shape[d];
      offset += index[d] * in_strides[d];
    }
    for (int64_t row = begin; row < end; ++row) {
      Word* dst = out + row * inner;
      const Word* src = in + offset;
      if (inner_stride == 1) {
        std::copy_n(src, inner, dst);
      } else if (inner_stride == 0) {
        std::fill_n(dst, inner, *src);
      } else {
        for (int64_t j = 0; j < inner; ++j) dst[j] = src[j * inner_stride];
      }
      for (int d = rank - 2; d >= 0; --d) {  // the next row's multi-index and offset
        if (++index[d] < out_shape[d]) {
          offset += in_strides[d];
          break;
        }
        offset -= (index[d] - 1) * in_strides[d];
        index[d] = 0;
      }
    }
  });
}

}  // namespace ampc::runtime::cpu
