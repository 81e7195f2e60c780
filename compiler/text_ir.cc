// The text IR printer. docs/text-ir.md specifies the format; text_ir_parser.cc reads it back.
//
// Output is a function of the graph alone: values are named in definition order, unnamed and
// repeated names get fresh ones that no other value uses, and every float prints in its shortest
// exact form, so print -> parse -> print is an identity.
#include "compiler/text_ir.h"

#include <string_view>
#include <unordered_map>
#include <unordered_set>

#include "ampc/float16.h"
#include "compiler/strings.h"
#include "compiler/text_ir_syntax.h"

namespace ampc {
namespace {

using text_ir::format_f32;
using text_ir::format_f64;
using text_ir::quote;

std::string word_or_quoted(std::string_view text) {
  return text_ir::is_bare_word(text) ? std::string(text) : quote(text);
}

// `MatMul`, `ampc.ReluGrad`; quoted when the parser would split or read it differently (an op
// name with a '.', or one that could be taken for a keyword at the start of a line).
std::string op_ref(const Node& node) {
  const std::string& domain = node.domain();
  const std::string& op = node.op_type();
  bool plain = !op.empty() && op != "init" && op != "return" && op != "_" &&
               op.find_first_of(".+-") == std::string::npos && text_ir::is_bare_word(op) &&
               (domain.empty() || text_ir::is_bare_word(domain));
  if (plain) return domain.empty() ? op : str_cat(domain, ".", op);
  return domain.empty() ? quote(op) : str_cat(quote(domain), ".", quote(op));
}

std::string tensor_element(const Tensor& tensor, int64_t i) {
  switch (tensor.dtype()) {
    case DType::kF32:
      return format_f32(tensor.data<float>()[i]);
    case DType::kF64:
      return format_f64(tensor.data<double>()[i]);
    case DType::kF16:
      return format_f32(f16_bits_to_f32(tensor.data<uint16_t>()[i]));
    case DType::kBF16:
      return format_f32(bf16_bits_to_f32(tensor.data<uint16_t>()[i]));
    case DType::kBool:
      return tensor.data<uint8_t>()[i] != 0 ? "true" : "false";
    case DType::kF8E4M3FN:
    case DType::kF8E5M2:
      return fmt::format("0x{:02x}", tensor.data<uint8_t>()[i]);
    default:
      return str_cat(tensor.element_as_i64(i));
  }
}

class Printer {
 public:
  Printer(const Graph& graph, const PrintOptions& options) : graph_(graph), options_(options) {}

  std::string print(std::string_view keyword = "graph") {
    assign_names();
    print_header(keyword);
    for (const Value* init : graph_.initializers()) {
      out_ += str_cat("  init ", ref(init), ": ", type_to_string(init->type()), " = ",
                      tensor_data(*init->initializer()), "\n");
    }
    for (const auto& node : graph_.nodes()) print_node(*node);
    out_ += "  return";
    for (size_t i = 0; i < graph_.outputs().size(); ++i) {
      out_ += str_cat(i == 0 ? " " : ", ", ref(graph_.outputs()[i]));
    }
    out_ += "\n";
    for (const Graph::StateUpdate& update : graph_.state_updates()) {
      out_ +=
          str_cat("  update ", ref_by_name(update.state), " = ", ref_by_name(update.update), "\n");
    }
    out_ += "}\n";
    if (const Graph* step = graph_.training_step()) {
      out_ += Printer(*step, options_).print("training_step");
    }
    return std::move(out_);
  }

 private:
  std::vector<const Value*> values_in_order() const {
    std::vector<const Value*> values(graph_.inputs().begin(), graph_.inputs().end());
    values.insert(values.end(), graph_.initializers().begin(), graph_.initializers().end());
    for (const auto& node : graph_.nodes()) {
      for (int i = 0; i < node->num_outputs(); ++i) {
        if (node->has_output(i)) values.push_back(node->output(i));
      }
    }
    return values;
  }

  // The first value with a name keeps it; unnamed values become t0, t1, ... and later repeats of
  // a name become name.1, name.2, ..., each skipping every name some value already has.
  void assign_names() {
    const std::vector<const Value*> values = values_in_order();
    std::unordered_set<std::string> taken;
    for (const Value* v : values) {
      if (!v->name().empty()) taken.insert(v->name());
    }
    std::unordered_set<std::string> assigned;
    int next_temp = 0;
    for (const Value* v : values) {
      std::string name = v->name();
      if (name.empty()) {
        do name = str_cat("t", next_temp++);
        while (taken.contains(name));
      } else if (assigned.contains(name)) {
        for (int k = 1; taken.contains(name); ++k) name = str_cat(v->name(), ".", k);
      }
      taken.insert(name);
      assigned.insert(name);
      names_.emplace(v, std::move(name));
      by_name_.emplace(v->name(), v);
    }
  }

  std::string ref(const Value* value) const {
    if (value == nullptr) return "_";
    auto it = names_.find(value);
    // A value this graph does not define (a broken graph being dumped): show its own name.
    const std::string& name = it != names_.end() ? it->second : value->name();
    return str_cat("%", text_ir::is_bare_value_name(name) ? name : quote(name));
  }

  // `%name` of the graph value named `name` (state updates are kept by name).
  std::string ref_by_name(const std::string& name) const {
    if (auto it = by_name_.find(name); it != by_name_.end()) return ref(it->second);
    return str_cat("%", text_ir::is_bare_value_name(name) ? name : quote(name));
  }

  void print_header(std::string_view keyword) {
    out_ += str_cat(keyword, " ", word_or_quoted(graph_.name()), "(");
    for (size_t i = 0; i < graph_.inputs().size(); ++i) {
      const Value* input = graph_.inputs()[i];
      out_ += str_cat(i == 0 ? "" : ", ", ref(input), ": ", type_to_string(input->type()));
    }
    out_ += str_cat(") opset(", graph_.opset(""));
    for (const auto& [domain, version] : graph_.opset_imports()) {
      if (!domain.empty()) out_ += str_cat(", ", word_or_quoted(domain), ":", version);
    }
    out_ += ") {\n";
  }

  bool elide(const Tensor& tensor) const {
    return !tensor.has_data() || (options_.max_constant_elements >= 0 &&
                                  tensor.num_elements() > options_.max_constant_elements);
  }

  std::string tensor_data(const Tensor& tensor) const {
    if (elide(tensor)) return "elided";
    std::string text = "[";
    for (int64_t i = 0; i < tensor.num_elements(); ++i) {
      if (i > 0) text += ", ";
      text += tensor_element(tensor, i);
    }
    return text + "]";
  }

  std::string attr_value(const AttrValue& value) const {
    struct Visitor {
      const Printer& printer;
      std::string operator()(int64_t v) const { return str_cat(v); }
      std::string operator()(float v) const { return format_f32(v); }
      std::string operator()(const std::string& v) const { return quote(v); }
      std::string operator()(const std::vector<int64_t>& v) const {
        return str_cat("[", str_join(v, ", "), "]");
      }
      std::string operator()(const std::vector<float>& v) const {
        std::vector<std::string> items;
        for (float f : v) items.push_back(format_f32(f));
        return str_cat("[", str_join(items, ", "), "]");
      }
      std::string operator()(const std::vector<std::string>& v) const {
        std::vector<std::string> items;
        for (const std::string& s : v) items.push_back(quote(s));
        return str_cat("[", str_join(items, ", "), "]");
      }
      std::string operator()(const Tensor& t) const {
        return str_cat(type_to_string(t.type()), " ", printer.tensor_data(t));
      }
      std::string operator()(DType t) const { return std::string(dtype_name(t)); }
    };
    return std::visit(Visitor{*this}, value);
  }

  void print_node(const Node& node) {
    out_ += "  ";
    if (node.num_outputs() > 0) {
      for (int i = 0; i < node.num_outputs(); ++i) {
        out_ += str_cat(i == 0 ? "" : ", ", ref(node.has_output(i) ? node.output(i) : nullptr));
      }
      out_ += " = ";
    }
    out_ += op_ref(node);
    if (!node.attrs().empty()) {
      std::vector<std::string> items;
      for (const auto& [name, value] : node.attrs()) {
        items.push_back(str_cat(word_or_quoted(name), "=", attr_value(value)));
      }
      out_ += str_cat("<", str_join(items, ", "), ">");
    }
    std::vector<std::string> operands;
    for (const Value* operand : node.operands()) operands.push_back(ref(operand));
    out_ += str_cat("(", str_join(operands, ", "), ")");
    print_node_info(node);
    if (node.num_outputs() > 0) {
      std::vector<std::string> types;
      for (int i = 0; i < node.num_outputs(); ++i) {
        types.push_back(node.has_output(i) ? type_to_string(node.output(i)->type()) : "_");
      }
      out_ += str_cat(" : ", str_join(types, ", "));
    }
    if (!node.precision().empty())
      out_ += str_cat("  # ", text_ir::format_precision(node.precision()));
    out_ += "\n";
  }

  void print_node_info(const Node& node) {
    std::vector<std::string> items;
    if (!node.name().empty()) items.push_back(str_cat("name=", quote(node.name())));
    if (!node.doc_string().empty()) items.push_back(str_cat("doc=", quote(node.doc_string())));
    if (!items.empty()) out_ += str_cat(" {", str_join(items, ", "), "}");
  }

  const Graph& graph_;
  const PrintOptions& options_;
  std::unordered_map<const Value*, std::string> names_;
  // The first value (in definition order) of each name the graph gives, for ref_by_name.
  std::unordered_map<std::string_view, const Value*> by_name_;
  std::string out_;
};

}  // namespace

std::string print_graph(const Graph& graph, const PrintOptions& options) {
  return Printer(graph, options).print();
}

}  // namespace ampc
