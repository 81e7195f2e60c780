// fuse-attention: the attention pattern becomes one ampc.Attention node (ops/attention.cc),
// which autodiff then differentiates as a whole (ampc.AttentionGrad).
//
// Rewrites, reading back from each Softmax over the last axis:
//   MatMul(Q, Kt) -> [Mul or Div by a constant scalar] -> [mask] -> Softmax -> MatMul(., V)
// where the mask is Where(M, scores, -inf) or Where(M, -inf, scores) with a bool M, or
// Add(scores, B) with a float B that no weight reaches (a causal or padding bias; what autodiff
// takes as data by default, passes/mask_data.h, is no weight: a mask fill, a lifted scalar, a
// folded torch.zeros in a file that declares its parameters); float Casts
// may stand anywhere between (autocast puts them around the f32 Softmax). Q and Kt may each be
// a Mul or Div by a constant scalar that only the MatMul reads (PyTorch's export of
// scaled_dot_product_attention scales both by the scale's square root): the fused node's scale
// is the product of the factors, applied once to the product. The probabilities may pass
// PyTorch's safe softmax, Where(IsNaN(p), 0, p) (its TorchScript export of
// scaled_dot_product_attention with a mask): the fused node is then `safe`, giving 0 for a row
// with no key as the guard does (a NaN from NaN scores stays NaN). Every value inside
// the pattern must have the pattern's next node as its only reader, so nothing that is read
// elsewhere (the probabilities as an output, say) disappears. Q, Kt and V must share one float
// type; Kt's and V's batch dims are each Q's or 1 (multi-query attention through MatMul's
// broadcasting, as Falcon writes it: an Expand to Q's heads goes before the fused node, and its
// gradient sums the heads back), and M or B must broadcast to
// the scores. A bias Where(C, 0, -inf) with a bool C becomes the bool mask C (prefer_bool_mask),
// and a constant bias of only 0 and -inf (or a fill of at least 2^127 where no row is wholly
// masked) a bool constant (bool_mask_of).
// Anything else (a soft cap, a mask before the scale, a finite fill value whose
// fully masked rows would differ) stays unfused. The ONNX Attention op, which the importer
// expands into this pattern, fuses the same way when its mask is causal or a float bias.
// Assumes: static shapes; runs on the training step before autodiff (so the backward is the
//   fused gradient, which never keeps the T x S probabilities), after autocast (so the fused
//   node's inputs are the MatMuls' low-precision operands). The eval graph stays plain ONNX.
// Numerics: the fused node computes the scores, the softmax and the weighted sum in f32 and
//   rounds once, where the pattern rounded the scores, the scaled scores and the probabilities
//   to the MatMuls' type: the results agree within a GEMM tolerance, not bit for bit
//   (tests/passes/fuse_attention_test.cc).
#include "passes/fuse_attention.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <set>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "compiler/strings.h"
#include "passes/mask_data.h"

namespace ampc {
namespace {

bool is_op(const Node* node, std::string_view op) {
  return node != nullptr && node->domain() == kOnnxDomain && node->op_type() == op;
}

// Whether a weight (a float initializer autodiff may train) is among the values `value` is
// computed from. A bool or integer initializer (a causal mask the exporter folded) is data, as
// is what data_by_default says is (`file_declares`: the file declares its parameters).
bool reads_weights(const Value* value, bool file_declares) {
  std::vector<const Value*> stack = {value};
  std::unordered_set<const Value*> seen;
  while (!stack.empty()) {
    const Value* v = stack.back();
    stack.pop_back();
    if (!seen.insert(v).second) continue;
    if (v->kind() == Value::Kind::kInitializer && is_float(v->dtype()) &&
        !data_by_default(*v, file_declares)) {
      return true;
    }
    if (const Node* producer = v->producer()) {
      for (const Value* operand : producer->operands()) {
        if (operand != nullptr) stack.push_back(operand);
      }
    }
  }
  return false;
}

// One match: the nodes it removes (in graph order) and the fused node's operands and attributes.
struct AttentionMatch {
  std::vector<Node*> nodes;
  Value* q = nullptr;
  Value* kt = nullptr;
  Value* v = nullptr;
  Value* mask = nullptr;
  int64_t mask_keep = 1;
  double scale = 1.0;
  bool safe = false;       // behind a safe-softmax guard: a row with no key gives 0
  Node* output = nullptr;  // the MatMul with V
};

class Matcher {
 public:
  explicit Matcher(bool file_declares) : file_declares_(file_declares) {}

  // The match whose Softmax is `softmax`, or nullopt.
  std::optional<AttentionMatch> match(Node* softmax) {
    match_ = AttentionMatch{};
    const Shape& shape = softmax->output(0)->shape();
    const int64_t axis = softmax->int_attr("axis");
    if (shape.size() < 2 || (axis != -1 && axis != static_cast<int64_t>(shape.size()) - 1)) {
      return std::nullopt;
    }
    if (!match_scores(softmax->operand(0))) return std::nullopt;
    // Found from the Softmax back; listed in graph order.
    std::reverse(match_.nodes.begin(), match_.nodes.end());
    match_.nodes.push_back(softmax);
    if (!match_output(softmax)) return std::nullopt;
    return std::move(match_);
  }

 private:
  // A value the pattern may swallow: read only by the next node of the pattern.
  static bool private_value(const Value* value) {
    return value->uses().size() == 1 && !value->is_graph_output() && value->producer() != nullptr;
  }

  // Steps back over float Casts whose results only the pattern reads.
  Value* skip_casts(Value* value) {
    while (private_value(value) && is_op(value->producer(), "Cast") && is_float(value->dtype()) &&
           is_float(value->producer()->operand(0)->dtype())) {
      match_.nodes.push_back(value->producer());
      value = value->producer()->operand(0);
    }
    return value;
  }

  // The Softmax's input back to the first MatMul.
  bool match_scores(Value* value) {
    value = skip_casts(value);
    if (!private_value(value)) return false;
    Node* node = value->producer();
    if (is_op(node, "Where") && node->operand(0)->dtype() == DType::kBool) {
      for (int fill : {1, 2}) {
        const std::optional<double> c = constant_scalar(node->operand(fill));
        if (!c || !std::isinf(*c) || *c > 0) continue;
        match_.mask = node->operand(0);
        match_.mask_keep = fill == 2 ? 1 : 0;  // Where(M, scores, -inf) keeps where M is true
        match_.nodes.push_back(node);
        return match_scaled(node->operand(3 - fill), value->shape());
      }
      return false;
    }
    if (is_op(node, "Add")) {
      for (int bias : {0, 1}) {
        Value* b = node->operand(bias);
        if (!is_float(b->dtype())) continue;
        const size_t mark = match_.nodes.size();
        match_.mask = b;
        match_.nodes.push_back(node);
        // The structure first: walking back from the scores operand to a weight would visit
        // the layers above the attention.
        if (match_scaled(node->operand(1 - bias), value->shape()) &&
            !reads_weights(b, file_declares_)) {
          prefer_bool_mask(value->shape());
          return true;
        }
        match_.nodes.resize(mark);
        match_.mask = nullptr;
      }
      return false;
    }
    return match_scaled(value, value->shape());
  }

  // A bias Where(C, 0, -inf) or Where(C, -inf, 0) with a bool C (as PyTorch's exports compute a
  // causal or padding mask), maybe cast, is the bool mask C: adding 0 leaves a score as it is and
  // -inf masks it out as the bool mask does, so the fused node reads C (one byte a score, and
  // what cuDNN's attention takes exactly; runtime/cuda/attention.cc). The Where stays for its
  // other readers, or for dce.
  void prefer_bool_mask(const Shape& scores_shape) {
    Value* b = match_.mask;
    while (is_op(b->producer(), "Cast") && is_float(b->producer()->operand(0)->dtype())) {
      b = b->producer()->operand(0);
    }
    Node* where = b->producer();
    if (!is_op(where, "Where") || where->operand(0)->dtype() != DType::kBool ||
        !broadcasts(where->operand(0)->shape(), scores_shape)) {
      return;
    }
    for (int zero : {1, 2}) {
      const std::optional<double> z = constant_scalar(where->operand(zero));
      const std::optional<double> fill = constant_scalar(where->operand(3 - zero));
      if (!z || *z != 0 || !fill || !std::isinf(*fill) || *fill > 0) continue;
      match_.mask = where->operand(0);
      match_.mask_keep = zero == 1 ? 1 : 0;  // Where(C, 0, -inf) keeps where C is true
      return;
    }
  }

  // [Mul or Div by a constant scalar] back to MatMul(Q, Kt), which produces `scores_shape`.
  bool match_scaled(Value* value, const Shape& scores_shape) {
    match_.scale = 1.0;  // an earlier try (the other operand of a bias Add) may have set it
    value = skip_casts(value);
    if (!private_value(value) || value->shape() != scores_shape) return false;
    Node* node = value->producer();
    if (is_op(node, "Mul") || is_op(node, "Div")) {
      for (int c : {1, 0}) {
        if (c == 0 && node->op_type() == "Div") continue;
        const std::optional<double> factor = constant_scalar(node->operand(c));
        if (!factor || !std::isfinite(*factor) || *factor == 0) continue;
        match_.scale = node->op_type() == "Div" ? 1.0 / *factor : *factor;
        match_.nodes.push_back(node);
        value = skip_casts(node->operand(1 - c));
        if (!private_value(value) || value->shape() != scores_shape) return false;
        node = value->producer();
        break;
      }
    }
    if (!is_op(node, "MatMul")) return false;
    double factor = 1.0;
    std::vector<Node*> scalings;
    Value* q = unscaled(node->operand(0), factor, scalings);
    Value* kt = unscaled(node->operand(1), factor, scalings);
    if (!is_float(q->dtype()) || q->dtype() != kt->dtype() || q->shape().size() < 2 ||
        kt->shape().size() != q->shape().size() || value->shape().size() != q->shape().size() ||
        !batch_broadcasts(kt->shape(), q->shape())) {
      return false;
    }
    if (match_.mask != nullptr && !broadcasts(match_.mask->shape(), scores_shape)) return false;
    match_.q = q;
    match_.kt = kt;
    match_.scale *= factor;
    match_.nodes.push_back(node);
    match_.nodes.insert(match_.nodes.end(), scalings.rbegin(), scalings.rend());
    return true;
  }

  // `value` without a Mul or Div by a constant scalar that only the MatMul reads (its factor
  // multiplied into `scale`, its node added to `nodes`), or `value` itself.
  static Value* unscaled(Value* value, double& scale, std::vector<Node*>& nodes) {
    if (!private_value(value)) return value;
    Node* node = value->producer();
    if (!is_op(node, "Mul") && !is_op(node, "Div")) return value;
    for (int c : {1, 0}) {
      if (c == 0 && node->op_type() == "Div") continue;
      const std::optional<double> factor = constant_scalar(node->operand(c));
      Value* x = node->operand(1 - c);
      if (!factor || !std::isfinite(*factor) || *factor == 0 || x->type() != value->type()) {
        continue;
      }
      scale *= node->op_type() == "Div" ? 1.0 / *factor : *factor;
      nodes.push_back(node);
      return x;
    }
    return value;
  }

  // The Softmax's output, over float Casts and at most one safe-softmax guard, into
  // MatMul(probabilities, V).
  bool match_output(Node* softmax) {
    Value* value = softmax->output(0);
    std::vector<Node*> between;  // the casts and the guard
    while (true) {
      if (!match_.safe) {
        if (Node* guard = safe_softmax_guard(value)) {
          match_.safe = true;
          between.push_back(guard->operand(0)->producer());  // the IsNaN
          between.push_back(guard);
          value = guard->output(0);
          continue;
        }
      }
      if (!private_value(value)) return false;
      Node* reader = value->uses().front().user;
      if (is_op(reader, "Cast") && is_float(reader->output(0)->dtype())) {
        between.push_back(reader);
        value = reader->output(0);
        continue;
      }
      if (!is_op(reader, "MatMul") || reader->operand(0) != value) return false;
      Value* v = reader->operand(1);
      const Shape& q = match_.q->shape();
      if (v->dtype() != match_.q->dtype() || v->shape().size() != q.size() ||
          !batch_broadcasts(v->shape(), q) ||
          v->shape()[q.size() - 2] != match_.kt->shape().back()) {
        return false;
      }
      match_.v = v;
      match_.output = reader;
      match_.nodes.insert(match_.nodes.end(), between.begin(), between.end());
      match_.nodes.push_back(reader);
      return true;
    }
  }

  // The Where of PyTorch's safe softmax, Where(IsNaN(p), 0, p), when `p` is read by it and its
  // IsNaN alone; else null.
  static Node* safe_softmax_guard(Value* p) {
    if (p->uses().size() != 2 || p->is_graph_output()) return nullptr;
    for (const Use& use : p->uses()) {
      Node* guard = use.user;
      if (!is_op(guard, "Where") || use.operand != 2 || guard->operand(1) == p) continue;
      Value* nan = guard->operand(0);
      const std::optional<double> fill = constant_scalar(guard->operand(1));
      if (!private_value(nan) || !is_op(nan->producer(), "IsNaN") ||
          nan->producer()->operand(0) != p || !fill || *fill != 0) {
        continue;
      }
      return guard;
    }
    return nullptr;
  }

  // Whether the batch dims (all but the last two) of `kv`, of the same rank as `q`, are each
  // q's or 1: keys and values MatMul broadcasts over the query heads (multi-query attention as
  // Falcon writes it), which rewrite() expands to them.
  static bool batch_broadcasts(const Shape& kv, const Shape& q) {
    for (size_t i = 0; i + 2 < q.size(); ++i) {
      if (kv[i] != q[i] && kv[i] != 1) return false;
    }
    return true;
  }

  static bool broadcasts(const Shape& from, const Shape& to) {
    if (from.size() > to.size()) return false;
    for (size_t k = 0; k < from.size(); ++k) {
      const int64_t f = from[from.size() - 1 - k];
      if (f != 1 && f != to[to.size() - 1 - k]) return false;
    }
    return true;
  }

  bool file_declares_;
  AttentionMatch match_;
};

class FuseAttentionPass final : public Pass {
 public:
  std::string_view name() const override { return "fuse-attention"; }

  absl::StatusOr<bool> run(Graph& graph, const PassContext& /*context*/) override {
    std::vector<Node*> softmaxes;
    for (Node* node : graph.node_list()) {
      if (is_op(node, "Softmax")) softmaxes.push_back(node);
    }
    Matcher matcher(declares_parameters(graph));
    bool changed = false;
    bool_masks_.clear();
    for (Node* softmax : softmaxes) {
      std::optional<AttentionMatch> match = matcher.match(softmax);
      if (!match) continue;
      rewrite(graph, *match);
      changed = true;
    }
    return changed;
  }

 private:
  // A constant bias of only 0 and -inf (the exporters fold a causal mask into one, in f32
  // whatever the operands' type) is the bool mask "keep where 0": adding 0 leaves a score as it
  // is and -inf masks it, as the bool mask does. So is one whose fill is a finite value of
  // magnitude 2^127 or more (Hugging Face's torch.finfo(f32 or bf16).min) where every row keeps
  // a key: a finite score s of |s| < 2^103, plus such a fill F, rounds to F in f32 (the scores'
  // type; F's ulp is 2^104), and exp(F - m) for the row's largest kept score m is 0, exactly
  // what masking gives. A row that keeps no key would average the fill's keys instead (NaN, or
  // 0 when `safe`, as masked), so such a bias stays a bias. One bool initializer per bias,
  // shared by every node that reads it (a GPT's layers read one): a quarter of an f32 bias's
  // bytes, the form cuDNN's attention takes for any operand type, and the one whose causal
  // pattern it runs without a bias (runtime/cuda/attention.cc).
  Value* bool_mask_of(Graph& graph, Value* bias) {
    const Tensor* data = bias->initializer();
    if (data == nullptr || !data->has_data() || !is_float(bias->dtype())) return nullptr;
    if (auto it = bool_masks_.find(bias); it != bool_masks_.end()) return it->second;
    constexpr double kLargestFill = -0x1p127;
    const int64_t n = data->num_elements();
    const int64_t row = bias->shape().empty() ? 1 : std::max<int64_t>(bias->shape().back(), 1);
    std::vector<double> keep(n);
    bool finite_fill = false;
    for (int64_t i = 0; i < n; ++i) {
      const double x = data->element_as_double(i);
      if (x != 0 && !(x <= kLargestFill)) return bool_masks_[bias] = nullptr;
      finite_fill = finite_fill || (x != 0 && std::isfinite(x));
      keep[i] = x == 0 ? 1.0 : 0.0;
    }
    for (int64_t r = 0; finite_fill && r < n; r += row) {
      if (std::none_of(keep.begin() + r, keep.begin() + r + row, [](double k) { return k != 0; })) {
        return bool_masks_[bias] = nullptr;
      }
    }
    Value* mask = graph.add_initializer(graph.unique_value_name(str_cat(bias->name(), ".keep")),
                                        Tensor::from_doubles(DType::kBool, bias->shape(), keep));
    mask->set_constant(true);
    return bool_masks_[bias] = mask;
  }

  // `kv` (Kt or V) with its batch dims expanded to those of `q_shape` by an Expand before
  // `before`, or `kv` when they are already equal. The fused node reads one key and value head
  // per query head; the Expand's gradient sums them back.
  static Value* expanded_to_query_batch(Graph& graph, Value* kv, const Shape& q_shape,
                                        Node* before) {
    Shape shape = kv->shape();
    std::copy(q_shape.begin(), q_shape.end() - 2, shape.begin());
    if (shape == kv->shape()) return kv;
    std::vector<double> dims(shape.begin(), shape.end());
    Value* target = graph.add_initializer(
        graph.unique_value_name(str_cat(kv->name(), ".heads")),
        Tensor::from_doubles(DType::kI64, {static_cast<int64_t>(shape.size())}, dims));
    target->set_constant(true);
    Node* expand = graph.create_node(kOnnxDomain, "Expand", {kv, target},
                                     {TensorType{kv->dtype(), shape}}, {}, before);
    expand->output(0)->set_name(graph.unique_value_name(str_cat(kv->name(), ".expanded")));
    if (!before->name().empty()) expand->set_name(str_cat(before->name(), "/expand_", kv->name()));
    if (!before->precision().empty()) {
      PrecisionDecision& decision = expand->mutable_precision();
      decision.compute = kv->dtype();
      decision.reason = "fused attention: keys or values broadcast over the query heads";
    }
    return expand->output(0);
  }

  void rewrite(Graph& graph, AttentionMatch m) {
    if (m.mask != nullptr && m.mask->dtype() != DType::kBool) {
      Value* bias = m.mask;  // through float casts, which keep 0 and -inf
      while (is_op(bias->producer(), "Cast") && is_float(bias->producer()->operand(0)->dtype())) {
        bias = bias->producer()->operand(0);
      }
      if (Value* mask = bool_mask_of(graph, bias)) {
        m.mask = mask;
        m.mask_keep = 1;
      }
    }
    Node* out = m.output;
    const TensorType& q = m.q->type();
    m.kt = expanded_to_query_batch(graph, m.kt, q.shape, out);
    m.v = expanded_to_query_batch(graph, m.v, q.shape, out);
    const TensorType lse{q.dtype == DType::kF64 ? DType::kF64 : DType::kF32,
                         Shape(q.shape.begin(), q.shape.end() - 1)};
    std::vector<Value*> operands = {m.q, m.kt, m.v};
    if (m.mask != nullptr) operands.push_back(m.mask);
    Attributes attrs;
    attrs["scale"] = static_cast<float>(m.scale);
    if (m.mask != nullptr && m.mask->dtype() == DType::kBool) attrs["mask_keep"] = m.mask_keep;
    if (m.safe) attrs["safe"] = int64_t{1};
    Node* fused = graph.create_node(kAmpcDomain, "Attention", operands,
                                    {out->output(0)->type(), lse}, std::move(attrs), out);
    if (!out->name().empty()) fused->set_name(str_cat(out->name(), "/attention"));
    std::vector<std::string> described;
    for (const Node* node : m.nodes) {
      described.push_back(node->name().empty() ? node->op_type()
                                               : str_cat(node->op_type(), " '", node->name(), "'"));
    }
    if (!out->precision().empty()) {
      PrecisionDecision& decision = fused->mutable_precision();
      decision.compute = out->precision().compute;
      decision.accumulate = q.dtype == DType::kF64 ? DType::kF64 : DType::kF32;
      decision.reason = str_cat("fused attention (scores, softmax and weighted sum in ",
                                dtype_name(*decision.accumulate), ", never stored) of ",
                                str_join(described, ", "));
    }
    const std::string name = out->output(0)->name();
    out->output(0)->replace_all_uses_with(fused->output(0));
    std::set<Value*> maybe_dead;  // the scale and the fill value, now read by nothing
    // Erase each node once nothing reads it: readers before producers.
    std::vector<Node*> remaining = m.nodes;
    while (!remaining.empty()) {
      const size_t before = remaining.size();
      std::erase_if(remaining, [&](Node* node) {
        for (int i = 0; i < node->num_outputs(); ++i) {
          if (node->has_output(i) && !node->output(i)->is_dead()) return false;
        }
        for (Value* operand : node->operands()) {
          if (operand != nullptr && operand->initializer() != nullptr) maybe_dead.insert(operand);
        }
        graph.erase_node(node);
        return true;
      });
      AMPC_CHECK(remaining.size() < before);  // the matcher took only values the pattern reads
    }
    fused->output(0)->set_name(name);
    fused->output(1)->set_name(graph.unique_value_name(str_cat(name, ".lse")));
    for (Value* value : maybe_dead) {
      if (value->is_dead()) {
        bool_masks_.erase(value);
        graph.erase_graph_value(value);
      }
    }
  }

  std::unordered_map<const Value*, Value*> bool_masks_;
};

}  // namespace

std::unique_ptr<Pass> make_fuse_attention_pass() { return std::make_unique<FuseAttentionPass>(); }

}  // namespace ampc
