// The precision policy: which low-precision dtype a compile targets, at which level, and which
// category (allow / clear / follow / deny, compiler/op_def.h) each op is in. The autocast pass
// (passes/autocast.cc) applies it; docs/precision-policy.md describes both.
//
// Each op's fp16 category is on its OpDef (AutocastSpec). bf16 has the same exponent range as
// fp32, so the ops that are denied in fp16 only for overflow (Exp, Log, Reciprocal, Pow) follow
// in bf16; the ones denied for precision (softmax, normalization, reductions, losses) stay
// denied. Users move ops between categories (`--allow OP`, `--deny OP`, a policy file) and pin
// nodes to fp32 by name (`--fp32-nodes REGEX`); every entry remembers where it came from, so a
// decision's reason can name it and two conflicting entries can be named together.
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "ampc/dtype.h"
#include "ampc/status.h"
#include "compiler/op_def.h"

namespace ampc {

// O0: everything fp32. O1: the category lists (default). O2: everything low precision except
// losses and normalization (fp32 master weights). O3: everything low precision, losses included
// (a speed baseline; no master weights).
enum class OptLevel { kO0, kO1, kO2, kO3 };
std::string_view opt_level_name(OptLevel level);

struct PrecisionPolicy {
  // The low-precision dtype: kF16 or kBF16; kF32 turns mixed precision off.
  DType low = DType::kF16;
  // Where `low` was set ("--precision", a policy file's path); empty while it is the default.
  std::string low_source;
  OptLevel level = OptLevel::kO1;
  // Where `level` was set ("--opt-level", a policy file's path); empty while it is the default.
  std::string level_source;

  struct OpEntry {
    AutocastCategory category;
    std::string source;  // "--allow Softmax", "policy.json: deny"
  };
  // Op types (standard domain names, e.g. "Softmax", or "domain.Op") moved to a category.
  std::map<std::string, OpEntry, std::less<>> ops;

  struct NodePin {
    std::string regex;   // over node names, matched anywhere (ECMAScript)
    std::string source;  // "--fp32-nodes", "policy.json"
  };
  std::vector<NodePin> fp32_nodes;
};

// "fp32", "fp16", "bf16" (fp8 is an error saying it is not supported yet); errors name `flag`.
absl::StatusOr<DType> parse_precision(std::string_view name, std::string_view flag = "--precision");
// The --precision name of `low` (fp32, fp16, bf16).
std::string_view precision_name(DType low);
// "O0" .. "O3".
absl::StatusOr<OptLevel> parse_opt_level(std::string_view name);

// Puts `op` in `category`. An op ampc does not know is an error; so is an op already put in
// another category, naming both entries.
absl::Status add_op_entry(PrecisionPolicy& policy, std::string_view op, AutocastCategory category,
                          std::string source);

// Merges a policy file into `policy`:
//   {"precision": "fp16", "opt_level": "O1", "allow": ["Softmax"], "clear": [], "follow": [],
//    "deny": ["Gelu"], "fp32_nodes": ["^/blocks.0/"]}
// Every key is optional; unknown keys are errors (a typo must not pass silently); entries that
// conflict with each other or with flags already in `policy` are errors naming both.
absl::Status read_policy_file(const std::string& path, PrecisionPolicy& policy);

// An op's category under `policy` at level O1, and the words a decision's reason uses for it
// ("allow-list", "deny-list (bf16)", "--deny Gelu").
struct CategoryChoice {
  AutocastCategory category = AutocastCategory::kNone;
  // For the defaults, the list ("allow-list", "follow-list (bf16: no overflow risk)"); for a
  // user's entry, the entry ("--deny Gelu", "policy.json: allow Softmax").
  std::string source;
  bool overridden = false;
};
CategoryChoice category_of(const OpDef& def, const PrecisionPolicy& policy);

// Whether every element of an f32 tensor survives conversion to `low` (f16 or bf16) unchanged
// (NaNs stay NaN): a constant like that can be cast at compile time, exactly.
bool holds_exactly(const Tensor& tensor, DType low);

}  // namespace ampc
