// eliminate-casts: removes the casts that change no value, to a fixed point.
//
// Rewrites:
//   Cast(x) to x's own dtype            -> x
//   Cast(Cast(x, A), B) with B = x's dtype, when A holds every value of x's dtype (f16 -> f32 ->
//     f16): the round trip changes nothing -> x
//   Cast(Cast(x, A), B) otherwise, when A holds every value of x's dtype -> Cast(x, B) (the inner
//     cast is exact, so going straight gives the same values)
//   two Casts of one value to one dtype -> one
// A round trip that does change values (f32 -> f16 -> f32 rounds) is kept, unless
// `allow_excess_precision` (--allow-excess-precision): then the value is read at its original,
// higher precision, which is what the program would compute without the round trip. Casts to or
// from fp8 (which saturate) and non-float casts are left alone.
// Assumes: verified graph. A Cast that is a graph output keeps its output (and name).
#include <map>

#include "compiler/strings.h"
#include "passes/passes.h"

namespace ampc {
namespace {

// Whether every value of `narrow` is a value of `wide`.
bool holds_all(DType wide, DType narrow) {
  if (wide == narrow) return true;
  switch (narrow) {
    case DType::kF16:
    case DType::kBF16:
      return wide == DType::kF32 || wide == DType::kF64;
    case DType::kF32:
      return wide == DType::kF64;
    default:
      return false;
  }
}

bool is_cast(const Node& node) { return node.domain().empty() && node.op_type() == "Cast"; }

class EliminateCastsPass final : public Pass {
 public:
  explicit EliminateCastsPass(bool allow_excess_precision)
      : allow_excess_precision_(allow_excess_precision) {}
  std::string_view name() const override { return "eliminate-casts"; }

  absl::StatusOr<bool> run(Graph& graph, const PassContext& /*context*/) override {
    bool changed = false;
    for (bool again = true; again;) {
      again = false;
      std::map<std::pair<Value*, DType>, Value*> seen;  // (input, to) -> first cast's output
      for (Node* node : graph.node_list()) {
        if (!is_cast(*node)) continue;
        Value* in = node->operand(0);
        Value* out = node->output(0);
        const DType to = out->dtype();
        if (!is_arithmetic_float(in->dtype()) || !is_arithmetic_float(to)) continue;
        Value* replacement = nullptr;
        if (in->dtype() == to) {
          replacement = in;  // a no-op
        } else if (auto it = seen.find({in, to}); it != seen.end()) {
          replacement = it->second;  // a duplicate
        } else if (in->producer() != nullptr && is_cast(*in->producer())) {
          Value* source = in->producer()->operand(0);
          const DType mid = in->dtype();
          if (is_arithmetic_float(source->dtype()) &&
              (holds_all(mid, source->dtype()) || allow_excess_precision_)) {
            if (source->dtype() == to) {
              replacement = source;  // a round trip
            } else {
              node->set_operand(0, source);  // straight from the source
              again = changed = true;
              continue;
            }
          }
        }
        if (replacement == nullptr) {
          seen.emplace(std::make_pair(in, to), out);
          continue;
        }
        if (out->is_graph_output()) continue;  // keeps the interface's name
        out->replace_all_uses_with(replacement);
        graph.erase_node(node);
        again = changed = true;
      }
      // Casts nothing reads any more (the inner halves of removed chains).
      for (Node* node : graph.node_list()) {
        if (is_cast(*node) && node->output(0)->is_dead()) {
          graph.erase_node(node);
          again = changed = true;
        }
      }
    }
    return changed;
  }

 private:
  bool allow_excess_precision_;
};

}  // namespace

std::unique_ptr<Pass> make_eliminate_casts_pass(bool allow_excess_precision) {
  return std::make_unique<EliminateCastsPass>(allow_excess_precision);
}

}  // namespace ampc
