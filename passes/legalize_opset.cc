// legalize-opset: writes the graph at an opset where every node's element types are legal ONNX.
//
// Mixed precision puts f16 and bf16 on ops whose ONNX definitions admitted those types only in
// later opsets: bf16 on most ops from 13, bf16 Conv, pooling, Elu, Sin and others from 22, IsInf
// from 20, bf16 comparisons and Where from 16. Pad's wrap mode, which ampc reads at any opset,
// is ONNX's from 19. A graph at an older opset with such a node is raised
// to the lowest opset that admits every node's types (silently: the file's opset says so), when
// ampc defines each op of the graph there (ampc's ops keep their meaning across the versions it
// registers them for; attributes that later opsets take as inputs are written in that form on
// export). A node whose type no opset
// admits (bf16 Scatter) is left as it is, with a warning. Celu and Range admit f16 and bf16 only
// from opsets 28 and 27: autocast keeps them fp32 (compiler/precision_policy.cc), so a file is
// raised that far only for a policy that names them.
//
// Runs on the eval graph and the training step together: one file has one opset.
// Numerics: none; only the opset the graph declares changes.
#include <algorithm>
#include <map>
#include <set>

#include "compiler/op_def.h"
#include "compiler/strings.h"
#include "passes/passes.h"

namespace ampc {
namespace {

// The first ai.onnx opset whose definition of the op admits f16 and bf16 operands (0: none),
// for the ops ampc registers that did not admit them from their first version. From ONNX's
// operator schemas (onnx 1.23, through opset 28).
struct LowPrecisionSince {
  int f16;
  int bf16;
};
const std::map<std::string_view, LowPrecisionSince, std::less<>>& low_precision_since() {
  static const std::map<std::string_view, LowPrecisionSince, std::less<>> kSince = {
      {"Acos", {7, 22}},
      {"Acosh", {9, 22}},
      {"Asin", {7, 22}},
      {"Asinh", {9, 22}},
      {"Atan", {7, 22}},
      {"Atanh", {9, 22}},
      {"AveragePool", {1, 22}},
      {"BatchNormalization", {1, 14}},
      {"Ceil", {6, 13}},
      {"Celu", {28, 28}},
      {"ConstantOfShape", {9, 20}},
      {"Conv", {1, 22}},
      {"ConvTranspose", {1, 22}},
      {"Cos", {7, 22}},
      {"Cosh", {9, 22}},
      {"CumSum", {14, 14}},
      {"Elu", {1, 22}},
      {"Equal", {11, 13}},
      {"Floor", {6, 13}},
      {"GlobalAveragePool", {1, 22}},
      {"GreaterOrEqual", {12, 16}},
      {"HardSigmoid", {1, 22}},
      {"HardSwish", {14, 22}},
      {"IsInf", {20, 20}},
      {"LeakyRelu", {1, 16}},
      {"LessOrEqual", {12, 16}},
      {"MaxPool", {1, 22}},
      {"Mish", {18, 22}},
      {"NegativeLogLikelihoodLoss", {12, 22}},
      {"PRelu", {1, 16}},
      {"Range", {27, 27}},
      {"Round", {11, 22}},
      {"Scatter", {9, 0}},
      {"Selu", {1, 22}},
      {"Sin", {7, 22}},
      {"Sinh", {9, 22}},
      {"Softplus", {1, 22}},
      {"Softsign", {1, 22}},
      {"Tan", {7, 22}},
      {"Where", {9, 16}},
  };
  return kSince;
}

// The opset the node's f16 or bf16 operands need, or an attribute value a later opset brought
// (0: none needed; -1: no opset admits the types).
int opset_needed(const Node& node) {
  // ampc.ConvGradData is written as ConvTranspose (compiler/onnx_export.cc).
  const bool conv_transpose = node.domain() == kAmpcDomain && node.op_type() == "ConvGradData";
  if (!node.domain().empty() && !conv_transpose) return 0;
  bool f16 = false;
  bool bf16 = false;
  auto note = [&](const Value* value) {
    if (value == nullptr) return;
    f16 = f16 || value->dtype() == DType::kF16;
    bf16 = bf16 || value->dtype() == DType::kBF16;
  };
  for (const Value* operand : node.operands()) note(operand);
  for (int i = 0; i < node.num_outputs(); ++i) {
    if (node.has_output(i)) note(node.output(i));
  }
  // BatchNormalization's scale, bias and statistics may differ in type from X from opset 15 (T1
  // and T2): autocast keeps them fp32 beside f16 or bf16 data.
  const bool mixed_batch_norm = node.op_type() == "BatchNormalization" && node.num_operands() > 1 &&
                                node.operand(0)->dtype() != node.operand(1)->dtype();
  const auto& table = low_precision_since();
  auto it = table.find(conv_transpose ? "ConvTranspose" : node.op_type());
  // Opset 13 added bf16 to most ops (Cast, the arithmetic, MatMul, the activations, the
  // reductions, data movement); the table has the ops that admitted it later, or never.
  int needed = mixed_batch_norm ? 15 : bf16 ? 13 : 0;
  // Pad's wrap mode (PyTorch's circular padding) is ONNX's from opset 19.
  if (node.op_type() == "Pad" && node.string_attr("mode") == "wrap") needed = std::max(needed, 19);
  if (it == table.end()) return needed;
  for (const auto& [used, since] : {std::pair{f16, it->second.f16}, {bf16, it->second.bf16}}) {
    if (!used) continue;
    if (since == 0) return -1;
    needed = std::max(needed, since);
  }
  return needed;
}

class LegalizeOpsetPass final : public Pass {
 public:
  std::string_view name() const override { return "legalize-opset"; }

  absl::StatusOr<bool> run(Graph& graph, const PassContext& context) override {
    std::vector<Graph*> graphs = {&graph};
    if (Graph* step = graph.mutable_training_step()) graphs.push_back(step);
    const int64_t current = graph.opset("");
    int64_t target = current;
    std::string reason;
    std::set<std::string> never;
    for (Graph* g : graphs) {
      for (const auto& node : g->nodes()) {
        const int needed = opset_needed(*node);
        if (needed < 0) {
          never.insert(node->op_type());
        } else if (needed > target) {
          target = needed;
          reason = str_cat(node->op_type(), " (node '", node->name(), "')");
        }
      }
    }
    for (const std::string& op : never) {
      context.warn(str_cat(op,
                           " runs on f16 or bf16, which no ONNX opset admits for it: the "
                           "written file is ampc's to run, and ONNX checkers reject it"));
    }
    if (target == current) return false;
    for (Graph* g : graphs) {
      for (const auto& node : g->nodes()) {
        const int64_t version = node->domain().empty() ? target : g->opset(node->domain());
        if (OpRegistry::global().find(node->domain(), node->op_type(), version) == nullptr) {
          context.warn(str_cat("the file stays at opset ", current, ", where ", reason,
                               " is not legal ONNX: opset ", target,
                               " admits it, but ampc does "
                               "not define ",
                               node->op_type(), " at opset ", target));
          return false;
        }
      }
    }
    for (Graph* g : graphs) g->set_opset("", target);
    return true;
  }
};

}  // namespace

std::unique_ptr<Pass> make_legalize_opset_pass() { return std::make_unique<LegalizeOpsetPass>(); }

}  // namespace ampc
