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
// parameters first, the folded copies after). Nor in a file another program wrote (its
// producer_name, compiler/onnx_metadata.h's kSourceProducerKey, is not PyTorch's): there the
// transposed copy is what the file says, two weights that happen to start equal.
//
// Cost: linear in the initializers' bytes. Candidates meet by a hash of their elements in
// transposed order, and the readers of the copies are found in one walk over the nodes.
//
// Numerics: exact (a transpose moves bits). The eval graph reads the same Transpose(A), so the
// weights the training step updates are the weights the eval graph reads.
#include <algorithm>
#include <cstring>
#include <map>
#include <string>
#include <tuple>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "compiler/onnx_metadata.h"
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

// A hash of the bytes of `t`'s elements, read row by row, or column by column when `transposed`:
// a matrix and a copy of its transpose hash alike when the one is read transposed.
size_t element_hash(const Tensor& t, bool transposed) {
  const int64_t rows = t.shape()[0], cols = t.shape()[1];
  const size_t size = static_cast<size_t>(dtype_size(t.dtype()));
  std::string bytes;
  bytes.reserve(t.bytes().size());
  for (int64_t i = 0; i < (transposed ? cols : rows); ++i) {
    for (int64_t j = 0; j < (transposed ? rows : cols); ++j) {
      const uint8_t* e = transposed ? element(t, j, i, cols, size) : element(t, i, j, cols, size);
      bytes.append(reinterpret_cast<const char*>(e), size);
    }
  }
  return std::hash<std::string>{}(bytes);
}

// Whether the graph came from a file PyTorch wrote, or was not imported from a file at all.
bool from_pytorch(const Graph& graph) {
  auto producer = graph.metadata().find(onnx_io::kSourceProducerKey);
  return producer == graph.metadata().end() || producer->second == "pytorch";
}

class TieFoldedWeightsPass final : public Pass {
 public:
  std::string_view name() const override { return "tie-folded-weights"; }

  absl::StatusOr<bool> run(Graph& graph, const PassContext& context) override {
    if (!from_pytorch(graph)) return false;
    // Candidates by shape and hash (an original by the hash of its transpose), in the file's
    // order, and each one's place in it.
    using Key = std::tuple<int64_t, int64_t, DType, size_t>;
    std::map<Key, std::vector<Value*>> originals;
    std::vector<Value*> copies;
    std::unordered_map<const Value*, size_t> place;
    for (Value* init : graph.initializers()) {
      if (!candidate(init)) continue;
      const Tensor& data = *init->initializer();
      originals[{init->shape()[1], init->shape()[0], init->dtype(), element_hash(data, true)}]
          .push_back(init);
      if (init->declared() != Value::Declared::kParameter) copies.push_back(init);
      place.emplace(init, place.size());
    }
    std::vector<std::pair<Value*, Value*>> ties;  // (kept, copy)
    std::unordered_set<const Value*> tied;        // both sides of every tie
    for (Value* copy : copies) {
      if (tied.contains(copy)) continue;
      const Tensor& b = *copy->initializer();
      auto same = originals.find({b.shape()[0], b.shape()[1], b.dtype(), element_hash(b, false)});
      if (same == originals.end()) continue;
      for (Value* original : same->second) {
        if (place[original] >= place[copy] || tied.contains(original)) continue;
        const Tensor& a = *original->initializer();
        if (!is_transpose(a, b)) continue;
        if (a.shape()[0] == a.shape()[1] && is_transpose(a, a)) continue;  // symmetric
        ties.emplace_back(original, copy);
        tied.insert(original);
        tied.insert(copy);
        break;
      }
    }
    if (ties.empty()) return false;

    // Each copy's first reader, where its transpose goes.
    std::unordered_map<const Value*, Node*> first_reader;
    for (auto [original, copy] : ties) first_reader.emplace(copy, nullptr);
    for (Node* node : graph.node_list()) {
      for (const Value* operand : node->operands()) {
        auto it = first_reader.find(operand);
        if (it != first_reader.end() && it->second == nullptr) it->second = node;
      }
    }
    std::vector<std::string> described;
    for (auto [original, copy] : ties) {
      Node* transpose =
          graph.create_node(kOnnxDomain, "Transpose", {original}, {copy->type()},
                            {{"perm", std::vector<int64_t>{1, 0}}}, first_reader.at(copy));
      transpose->set_name(str_cat(original->name(), "/tied_transpose"));
      const std::string name = copy->name();
      copy->replace_all_uses_with(transpose->output(0));
      graph.erase_graph_value(copy);
      transpose->output(0)->set_name(graph.unique_value_name(name));
      described.push_back(str_cat("'", name, "' is the transpose of '", original->name(), "'"));
    }
    // One line per tie, or one line for them all when there are many.
    constexpr size_t kListed = 3;
    const std::string why =
        "the exporter folded a transpose of it (constant folding, the default of "
        "torch.onnx.export), so it now reads the transpose of the other and the two train as "
        "one, as in PyTorch";
    if (ties.size() <= kListed) {
      for (const std::string& tie : described) {
        context.warn(str_cat("initializer ", tie, " bit for bit: ", why));
      }
    } else {
      described.resize(kListed);
      context.warn(str_cat(ties.size(), " initializers are the transposes of others bit for bit (",
                           str_join(described, ", "), ", and ", ties.size() - kListed,
                           " more): for each, ", why));
    }
    return true;
  }
};

}  // namespace

std::unique_ptr<Pass> make_tie_folded_weights_pass() {
  return std::make_unique<TieFoldedWeightsPass>();
}

}  // namespace ampc
