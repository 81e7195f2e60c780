// tie-folded-weights: an initializer that is exactly another's transpose reads Transpose(that
// one) instead, in a training compile.
//
// An exporter's constant folding (the TorchScript exporter's default do_constant_folding=True,
// the dynamo exporter's optimizer) writes a weight that a MatMul reads transposed as a new
// initializer holding the transpose: a tied LM head becomes a copy of the embedding table, so
// training would move the two apart (another model than PyTorch's), and a Linear's weight
// trains under another name. Where a float initializer B of shape [n, m] equals A^T bit for bit
// for another float initializer A of shape [m, n], B's readers read Transpose(A), and B goes:
// A trains with both gradients, as the tied parameter does in PyTorch.
//
// Not tied: program constants, an initializer the file declares a parameter (PyTorch's graph
// signature: the exporter made neither, so equality is a coincidence), a matrix of one repeated
// value (a zero-initialized weight equals the transpose of any other zero matrix of that shape)
// and a square matrix equal to its own transpose (an identity), whose equality says nothing of
// where it came from. Of two candidates, the one first in the file stays (PyTorch writes the
// parameters first, the folded copies after).
//
// Numerics: exact (a transpose moves bits). The eval graph reads the same Transpose(A), so the
// weights the training step updates are the weights the eval graph reads.
#include <algorithm>
#include <cstring>
#include <map>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "compiler/strings.h"
#include "passes/passes.h"

namespace ampc {
namespace {

// Whether every element of `t` has the same bits.
bool one_value(const Tensor& t) {
  const std::span<const uint8_t> bytes = t.bytes();
  const size_t size = static_cast<size_t>(dtype_size(t.dtype()));
  for (size_t k = size; k < bytes.size(); k += size) {
    if (std::memcmp(bytes.data(), bytes.data() + k, size) != 0) return false;
  }
  return true;
}

// A float matrix with data that a tie may involve: read, not a graph output, not one value
// repeated.
bool candidate(const Value* v) {
  const Tensor* data = v->initializer();
  return data != nullptr && data->has_data() && !v->is_constant() && is_float(v->dtype()) &&
         v->shape().size() == 2 && data->num_elements() > 1 && !v->is_dead() &&
         !v->is_graph_output() && !one_value(*data);
}

// Element (i, j) of the row-major [rows, cols] matrix `t`, as bytes.
const uint8_t* element(const Tensor& t, int64_t i, int64_t j, int64_t cols, size_t size) {
  return t.bytes().data() + static_cast<size_t>(i * cols + j) * size;
}

// Whether b is a's transpose bit for bit (a [m, n], b [n, m]); stops at the first difference.
bool is_transpose(const Tensor& a, const Tensor& b) {
  const int64_t m = a.shape()[0], n = a.shape()[1];
  const size_t size = static_cast<size_t>(dtype_size(a.dtype()));
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      if (std::memcmp(element(a, i, j, n, size), element(b, j, i, m, size), size) != 0) {
        return false;
      }
    }
  }
  return true;
}

class TieFoldedWeightsPass final : public Pass {
 public:
  std::string_view name() const override { return "tie-folded-weights"; }

  absl::StatusOr<bool> run(Graph& graph, const PassContext& context) override {
    // Candidates by shape, in the file's order, and each one's place in it.
    std::map<std::pair<int64_t, int64_t>, std::vector<Value*>> by_shape;
    std::unordered_map<const Value*, size_t> place;
    for (Value* init : graph.initializers()) {
      if (!candidate(init)) continue;
      by_shape[{init->shape()[0], init->shape()[1]}].push_back(init);
      place.emplace(init, place.size());
    }
    std::vector<std::pair<Value*, Value*>> ties;  // (kept, copy)
    std::unordered_set<const Value*> tied;        // both sides of every tie
    for (const auto& [shape, copies] : by_shape) {
      auto originals = by_shape.find({shape.second, shape.first});
      if (originals == by_shape.end()) continue;
      for (Value* copy : copies) {
        if (copy->declared() == Value::Declared::kParameter || tied.contains(copy)) continue;
        for (Value* original : originals->second) {
          if (place[original] >= place[copy] || tied.contains(original)) continue;
          const Tensor& a = *original->initializer();
          if (a.dtype() != copy->dtype() || !is_transpose(a, *copy->initializer())) continue;
          if (shape.first == shape.second && is_transpose(a, a)) continue;  // symmetric
          ties.emplace_back(original, copy);
          tied.insert(original);
          tied.insert(copy);
          break;
        }
      }
    }
    for (auto [original, copy] : ties) {
      Node* first_reader = nullptr;
      for (Node* node : graph.node_list()) {
        if (std::find(node->operands().begin(), node->operands().end(), copy) !=
            node->operands().end()) {
          first_reader = node;
          break;
        }
      }
      Node* transpose = graph.create_node(kOnnxDomain, "Transpose", {original}, {copy->type()},
                                          {{"perm", std::vector<int64_t>{1, 0}}}, first_reader);
      transpose->set_name(str_cat(original->name(), "/tied_transpose"));
      const std::string name = copy->name();
      copy->replace_all_uses_with(transpose->output(0));
      graph.erase_graph_value(copy);
      transpose->output(0)->set_name(graph.unique_value_name(name));
      context.warn(str_cat("initializer '", name, "' is the transpose of '", original->name(),
                           "' bit for bit: the exporter folded a transpose of it (constant "
                           "folding, the default of torch.onnx.export), so it now reads "
                           "Transpose('",
                           original->name(), "') and the two train as one, as in PyTorch"));
    }
    return !ties.empty();
  }
};

}  // namespace

std::unique_ptr<Pass> make_tie_folded_weights_pass() {
  return std::make_unique<TieFoldedWeightsPass>();
}

}  // namespace ampc
