// Einsum (opset 12) expanded at import into Transpose, Reshape, Slice, ReduceSum, Mul and
// MatMul, so that every backend runs it and autodiff differentiates it with no kernel or
// gradient rule of its own.
//
// The equation is read as ONNX (numpy.einsum) defines it: comma-separated terms of letters
// (a-z, A-Z), each with at most one '...'; after '->' the output's letters, else the letters that
// occur once in the whole equation in ASCII order (upper case first), after the '...' dims.
// Spaces are ignored. '...' stands for the dims a term's letters leave; where terms leave
// different numbers, they are right-aligned and broadcast (a dim of 1 against any size), as in
// numpy. A letter's size is the same wherever it occurs.
//
// The lowering, in this order:
//  1. A letter repeated within one term takes the diagonal: its k dims (each of size n) are moved
//     last and flattened into n^k elements, and a Slice with step 1 + n + ... + n^(k-1) picks the
//     n on the diagonal.
//  2. Each operand drops the '...' dims of size 1 that another operand broadcasts, and sums out
//     (ReduceSum) the letters no other operand and not the output has.
//  3. Operands are contracted pairwise, left to right. A letter both have is a batch letter if
//     the output or a later operand has it, else it is summed. With summed letters the pair is one
//     MatMul of [batch..., M, K] by [batch..., K, N] (M, K and N the products of the left's own,
//     the summed and the right's own letters' sizes; with no batch letters, the left's own dims
//     are kept and a side with no own letters is 1-D); without, a broadcasting Mul.
//  4. The result is transposed into the output's order.
// Transposes and Reshapes that would not change their input are left out.
//
// Numerics: Transpose, Reshape and Slice move data; the sums round as MatMul and ReduceSum do
// (f32 accumulation for low-precision inputs) and a Mul rounds once. Integer einsum takes the
// integer types MatMul takes.
#include <algorithm>
#include <numeric>
#include <optional>
#include <set>

#include "compiler/onnx_lowering_internal.h"
#include "compiler/strings.h"

namespace ampc::onnx_io::lowering {
namespace {

// Labels: 0-25 the letters 'A'-'Z', 26-51 'a'-'z' (so label order is ASCII order), and from 52
// the dims '...' stands for, the leftmost first.
constexpr int kLetters = 52;

int letter_label(char c) { return c >= 'a' ? 26 + (c - 'a') : c - 'A'; }

std::string label_name(int label) {
  if (label >= kLetters) return str_cat("'...' dim ", label - kLetters);
  return str_cat("letter '", static_cast<char>(label < 26 ? 'A' + label : 'a' + label - 26), "'");
}

// One term of the equation as written: its letters' labels and where '...' stands among them.
struct Term {
  std::string text;
  std::vector<int> letters;
  std::optional<size_t> ellipsis;
};

struct Equation {
  std::vector<Term> inputs;
  std::optional<Term> output;  // absent: implicit
};

absl::StatusOr<Term> parse_term(std::string_view text, const std::string& where) {
  Term term{std::string(text), {}, std::nullopt};
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) {
      term.letters.push_back(letter_label(c));
    } else if (text.substr(i, 3) == "...") {
      if (term.ellipsis) return invalid(str_cat(where, ": term '", text, "' has two '...'"));
      term.ellipsis = term.letters.size();
      i += 2;
    } else {
      return invalid(str_cat(where, ": term '", text, "' has '", std::string(1, c),
                             "'; a term holds letters (a-z, A-Z) and at most one '...'"));
    }
  }
  return term;
}

absl::StatusOr<Equation> parse_equation(std::string equation, const std::string& where) {
  std::erase(equation, ' ');
  Equation parsed;
  std::string_view lhs = equation;
  if (const size_t arrow = equation.find("->"); arrow != std::string::npos) {
    std::string_view rhs = lhs.substr(arrow + 2);
    lhs = lhs.substr(0, arrow);
    if (rhs.find("->") != std::string_view::npos || rhs.find(',') != std::string_view::npos) {
      return invalid(
          str_cat(where, ": the output '", rhs, "' must be one term, and '->' appear once"));
    }
    AMPC_ASSIGN_OR_RETURN(parsed.output, parse_term(rhs, where));
  }
  size_t begin = 0;
  while (true) {
    const size_t comma = std::min(lhs.find(',', begin), lhs.size());
    AMPC_ASSIGN_OR_RETURN(Term term, parse_term(lhs.substr(begin, comma - begin), where));
    parsed.inputs.push_back(std::move(term));
    if (comma == lhs.size()) break;
    begin = comma + 1;
  }
  return parsed;
}

// An operand while the lowering runs: a value of the plan with one label per dim.
struct Operand {
  int value = 0;
  std::vector<int> labels;
  Shape shape;
};

// The nodes the lowering will emit, planned first so that the last one can be given the
// Einsum's output name. Values 0..n-1 are the inputs; each step adds one.
class Plan {
 public:
  explicit Plan(int inputs) : inputs_(inputs) {}

  struct Step {
    std::string op;
    std::vector<int> operands;
    std::vector<Tensor> constants;  // further operands, emitted as Constant nodes
    Attributes attrs;
  };

  int add(std::string op, std::vector<int> operands, Attributes attrs = {},
          std::vector<Tensor> constants = {}) {
    steps_.push_back({std::move(op), std::move(operands), std::move(constants), std::move(attrs)});
    return inputs_ + static_cast<int>(steps_.size()) - 1;
  }

  // `x` with its dims in the order `perm`; nothing when that is the order they have.
  void permute(Operand& x, const std::vector<int64_t>& perm) {
    std::vector<int64_t> identity(perm.size());
    std::iota(identity.begin(), identity.end(), 0);
    if (perm == identity) return;
    Operand out{add("Transpose", {x.value}, {{"perm", AttrValue(perm)}}), {}, {}};
    for (int64_t d : perm) {
      out.labels.push_back(x.labels[d]);
      out.shape.push_back(x.shape[d]);
    }
    x = std::move(out);
  }

  // `x` with its (distinct) labels in the order `labels`.
  void arrange(Operand& x, const std::vector<int>& labels) {
    std::vector<int64_t> perm;
    for (int label : labels) {
      perm.push_back(std::find(x.labels.begin(), x.labels.end(), label) - x.labels.begin());
    }
    permute(x, perm);
  }

  // `x` reshaped to `shape`, now labelled `labels`.
  void reshape(Operand& x, const Shape& shape, std::vector<int> labels) {
    if (shape != x.shape) {
      x.value = add("Reshape", {x.value}, {},
                    {Tensor::from_i64({static_cast<int64_t>(shape.size())}, shape)});
      x.shape = shape;
    }
    x.labels = std::move(labels);
  }

  // Emits the steps; the last gets `output` as its name (an Identity when there is none).
  absl::Status emit(Emitter& e, std::vector<Value*> values, int result, const std::string& output) {
    if (steps_.empty() || result != inputs_ + static_cast<int>(steps_.size()) - 1) {
      add("Identity", {result});
    }
    for (size_t s = 0; s < steps_.size(); ++s) {
      Step& step = steps_[s];
      std::vector<Value*> operands;
      for (int v : step.operands) operands.push_back(values.at(v));
      for (Tensor& constant : step.constants) {
        AMPC_ASSIGN_OR_RETURN(Value * c, e.constant(std::move(constant)));
        operands.push_back(c);
      }
      const bool last = s + 1 == steps_.size();
      AMPC_ASSIGN_OR_RETURN(Value * v, e.op(step.op, std::move(operands), std::move(step.attrs),
                                            last ? output : std::string()));
      values.push_back(v);
    }
    return absl::OkStatus();
  }

 private:
  int inputs_;
  std::vector<Step> steps_;
};

int64_t product(const std::vector<int>& labels, const std::map<int, int64_t>& sizes) {
  int64_t n = 1;
  for (int label : labels) n *= sizes.at(label);
  return n;
}

Shape sizes_of(const std::vector<int>& labels, const std::map<int, int64_t>& sizes) {
  Shape shape;
  for (int label : labels) shape.push_back(sizes.at(label));
  return shape;
}

// Step 1: the diagonal of every letter repeated in `x`; its label then comes last, once.
void take_diagonals(Plan& plan, Operand& x) {
  std::vector<int> once;
  std::vector<int> repeated;
  for (int label : x.labels) {
    const auto count = std::count(x.labels.begin(), x.labels.end(), label);
    std::vector<int>& kind = count == 1 ? once : repeated;
    if (std::find(kind.begin(), kind.end(), label) == kind.end()) kind.push_back(label);
  }
  if (repeated.empty()) return;
  std::vector<int64_t> perm;
  Shape flat;
  std::vector<int> labels = once;
  Shape diagonal;
  for (int label : once) {
    perm.push_back(std::find(x.labels.begin(), x.labels.end(), label) - x.labels.begin());
    flat.push_back(x.shape[perm.back()]);
    diagonal.push_back(flat.back());
  }
  std::vector<int64_t> starts, ends, axes, steps;
  for (int label : repeated) {
    int64_t n = 0;
    int64_t elements = 1;
    int64_t step = 0;
    for (size_t d = 0; d < x.labels.size(); ++d) {
      if (x.labels[d] != label) continue;
      perm.push_back(static_cast<int64_t>(d));
      n = x.shape[d];
      step += elements;  // 1 + n + n^2 + ...: one further along every dim
      elements *= n;
    }
    starts.push_back(0);
    ends.push_back(elements);
    axes.push_back(static_cast<int64_t>(flat.size()));
    steps.push_back(step);
    flat.push_back(elements);
    labels.push_back(label);
    diagonal.push_back(n);
  }
  plan.permute(x, perm);
  plan.reshape(x, flat, {});
  const auto rank = static_cast<int64_t>(axes.size());
  x.value = plan.add("Slice", {x.value}, {},
                     {Tensor::from_i64({rank}, starts), Tensor::from_i64({rank}, ends),
                      Tensor::from_i64({rank}, axes), Tensor::from_i64({rank}, steps)});
  x.labels = std::move(labels);
  x.shape = std::move(diagonal);
}

// Step 3: the contraction of `a` and `b` over the labels they share that `needed` lacks.
Operand contract(Plan& plan, Operand a, Operand b, const std::set<int>& needed,
                 const std::map<int, int64_t>& sizes) {
  std::vector<int> batch, summed, a_only, b_only;
  for (int label : a.labels) {
    const bool shared = std::find(b.labels.begin(), b.labels.end(), label) != b.labels.end();
    (shared ? (needed.contains(label) ? batch : summed) : a_only).push_back(label);
  }
  for (int label : b.labels) {
    if (std::find(a.labels.begin(), a.labels.end(), label) == a.labels.end()) {
      b_only.push_back(label);
    }
  }
  if (summed.empty()) {
    // An elementwise product: `a` as it is with a 1 for each of b's own labels, `b` in a's order
    // with a 1 for each of a's own labels (leading ones left to broadcasting).
    std::vector<int> b_order;
    for (int label : a.labels) {
      if (std::find(batch.begin(), batch.end(), label) != batch.end()) b_order.push_back(label);
    }
    b_order.insert(b_order.end(), b_only.begin(), b_only.end());
    plan.arrange(b, b_order);
    Shape a_shape = a.shape;
    a_shape.insert(a_shape.end(), b_only.size(), 1);
    Shape b_shape;
    for (int label : a.labels) {
      const bool shared = std::find(batch.begin(), batch.end(), label) != batch.end();
      if (shared || !b_shape.empty()) b_shape.push_back(shared ? sizes.at(label) : 1);
    }
    const Shape own = sizes_of(b_only, sizes);
    b_shape.insert(b_shape.end(), own.begin(), own.end());
    std::vector<int> labels = a.labels;
    labels.insert(labels.end(), b_only.begin(), b_only.end());
    if (!a.labels.empty()) plan.reshape(a, a_shape, labels);  // a scalar broadcasts as it is
    plan.reshape(b, b_shape, {});
    return Operand{plan.add("Mul", {a.value, b.value}), labels, sizes_of(labels, sizes)};
  }
  // [batch..., M, K] x [batch..., K, N] -> [batch..., M, N] -> [batch..., a_only..., b_only...].
  // With no batch letters, a's own dims stay as they are (MatMul broadcasts a 2-D B over them)
  // and an operand with no own letters is 1-D, so fewer Reshapes are needed.
  std::vector<int> a_order = batch;
  a_order.insert(a_order.end(), a_only.begin(), a_only.end());
  a_order.insert(a_order.end(), summed.begin(), summed.end());
  std::vector<int> b_order = batch;
  b_order.insert(b_order.end(), summed.begin(), summed.end());
  b_order.insert(b_order.end(), b_only.begin(), b_only.end());
  plan.arrange(a, a_order);
  plan.arrange(b, b_order);
  Shape rows = sizes_of(batch, sizes);
  if (batch.empty()) {
    rows = sizes_of(a_only, sizes);
  } else {
    rows.push_back(product(a_only, sizes));
  }
  const int64_t k = product(summed, sizes);
  Shape a_shape = rows;
  a_shape.push_back(k);
  Shape b_shape = sizes_of(batch, sizes);
  b_shape.push_back(k);
  Shape y_shape = rows;
  if (!batch.empty() || !b_only.empty()) {
    b_shape.push_back(product(b_only, sizes));
    y_shape.push_back(b_shape.back());
  }
  plan.reshape(a, a_shape, {});
  plan.reshape(b, b_shape, {});
  Operand y{plan.add("MatMul", {a.value, b.value}), {}, y_shape};
  std::vector<int> labels = batch;
  labels.insert(labels.end(), a_only.begin(), a_only.end());
  labels.insert(labels.end(), b_only.begin(), b_only.end());
  plan.reshape(y, sizes_of(labels, sizes), labels);
  return y;
}

}  // namespace

absl::Status lower_einsum(const onnx::NodeProto& proto, const std::string& label,
                          ImportSink& sink) {
  AMPC_ASSIGN_OR_RETURN(
      NodeAttributes attrs,
      read_attributes(proto, label, {{"equation", onnx::AttributeProto::STRING}}));
  if (!attrs.has("equation")) {
    return invalid(str_cat(label, ": required attribute 'equation' is missing"));
  }
  const std::string text = attrs.s("equation", "");
  const std::string where = str_cat(label, ": equation '", text, "'");
  AMPC_ASSIGN_OR_RETURN(Equation equation, parse_equation(text, where));
  const auto count = static_cast<int>(equation.inputs.size());
  if (count != proto.input_size()) {
    return invalid(str_cat(where, " has ", count, count == 1 ? " term" : " terms",
                           " before '->' but the node has ", proto.input_size(), " inputs"));
  }
  if (proto.output_size() > 1) {
    return invalid(str_cat(label, " has ", proto.output_size(), " outputs; Einsum has one"));
  }

  std::vector<Value*> inputs;
  for (int i = 0; i < count; ++i) {
    AMPC_ASSIGN_OR_RETURN(Value * input, tensor_input(proto, i, label, sink));
    const DType dtype = input->dtype();
    if (dtype != DType::kF32 && dtype != DType::kF16 && dtype != DType::kBF16 &&
        dtype != DType::kF64 && dtype != DType::kI64 && dtype != DType::kI32) {
      return invalid(str_cat(label, ": input ", i, " ('", proto.input(i), "') is ",
                             dtype_name(dtype),
                             "; ampc's Einsum takes f32, f16, bf16, f64, i64 and i32 (the types of "
                             "its MatMul)"));
    }
    if (i > 0 && dtype != inputs[0]->dtype()) {
      return invalid(str_cat(label, ": input ", i, " ('", proto.input(i), "') is ",
                             dtype_name(dtype), " but input 0 is ", dtype_name(inputs[0]->dtype()),
                             "; Einsum's inputs share one type"));
    }
    inputs.push_back(input);
  }

  // The rank '...' stands for in each term, and the most of them: '...' dims right-aligned.
  std::vector<int64_t> ellipsis_rank(count, 0);
  int64_t ellipsis_dims = 0;
  for (int i = 0; i < count; ++i) {
    const Term& term = equation.inputs[i];
    const auto rank = static_cast<int64_t>(inputs[i]->type().shape.size());
    const auto letters = static_cast<int64_t>(term.letters.size());
    if (term.ellipsis ? rank < letters : rank != letters) {
      return invalid(str_cat(where, ": input ", i, " ('", proto.input(i), "') is ",
                             type_to_string(inputs[i]->type()), " but its term '", term.text,
                             "' names ", term.ellipsis ? "at least " : "", letters, " dims"));
    }
    ellipsis_rank[i] = rank - letters;
    ellipsis_dims = std::max(ellipsis_dims, ellipsis_rank[i]);
  }

  // Each operand's labels, and each label's size: a letter's the same everywhere, a '...' dim's
  // broadcast.
  std::vector<Operand> operands;
  std::map<int, int64_t> sizes;
  std::map<int, std::string> size_from;  // where a letter's size was first seen, for messages
  for (int i = 0; i < count; ++i) {
    const Term& term = equation.inputs[i];
    Operand x{i, {}, inputs[i]->type().shape};
    for (size_t j = 0; j <= term.letters.size(); ++j) {
      if (term.ellipsis == j) {
        for (int64_t d = ellipsis_dims - ellipsis_rank[i]; d < ellipsis_dims; ++d) {
          x.labels.push_back(kLetters + static_cast<int>(d));
        }
      }
      if (j < term.letters.size()) x.labels.push_back(term.letters[j]);
    }
    for (size_t d = 0; d < x.labels.size(); ++d) {
      const int l = x.labels[d];
      const int64_t size = x.shape[d];
      const std::string at = str_cat("dim ", d, " of input ", i, " ('", proto.input(i), "')");
      if (size == 0) {
        // Reshape reads a 0 in its target as "keep this dim" before opset 14.
        return absl::UnimplementedError(
            str_cat(label, ": ", at, " is empty; ampc's Einsum takes no empty dims"));
      }
      auto [it, first] = sizes.emplace(l, size);
      if (first) {
        size_from[l] = at;
      } else if (l < kLetters && it->second != size) {
        return invalid(str_cat(where, ": ", label_name(l), " is ", it->second, " at ", size_from[l],
                               " but ", size, " at ", at));
      } else if (l >= kLetters && it->second != size && it->second != 1 && size != 1) {
        return invalid(
            str_cat(where, ": the dims '...' stands for do not broadcast: ", label_name(l), " is ",
                    it->second, " at ", size_from[l], " but ", size, " at ", at));
      } else if (size != 1) {
        it->second = size;
        size_from[l] = at;
      }
    }
    operands.push_back(std::move(x));
  }

  // The output's labels.
  std::vector<int> output;
  if (equation.output) {
    const Term& term = *equation.output;
    if (!term.ellipsis && ellipsis_dims > 0) {
      return invalid(str_cat(where, ": '...' stands for ", ellipsis_dims,
                             " dims of the inputs but the output has no '...'"));
    }
    for (size_t j = 0; j <= term.letters.size(); ++j) {
      if (term.ellipsis == j) {
        for (int d = 0; d < ellipsis_dims; ++d) output.push_back(kLetters + d);
      }
      if (j == term.letters.size()) break;
      const int l = term.letters[j];
      if (!sizes.contains(l)) {
        return invalid(str_cat(where, ": the output's ", label_name(l), " is in no input"));
      }
      if (std::find(output.begin(), output.end(), l) != output.end()) {
        return invalid(str_cat(where, ": the output has ", label_name(l), " twice"));
      }
      output.push_back(l);
    }
  } else {
    for (int d = 0; d < ellipsis_dims; ++d) output.push_back(kLetters + d);
    std::map<int, int> occurrences;
    for (const Term& term : equation.inputs) {
      for (int l : term.letters) ++occurrences[l];
    }
    for (const auto& [l, n] : occurrences) {
      if (n == 1) output.push_back(l);
    }
  }
  const std::set<int> in_output(output.begin(), output.end());

  Emitter e(proto, label, sink);
  if (e.output(0).empty()) return absl::OkStatus();
  Plan plan(count);

  // Step 1, then step 2: '...' dims of 1 another operand broadcasts go first, so that the letters
  // summed out are those no other operand has once they are gone.
  std::vector<std::set<int>> dropped(count);
  for (int i = 0; i < count; ++i) {
    take_diagonals(plan, operands[i]);
    for (size_t d = 0; d < operands[i].labels.size(); ++d) {
      const int l = operands[i].labels[d];
      if (operands[i].shape[d] == 1 && sizes.at(l) != 1) dropped[i].insert(l);
    }
  }
  for (int i = 0; i < count; ++i) {
    Operand& x = operands[i];
    std::vector<int64_t> axes;
    std::vector<int> kept;
    bool sums = false;
    for (size_t d = 0; d < x.labels.size(); ++d) {
      const int l = x.labels[d];
      bool elsewhere = in_output.contains(l);
      for (int j = 0; j < count && !elsewhere; ++j) {
        elsewhere = j != i && !dropped[j].contains(l) &&
                    std::find(operands[j].labels.begin(), operands[j].labels.end(), l) !=
                        operands[j].labels.end();
      }
      if (dropped[i].contains(l) || !elsewhere) {
        axes.push_back(static_cast<int64_t>(d));
        sums = sums || x.shape[d] != 1;
      } else {
        kept.push_back(l);
      }
    }
    if (axes.empty()) continue;
    if (sums) {
      x.value = plan.add("ReduceSum", {x.value},
                         {{"axes", AttrValue(axes)}, {"keepdims", AttrValue(int64_t{0})}});
      x.shape = sizes_of(kept, sizes);
      x.labels = std::move(kept);
    } else {
      const Shape shape = sizes_of(kept, sizes);
      plan.reshape(x, shape, std::move(kept));
    }
  }

  // Step 3.
  Operand result = operands[0];
  for (int i = 1; i < count; ++i) {
    std::set<int> needed = in_output;
    for (int j = i + 1; j < count; ++j) {
      needed.insert(operands[j].labels.begin(), operands[j].labels.end());
    }
    result = contract(plan, std::move(result), operands[i], needed, sizes);
  }

  // Step 4.
  plan.arrange(result, output);
  return plan.emit(e, inputs, result.value, e.output(0));
}

}  // namespace ampc::onnx_io::lowering
