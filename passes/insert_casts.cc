// insert-casts: makes the graph compute what autocast decided.
//
// Rewrites: each node whose decision is a float compute dtype D reads every float operand in D
//   (but the operands its op keeps in fp32, AutocastSpec::fp32_operands, such as BatchNorm's
//   statistics): an operand of another dtype is replaced by a Cast of it to D. There is one Cast
//   per (value, dtype), placed before its first reader, so an fp32 weight read by three low
//   MatMuls is cast once per step. A program constant that D holds exactly is converted at
//   compile time instead (a new constant initializer, no Cast). Output types are then
//   re-inferred, so a low node's outputs are low. A graph output whose dtype changed gets a Cast
//   back, so the model's interface (names and dtypes) stays as it was.
//   With low-precision weights (where nothing needs fp32 master weights: an inference compile,
//   and O3), an f32 initializer whose every reader computes in the same low dtype is stored in
//   that dtype instead (rounded once, here, to the value the Cast would give every run): the
//   weights themselves become low precision and no Cast reads them.
// Assumes: autocast ran (nodes without a compute dtype, or computing in f64, are left alone).
// Numerics: each Cast rounds to nearest even (the runtime's numeric contract).
#include <map>
#include <set>

#include "compiler/shape_inference.h"
#include "compiler/strings.h"
#include "passes/passes.h"

namespace ampc {
namespace {

bool is_low_or_f32(DType dtype) {
  return dtype == DType::kF32 || dtype == DType::kF16 || dtype == DType::kBF16;
}

bool listed(const std::vector<int>& list, int i) {
  return std::find(list.begin(), list.end(), i) != list.end();
}

// The dtype `node` reads operand `i` in, or nullopt when it decided nothing (or is a Cast).
std::optional<DType> wanted_dtype(const Node& node, int i) {
  const std::optional<DType> compute = node.precision().compute;
  if (!compute || !is_low_or_f32(*compute)) return std::nullopt;
  if (node.domain().empty() && node.op_type() == "Cast") return std::nullopt;
  if (node.def() != nullptr && listed(node.def()->autocast.fp32_operands, i)) return DType::kF32;
  return *compute;
}

class InsertCastsPass final : public Pass {
 public:
  explicit InsertCastsPass(bool low_precision_weights)
      : low_precision_weights_(low_precision_weights) {}
  std::string_view name() const override { return "insert-casts"; }

  absl::StatusOr<bool> run(Graph& graph, const PassContext& /*context*/) override {
    casts_.clear();
    std::vector<TensorType> output_types;
    for (const Value* output : graph.outputs()) output_types.push_back(output->type());
    bool changed = low_precision_weights_ && store_weights_low(graph);
    for (Node* node : graph.node_list()) {
      const std::optional<DType> compute = node->precision().compute;
      if (!compute || !is_low_or_f32(*compute) || is_cast(*node)) continue;
      for (int i = 0; i < node->num_operands(); ++i) {
        Value* operand = node->operand(i);
        if (operand == nullptr || !is_low_or_f32(operand->dtype())) continue;
        const DType want = *wanted_dtype(*node, i);
        if (operand->dtype() == want) continue;
        node->set_operand(i, cast(graph, operand, want, *node));
        changed = true;
      }
      // The node's outputs follow its (new) operand types.
      AMPC_ASSIGN_OR_RETURN(std::vector<std::optional<TensorType>> types, propagator_.visit(*node));
      for (int i = 0; i < node->num_outputs(); ++i) {
        if (node->has_output(i) && types[i] && node->output(i)->type() != *types[i]) {
          node->output(i)->set_type(*types[i]);
          changed = true;
        }
      }
    }
    for (int i = 0; i < static_cast<int>(graph.outputs().size()); ++i) {
      Value* output = graph.outputs()[i];
      if (output->type() == output_types[i]) continue;
      // The Cast back takes the output's name; the low value is renamed. A cast of the value to
      // that dtype that a node already reads serves as well.
      const std::string name = output->name();
      output->set_name(graph.unique_value_name(str_cat(name, ".", dtype_name(output->dtype()))));
      Value* back = nullptr;
      if (auto it = casts_.find({output, output_types[i].dtype});
          it != casts_.end() && it->second->producer() != nullptr) {
        back = it->second;
      } else {
        Node* node = graph.create_node(kOnnxDomain, "Cast", {output}, {output_types[i]},
                                       {{"to", output_types[i].dtype}});
        node->set_name(str_cat(name, "/cast_back"));
        node->mutable_precision() = {output_types[i].dtype, std::nullopt,
                                     str_cat("graph output '", name, "' keeps its dtype")};
        back = node->output(0);
      }
      back->set_name(name);
      graph.set_output(i, back);
      changed = true;
    }
    return changed;
  }

 private:
  static bool is_cast(const Node& node) {
    return node.domain().empty() && node.op_type() == "Cast";
  }

  // Stores each f32 initializer that every reader reads in one low dtype in that dtype.
  static bool store_weights_low(Graph& graph) {
    bool changed = false;
    std::set<const Value*> outputs(graph.outputs().begin(), graph.outputs().end());
    for (Value* init : graph.initializers()) {
      if (init->dtype() != DType::kF32 || init->uses().empty() || outputs.contains(init)) continue;
      std::optional<DType> common;
      for (const Use& use : init->uses()) {
        const std::optional<DType> want = wanted_dtype(*use.user, use.operand);
        if (!want || *want == DType::kF32 || (common && *common != *want)) {
          common.reset();
          break;
        }
        common = want;
      }
      if (!common) continue;
      const Tensor& data = *init->initializer();
      graph.set_initializer_data(
          init, Tensor::from_doubles(*common, data.shape(), data.to_double_vector()));
      changed = true;
    }
    return changed;
  }

  // `value` in `to`, for `reader`: the one Cast (or converted constant) of this (value, dtype).
  Value* cast(Graph& graph, Value* value, DType to, Node& reader) {
    const auto key = std::make_pair(value, to);
    if (auto it = casts_.find(key); it != casts_.end()) return it->second;
    const std::string name = graph.unique_value_name(str_cat(value->name(), ".", dtype_name(to)));
    Value* result = nullptr;
    if (value->is_constant() && value->initializer() != nullptr &&
        (to == DType::kF32 ? value->dtype() != DType::kF64
                           : holds_exactly(*value->initializer(), to))) {
      const Tensor& data = *value->initializer();
      result = graph.add_initializer(
          name, Tensor::from_doubles(to, data.shape(), data.to_double_vector()));
      result->set_constant(true);
    } else {
      Node* node = graph.create_node(kOnnxDomain, "Cast", {value}, {TensorType{to, value->shape()}},
                                     {{"to", to}}, &reader);
      node->set_name(str_cat(value->name(), "/to_", dtype_name(to)));
      const std::string why = reader.name().empty() ? reader.op_type() : reader.name();
      node->mutable_precision() = {to, std::nullopt,
                                   str_cat("cast for ", why, " (", reader.precision().reason, ")")};
      result = node->output(0);
      result->set_name(name);
      AMPC_CHECK(propagator_.visit(*node).ok());
    }
    casts_.emplace(key, result);
    return result;
  }

  bool low_precision_weights_;
  std::map<std::pair<Value*, DType>, Value*> casts_;
  TypePropagator propagator_;
};

}  // namespace

std::unique_ptr<Pass> make_insert_casts_pass(bool low_precision_weights) {
  return std::make_unique<InsertCastsPass>(low_precision_weights);
}

}  // namespace ampc
