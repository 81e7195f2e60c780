#include "runtime/fused_codegen.h"

#include <cmath>
#include <cstring>

#include "compiler/strings.h"

namespace ampc::runtime {

// The project headers the generated source includes, embedded at configure time
// (cmake/nvrtc_headers.cc.in).
const std::vector<SourceHeader>& fused_project_headers();

namespace {

// The declarations runtime/numeric.h and the float headers take from the standard library, for
// NVRTC, which has none. Only the device branches of those headers are compiled there, which
// use CUDA's math functions, not <cmath>'s.
constexpr std::string_view kCstdint = R"(#pragma once
typedef signed char int8_t;
typedef short int16_t;
typedef int int32_t;
typedef long long int64_t;
typedef unsigned char uint8_t;
typedef unsigned short uint16_t;
typedef unsigned int uint32_t;
typedef unsigned long long uint64_t;
namespace std {
using ::int8_t; using ::int16_t; using ::int32_t; using ::int64_t;
using ::uint8_t; using ::uint16_t; using ::uint32_t; using ::uint64_t;
}
)";

constexpr std::string_view kTypeTraits = R"(#pragma once
namespace std {
template <class T, T v> struct integral_constant { static constexpr T value = v; };
using true_type = integral_constant<bool, true>;
using false_type = integral_constant<bool, false>;
template <class T> struct is_integral : false_type {};
template <> struct is_integral<bool> : true_type {};
template <> struct is_integral<char> : true_type {};
template <> struct is_integral<signed char> : true_type {};
template <> struct is_integral<unsigned char> : true_type {};
template <> struct is_integral<short> : true_type {};
template <> struct is_integral<unsigned short> : true_type {};
template <> struct is_integral<int> : true_type {};
template <> struct is_integral<unsigned int> : true_type {};
template <> struct is_integral<long> : true_type {};
template <> struct is_integral<unsigned long> : true_type {};
template <> struct is_integral<long long> : true_type {};
template <> struct is_integral<unsigned long long> : true_type {};
template <class T> inline constexpr bool is_integral_v = is_integral<T>::value;
template <class T> struct is_floating_point : false_type {};
template <> struct is_floating_point<float> : true_type {};
template <> struct is_floating_point<double> : true_type {};
template <class T> inline constexpr bool is_floating_point_v = is_floating_point<T>::value;
template <class T> inline constexpr bool is_signed_v = T(-1) < T(0);
template <class A, class B> inline constexpr bool is_same_v = false;
template <class A> inline constexpr bool is_same_v<A, A> = true;
template <class T> struct make_unsigned { using type = T; };
template <> struct make_unsigned<signed char> { using type = unsigned char; };
template <> struct make_unsigned<short> { using type = unsigned short; };
template <> struct make_unsigned<int> { using type = unsigned int; };
template <> struct make_unsigned<long> { using type = unsigned long; };
template <> struct make_unsigned<long long> { using type = unsigned long long; };
template <class T> using make_unsigned_t = typename make_unsigned<T>::type;
template <bool B, class T = void> struct enable_if {};
template <class T> struct enable_if<true, T> { using type = T; };
template <bool B, class T = void> using enable_if_t = typename enable_if<B, T>::type;
}
)";

constexpr std::string_view kEmpty = "#pragma once\n";

std::string_view storage_type(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return "float";
    case DType::kF16:
      return "ampc::Float16";
    case DType::kBF16:
      return "ampc::BFloat16";
    case DType::kBool:
      return "bool";
    default:
      AMPC_CHECK(false && "not a fusable dtype");
  }
  return "";
}

// A float parameter as a literal with its exact value.
std::string float_literal(float value) {
  if (std::isfinite(value)) return fmt::format("{:a}f", value);
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  return fmt::format("__uint_as_float({:#x}u)", bits);
}

// The f32 expression of one instruction over its operands' variables.
std::string expression(const FusedInstr& instr, const std::vector<std::string>& a) {
  std::vector<std::string> params;
  for (float p : instr.params) params.push_back(float_literal(p));
  const std::string functor =
      str_cat("nm::", fused_op_name(instr.op), "{", str_join(params, ", "), "}");
  const auto call = [&](const std::string& f) { return str_cat(f, "(", str_join(a, ", "), ")"); };
  const auto predicate = [&](const std::string& test) {
    return str_cat("(", test, " ? 1.0f : 0.0f)");
  };
  switch (instr.op) {
    case FusedOp::kIdentity:
    case FusedOp::kCast:
      return a[0];
    case FusedOp::kPow:
      return call("nm::FloatPow{}");
    case FusedOp::kNot:
      return predicate(str_cat(a[0], " == 0.0f"));
    case FusedOp::kAnd:
      return predicate(str_cat(a[0], " != 0.0f && ", a[1], " != 0.0f"));
    case FusedOp::kOr:
      return predicate(str_cat(a[0], " != 0.0f || ", a[1], " != 0.0f"));
    case FusedOp::kXor:
      return predicate(str_cat("(", a[0], " != 0.0f) != (", a[1], " != 0.0f)"));
    case FusedOp::kEqual:
    case FusedOp::kLess:
    case FusedOp::kGreater:
    case FusedOp::kLessOrEqual:
    case FusedOp::kGreaterOrEqual:
      return predicate(call(functor));
    case FusedOp::kWhere:
      return str_cat("(", a[0], " != 0.0f ? ", a[1], " : ", a[2], ")");
    default:
      return call(functor);
  }
}

std::string rounded(DType dtype, const std::string& value) {
  if (dtype == DType::kF16) return str_cat("static_cast<float>(ampc::Float16(", value, "))");
  if (dtype == DType::kBF16) return str_cat("static_cast<float>(ampc::BFloat16(", value, "))");
  return value;
}

std::string stored(DType dtype, const std::string& value) {
  if (dtype == DType::kF32) return value;
  if (dtype == DType::kBool) return str_cat("(", value, " != 0.0f)");
  return str_cat(storage_type(dtype), "(", value, ")");
}

}  // namespace

std::string fused_kernel_name(uint64_t body_hash) {
  return fmt::format("ampc_fused_{:016x}", body_hash);
}

std::string fused_cuda_source(const FusedBody& body, const std::vector<DType>& input_dtypes,
                              std::string_view kernel_name) {
  AMPC_CHECK(static_cast<int>(input_dtypes.size()) == body.num_inputs);
  std::vector<std::string> params = {"long long n"};
  for (int i = 0; i < body.num_inputs; ++i) {
    params.push_back(str_cat("const ", storage_type(input_dtypes[i]), "* p", i, ", long long inner",
                             i, ", long long count", i));
  }
  for (size_t j = 0; j < body.outputs.size(); ++j) {
    params.push_back(str_cat(storage_type(body.output_dtype(static_cast<int>(j))), "* y", j));
  }
  std::string loop;
  std::vector<std::string> slot_names;
  for (int i = 0; i < body.num_inputs; ++i) {
    // A full operand is read at e, a single element at 0, a window by division.
    loop += str_cat("    const float x", i, " = static_cast<float>(p", i, "[count", i,
                    " == n ? e : (count", i, " == 1 ? 0 : (e / inner", i, ") % count", i, ")]);\n");
    slot_names.push_back(str_cat("x", i));
  }
  for (size_t k = 0; k < body.instrs.size(); ++k) {
    const FusedInstr& instr = body.instrs[k];
    std::vector<std::string> args;
    for (int slot : instr.args) args.push_back(slot_names[slot]);
    loop += str_cat("    const float t", k, " = ", rounded(instr.dtype, expression(instr, args)),
                    ";\n");
    slot_names.push_back(str_cat("t", k));
  }
  for (size_t j = 0; j < body.outputs.size(); ++j) {
    loop +=
        str_cat("    y", j, "[e] = ",
                stored(body.output_dtype(static_cast<int>(j)), slot_names[body.outputs[j]]), ";\n");
  }
  return str_cat("// ", body.to_string(), "\n",
                 "#include \"ampc/float_types.h\"\n"
                 "#include \"runtime/gradient_math.h\"\n"
                 "#include \"runtime/numeric.h\"\n"
                 "namespace nm = ampc::numeric;\n"
                 "extern \"C\" __global__ void ",
                 kernel_name, "(", str_join(params, ", "),
                 ") {\n"
                 "  const long long stride = static_cast<long long>(blockDim.x) * gridDim.x;\n"
                 "  for (long long e = static_cast<long long>(blockIdx.x) * blockDim.x + "
                 "threadIdx.x; e < n; e += stride) {\n",
                 loop, "  }\n}\n");
}

const std::vector<SourceHeader>& fused_cuda_headers() {
  static const std::vector<SourceHeader> headers = [] {
    std::vector<SourceHeader> all = fused_project_headers();
    all.push_back({"cstdint", kCstdint});
    all.push_back({"type_traits", kTypeTraits});
    all.push_back({"cmath", kEmpty});
    all.push_back({"cstring", kEmpty});
    return all;
  }();
  return headers;
}

std::vector<std::string> fused_nvrtc_options() {
  return {"--std=c++17", "--fmad=false", "-default-device"};
}

}  // namespace ampc::runtime
