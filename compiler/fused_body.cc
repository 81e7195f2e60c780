#include "compiler/fused_body.h"

#include <algorithm>
#include <array>
#include <charconv>

#include "compiler/strings.h"

namespace ampc {
namespace {

struct OpInfo {
  FusedOp op;
  std::string_view name;
  int arity;
  int params;
};

// In FusedOp's order, so that info(op) is an index.
constexpr std::array kOps = {
    OpInfo{FusedOp::kIdentity, "Identity", 1, 0},
    OpInfo{FusedOp::kCast, "Cast", 1, 0},
    OpInfo{FusedOp::kNeg, "Neg", 1, 0},
    OpInfo{FusedOp::kAbs, "Abs", 1, 0},
    OpInfo{FusedOp::kSqrt, "Sqrt", 1, 0},
    OpInfo{FusedOp::kExp, "Exp", 1, 0},
    OpInfo{FusedOp::kLog, "Log", 1, 0},
    OpInfo{FusedOp::kReciprocal, "Reciprocal", 1, 0},
    OpInfo{FusedOp::kRelu, "Relu", 1, 0},
    OpInfo{FusedOp::kSigmoid, "Sigmoid", 1, 0},
    OpInfo{FusedOp::kTanh, "Tanh", 1, 0},
    OpInfo{FusedOp::kErf, "Erf", 1, 0},
    OpInfo{FusedOp::kGeluErf, "GeluErf", 1, 0},
    OpInfo{FusedOp::kGeluTanh, "GeluTanh", 1, 0},
    OpInfo{FusedOp::kSoftplus, "Softplus", 1, 0},
    OpInfo{FusedOp::kSoftsign, "Softsign", 1, 0},
    OpInfo{FusedOp::kHardSwish, "HardSwish", 1, 0},
    OpInfo{FusedOp::kMish, "Mish", 1, 0},
    OpInfo{FusedOp::kSin, "Sin", 1, 0},
    OpInfo{FusedOp::kCos, "Cos", 1, 0},
    OpInfo{FusedOp::kNot, "Not", 1, 0},
    OpInfo{FusedOp::kLeakyRelu, "LeakyRelu", 1, 1},
    OpInfo{FusedOp::kElu, "Elu", 1, 1},
    OpInfo{FusedOp::kCelu, "Celu", 1, 1},
    OpInfo{FusedOp::kSelu, "Selu", 1, 2},
    OpInfo{FusedOp::kHardSigmoid, "HardSigmoid", 1, 2},
    OpInfo{FusedOp::kAdd, "Add", 2, 0},
    OpInfo{FusedOp::kSub, "Sub", 2, 0},
    OpInfo{FusedOp::kMul, "Mul", 2, 0},
    OpInfo{FusedOp::kDiv, "Div", 2, 0},
    OpInfo{FusedOp::kPow, "Pow", 2, 0},
    OpInfo{FusedOp::kMin, "Min", 2, 0},
    OpInfo{FusedOp::kMax, "Max", 2, 0},
    OpInfo{FusedOp::kPRelu, "PRelu", 2, 0},
    OpInfo{FusedOp::kEqual, "Equal", 2, 0},
    OpInfo{FusedOp::kLess, "Less", 2, 0},
    OpInfo{FusedOp::kGreater, "Greater", 2, 0},
    OpInfo{FusedOp::kLessOrEqual, "LessOrEqual", 2, 0},
    OpInfo{FusedOp::kGreaterOrEqual, "GreaterOrEqual", 2, 0},
    OpInfo{FusedOp::kAnd, "And", 2, 0},
    OpInfo{FusedOp::kOr, "Or", 2, 0},
    OpInfo{FusedOp::kXor, "Xor", 2, 0},
    OpInfo{FusedOp::kReluGrad, "ReluGrad", 2, 0},
    OpInfo{FusedOp::kLeakyReluGrad, "LeakyReluGrad", 2, 1},
    OpInfo{FusedOp::kGeluErfGrad, "GeluErfGrad", 2, 0},
    OpInfo{FusedOp::kGeluTanhGrad, "GeluTanhGrad", 2, 0},
    OpInfo{FusedOp::kWhere, "Where", 3, 0},
};

const OpInfo& info(FusedOp op) {
  const OpInfo& entry = kOps[static_cast<size_t>(op)];
  AMPC_CHECK(entry.op == op);
  return entry;
}

std::string_view trim(std::string_view text) {
  while (!text.empty() && text.front() == ' ') text.remove_prefix(1);
  while (!text.empty() && text.back() == ' ') text.remove_suffix(1);
  return text;
}

std::vector<std::string_view> split(std::string_view text, char separator) {
  std::vector<std::string_view> parts;
  size_t start = 0;
  while (true) {
    const size_t end = text.find(separator, start);
    parts.push_back(trim(text.substr(start, end - start)));
    if (end == std::string_view::npos) return parts;
    start = end + 1;
  }
}

std::optional<int64_t> parse_int(std::string_view text) {
  int64_t value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || end != text.data() + text.size() || value < 0) return std::nullopt;
  return value;
}

// "x3" or "t2" as a slot, where `defined` slots exist so far.
absl::StatusOr<int> parse_slot(std::string_view text, int num_inputs, int defined) {
  if (text.size() >= 2 && (text[0] == 'x' || text[0] == 't')) {
    if (std::optional<int64_t> index = parse_int(text.substr(1))) {
      const int64_t slot = text[0] == 'x' ? *index : num_inputs + *index;
      if (text[0] == 'x' && *index < num_inputs) return static_cast<int>(slot);
      if (text[0] == 't' && slot < defined) return static_cast<int>(slot);
      return absl::InvalidArgumentError(str_cat("'", text, "' is not defined here (", num_inputs,
                                                " operands, ", defined - num_inputs,
                                                " results so far)"));
    }
  }
  return absl::InvalidArgumentError(
      str_cat("expected an operand xI or a result tK, got '", text, "'"));
}

// "t3 = LeakyRelu[0.01](t2) : f16", the instruction defining slot `defined`.
absl::StatusOr<FusedInstr> parse_instr(std::string_view text, int num_inputs, int defined) {
  const size_t equals = text.find('=');
  const size_t open = text.find('(');
  const size_t close = text.rfind(')');
  const size_t colon = text.rfind(':');
  if (equals == std::string_view::npos || open == std::string_view::npos ||
      close == std::string_view::npos || colon == std::string_view::npos || open < equals ||
      close < open || colon < close) {
    return absl::InvalidArgumentError("expected `tK = Op[params](args) : dtype`");
  }
  const std::string_view result = trim(text.substr(0, equals));
  if (result != str_cat("t", defined - num_inputs)) {
    return absl::InvalidArgumentError(str_cat("results are numbered in order: expected t",
                                              defined - num_inputs, ", got '", result, "'"));
  }
  std::string_view callee = trim(text.substr(equals + 1, open - equals - 1));
  std::string_view params;
  if (const size_t bracket = callee.find('['); bracket != std::string_view::npos) {
    if (callee.back() != ']') return absl::InvalidArgumentError("unclosed '[' of parameters");
    params = callee.substr(bracket + 1, callee.size() - bracket - 2);
    callee = trim(callee.substr(0, bracket));
  }
  FusedInstr instr;
  const OpInfo* op = nullptr;
  for (const OpInfo& entry : kOps) {
    if (entry.name == callee) op = &entry;
  }
  if (op == nullptr) return absl::InvalidArgumentError(str_cat("unknown op '", callee, "'"));
  instr.op = op->op;
  const std::string_view args = trim(text.substr(open + 1, close - open - 1));
  for (std::string_view arg : args.empty() ? std::vector<std::string_view>{} : split(args, ',')) {
    AMPC_ASSIGN_OR_RETURN(const int slot, parse_slot(arg, num_inputs, defined));
    instr.args.push_back(slot);
  }
  if (static_cast<int>(instr.args.size()) != op->arity) {
    return absl::InvalidArgumentError(
        str_cat(op->name, " takes ", op->arity, " operands, got ", instr.args.size()));
  }
  if (!params.empty()) {
    for (std::string_view param : split(params, ',')) {
      float value = 0;
      const auto [end, error] = std::from_chars(param.data(), param.data() + param.size(), value);
      if (error != std::errc() || end != param.data() + param.size()) {
        return absl::InvalidArgumentError(str_cat("bad parameter '", param, "'"));
      }
      instr.params.push_back(value);
    }
  }
  if (static_cast<int>(instr.params.size()) != op->params) {
    return absl::InvalidArgumentError(
        str_cat(op->name, " takes ", op->params, " parameters, got ", instr.params.size()));
  }
  const std::string_view dtype_text = trim(text.substr(colon + 1));
  const std::optional<DType> dtype = parse_dtype(dtype_text);
  if (!dtype || !fusable_dtype(*dtype)) {
    return absl::InvalidArgumentError(
        str_cat("result type '", dtype_text, "' is not one of f32, f16, bf16, bool"));
  }
  instr.dtype = *dtype;
  return instr;
}

}  // namespace

std::string_view fused_op_name(FusedOp op) { return info(op).name; }
int fused_op_arity(FusedOp op) { return info(op).arity; }
int fused_op_num_params(FusedOp op) { return info(op).params; }

bool fusable_dtype(DType dtype) {
  return dtype == DType::kF32 || dtype == DType::kF16 || dtype == DType::kBF16 ||
         dtype == DType::kBool;
}

std::string FusedBody::to_string() const {
  const auto slot_name = [&](int slot) {
    return slot < num_inputs ? str_cat("x", slot) : str_cat("t", slot - num_inputs);
  };
  std::string out;
  for (size_t k = 0; k < instrs.size(); ++k) {
    const FusedInstr& instr = instrs[k];
    std::vector<std::string> args;
    for (int slot : instr.args) args.push_back(slot_name(slot));
    out += str_cat("t", k, " = ", fused_op_name(instr.op));
    if (!instr.params.empty()) out += str_cat("[", str_join(instr.params, ","), "]");
    out += str_cat("(", str_join(args, ", "), ") : ", dtype_name(instr.dtype), "; ");
  }
  std::vector<std::string> results;
  for (int slot : outputs) results.push_back(slot_name(slot));
  return out + str_cat("return ", str_join(results, ", "));
}

absl::StatusOr<FusedBody> FusedBody::parse(std::string_view text, int num_inputs) {
  FusedBody body;
  body.num_inputs = num_inputs;
  const std::vector<std::string_view> statements = split(text, ';');
  for (size_t i = 0; i < statements.size(); ++i) {
    const std::string_view statement = statements[i];
    if (i + 1 == statements.size()) {
      if (!statement.starts_with("return ")) {
        return absl::InvalidArgumentError("a fused body ends with `return tK, ...`");
      }
      for (std::string_view result : split(statement.substr(7), ',')) {
        AMPC_ASSIGN_OR_RETURN(
            const int slot,
            parse_slot(result, num_inputs, num_inputs + static_cast<int>(body.instrs.size())));
        if (slot < num_inputs) {
          return absl::InvalidArgumentError(
              str_cat("a fused body returns results, not operands ('", result, "')"));
        }
        body.outputs.push_back(slot);
      }
      break;
    }
    absl::StatusOr<FusedInstr> instr =
        parse_instr(statement, num_inputs, num_inputs + static_cast<int>(body.instrs.size()));
    if (!instr.ok()) {
      return absl::InvalidArgumentError(
          str_cat("instruction ", i, " '", statement, "': ", instr.status().message()));
    }
    body.instrs.push_back(*std::move(instr));
  }
  if (body.instrs.empty()) return absl::InvalidArgumentError("a fused body has no instruction");
  return body;
}

std::optional<BroadcastWindow> broadcast_window(const std::vector<int64_t>& in,
                                                const std::vector<int64_t>& out) {
  if (in.size() > out.size()) return std::nullopt;
  const size_t lead = out.size() - in.size();
  // The block [first, last] of output dimensions the operand spans; outside it the operand's
  // dimensions are 1.
  size_t first = out.size();
  size_t last = 0;
  for (size_t i = 0; i < in.size(); ++i) {
    if (in[i] != 1 && in[i] != out[lead + i]) return std::nullopt;
    if (in[i] != 1) {
      first = std::min(first, lead + i);
      last = lead + i;
    }
  }
  BroadcastWindow window;
  if (first == out.size()) return window;  // one element
  for (size_t d = first; d <= last; ++d) {
    if (in[d - lead] != out[d]) return std::nullopt;  // a broadcast dimension inside the block
    window.count *= out[d];
  }
  for (size_t d = last + 1; d < out.size(); ++d) window.inner *= out[d];
  return window;
}

uint64_t fused_body_hash(std::string_view body, const std::vector<DType>& input_dtypes) {
  uint64_t hash = 0xcbf29ce484222325ull;
  const auto mix = [&hash](unsigned char byte) {
    hash ^= byte;
    hash *= 0x100000001b3ull;
  };
  for (char c : body) mix(static_cast<unsigned char>(c));
  for (DType dtype : input_dtypes) mix(static_cast<unsigned char>(dtype) + 1);
  return hash;
}

}  // namespace ampc
