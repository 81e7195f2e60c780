// The text IR parser: recursive descent over the tokens of text_ir_syntax.cc, following the
// grammar in docs/text-ir.md. It builds the graph through the Graph API only (add_input,
// add_initializer, create_node, set_name), so a parsed graph is like any other; it checks what
// the grammar alone can (defined-before-use, unique names, type counts, tensor sizes, attribute
// kinds against the op's AttrSpecs) and leaves the rest to verify().
#include <unordered_map>
#include <unordered_set>

#include "ampc/float16.h"
#include "compiler/op_def.h"
#include "compiler/strings.h"
#include "compiler/text_ir.h"
#include "compiler/text_ir_syntax.h"

namespace ampc {
namespace {

using text_ir::describe;
using text_ir::position;
using text_ir::Token;
using text_ir::TokenKind;

// Shapes whose element count exceeds this are refused, so that byte sizes cannot overflow.
constexpr int64_t kMaxElements = int64_t{1} << 56;

std::string dtype_list() {
  std::vector<std::string_view> names;
  for (DType t : kAllDTypes) names.push_back(dtype_name(t));
  return str_join(names, ", ");
}

template <typename T>
void append_bytes(std::vector<uint8_t>* bytes, T value) {
  const auto* raw = reinterpret_cast<const uint8_t*>(&value);
  bytes->insert(bytes->end(), raw, raw + sizeof(T));
}

// Int literals are accepted where the op wants a float, and `[]` takes the kind the op expects.
bool conform_to_kind(AttrKind expected, AttrValue* value) {
  const AttrKind kind = attr_kind(*value);
  if (kind == expected) return true;
  if (expected == AttrKind::kFloat && kind == AttrKind::kInt) {
    *value = static_cast<float>(std::get<int64_t>(*value));
    return true;
  }
  if (expected == AttrKind::kFloats && kind == AttrKind::kInts) {
    std::vector<float> floats;
    for (int64_t v : std::get<std::vector<int64_t>>(*value))
      floats.push_back(static_cast<float>(v));
    *value = std::move(floats);
    return true;
  }
  if (expected == AttrKind::kStrings && kind == AttrKind::kInts &&
      std::get<std::vector<int64_t>>(*value).empty()) {
    *value = std::vector<std::string>();
    return true;
  }
  return false;
}

class Parser {
 public:
  explicit Parser(std::vector<Token> tokens) : tokens_(std::move(tokens)) {}

  // A graph, optionally followed by its training step (`training_step NAME(...) {...}`).
  absl::StatusOr<std::unique_ptr<Graph>> parse() {
    AMPC_ASSIGN_OR_RETURN(std::unique_ptr<Graph> graph, parse_one("graph"));
    if (at_word("training_step")) {
      Parser step_parser(tokens_);
      step_parser.pos_ = pos_;
      AMPC_ASSIGN_OR_RETURN(std::unique_ptr<Graph> step, step_parser.parse_one("training_step"));
      pos_ = step_parser.pos_;
      graph->set_training_step(std::move(step));
    }
    if (peek().kind != TokenKind::kEnd) return expected("end of input after the graph's '}'");
    return graph;
  }

 private:
  struct Definition {
    Value* value;
    int line;
  };

  // ---- Tokens ---------------------------------------------------------------------------------

  // The `ahead`-th token from here, comments skipped (they matter only after a node's types).
  const Token& peek(int ahead = 0) const {
    size_t i = pos_;
    while (true) {
      while (tokens_[i].kind == TokenKind::kComment) ++i;
      if (ahead == 0 || tokens_[i].kind == TokenKind::kEnd) return tokens_[i];
      --ahead;
      ++i;
    }
  }
  const Token& next() {
    while (tokens_[pos_].kind == TokenKind::kComment) ++pos_;
    const Token& token = tokens_[pos_];
    if (token.kind != TokenKind::kEnd) ++pos_;
    return token;
  }
  static bool is_punct(const Token& t, char c) {
    return t.kind == TokenKind::kPunct && t.text[0] == c;
  }
  static bool is_word(const Token& t, std::string_view w) {
    return t.kind == TokenKind::kWord && t.text == w;
  }
  bool at_punct(char c) const { return is_punct(peek(), c); }
  bool at_word(std::string_view w) const { return is_word(peek(), w); }
  bool accept_punct(char c) {
    if (!at_punct(c)) return false;
    next();
    return true;
  }

  static absl::Status error_at(const Token& token, std::string_view message) {
    return absl::InvalidArgumentError(str_cat(position(token.line, token.column), message));
  }
  absl::Status expected(std::string_view what) const {
    return error_at(peek(), str_cat("expected ", what, " but found ", describe(peek())));
  }
  absl::Status expect_punct(char c) {
    if (!accept_punct(c)) return expected(str_cat("'", std::string(1, c), "'"));
    return absl::OkStatus();
  }

  // ---- Values ---------------------------------------------------------------------------------

  absl::Status define(const Token& name, Value* value) {
    auto [it, inserted] = values_.emplace(name.text, Definition{value, name.line});
    if (!inserted) {
      return error_at(
          name, str_cat("value ", describe(name), " is already defined on line ", it->second.line));
    }
    value->set_name(name.text);
    return absl::OkStatus();
  }

  absl::StatusOr<Value*> use(const Token& name) const {
    auto it = values_.find(name.text);
    if (it == values_.end()) {
      return error_at(name, str_cat("value ", describe(name),
                                    " is not defined (a value must be defined before its uses)"));
    }
    return it->second.value;
  }

  // A value reference, or null for `_` when `allow_omitted`.
  absl::StatusOr<Value*> parse_use(std::string_view what, bool allow_omitted) {
    if (allow_omitted && at_word("_")) {
      next();
      return nullptr;
    }
    if (peek().kind != TokenKind::kValue) return expected(what);
    return use(next());
  }

  // ---- Types and tensors ----------------------------------------------------------------------

  absl::StatusOr<DType> parse_dtype_word() {
    std::optional<DType> dtype;
    if (peek().kind == TokenKind::kWord) dtype = parse_dtype(peek().text);
    if (!dtype) return expected(str_cat("an element type (", dtype_list(), ")"));
    next();
    return *dtype;
  }

  absl::StatusOr<Shape> parse_shape() {
    AMPC_RETURN_IF_ERROR(expect_punct('['));
    Shape shape;
    int64_t elements = 1;
    while (!at_punct(']')) {
      if (!shape.empty()) AMPC_RETURN_IF_ERROR(expect_punct(','));
      std::optional<int64_t> dim =
          peek().kind == TokenKind::kWord ? text_ir::parse_int(peek().text) : std::nullopt;
      if (!dim || *dim < 0) return expected("a dimension (an integer >= 0) or ']'");
      if (*dim > 0 && elements > kMaxElements / *dim) {
        return error_at(peek(), "the shape has too many elements");
      }
      elements *= *dim;
      shape.push_back(*dim);
      next();
    }
    next();
    return shape;
  }

  absl::StatusOr<TensorType> parse_type() {
    AMPC_ASSIGN_OR_RETURN(DType dtype, parse_dtype_word());
    AMPC_ASSIGN_OR_RETURN(Shape shape, parse_shape());
    return TensorType{dtype, std::move(shape)};
  }

  absl::Status parse_element(DType dtype, std::vector<uint8_t>* bytes) {
    const std::string& word = peek().kind == TokenKind::kWord ? peek().text : std::string();
    if (dtype == DType::kF32 || dtype == DType::kF16 || dtype == DType::kBF16) {
      std::optional<float> value = text_ir::parse_f32(word);
      if (!value) return expected(str_cat("a number of type ", dtype_name(dtype)));
      if (dtype == DType::kF32) append_bytes(bytes, *value);
      if (dtype == DType::kF16) append_bytes(bytes, f32_to_f16_bits(*value));
      if (dtype == DType::kBF16) append_bytes(bytes, f32_to_bf16_bits(*value));
    } else if (dtype == DType::kF64) {
      std::optional<double> value = text_ir::parse_f64(word);
      if (!value) return expected("a number of type f64");
      append_bytes(bytes, *value);
    } else if (dtype == DType::kBool) {
      if (word != "true" && word != "false") return expected("'true' or 'false'");
      bytes->push_back(word == "true" ? 1 : 0);
    } else if (dtype == DType::kF8E4M3FN || dtype == DType::kF8E5M2) {
      int byte = -1;
      if (word.size() >= 3 && word.size() <= 4 && word.starts_with("0x")) {
        byte = 0;
        for (char c : std::string_view(word).substr(2)) {
          const size_t digit = std::string_view("0123456789abcdef").find(c);
          byte = digit < 16 && byte >= 0 ? byte * 16 + static_cast<int>(digit) : -1;
        }
      }
      if (byte < 0) return expected("an fp8 byte in hex (0x00 to 0xff)");
      bytes->push_back(static_cast<uint8_t>(byte));
    } else {
      AMPC_RETURN_IF_ERROR(parse_int_element(dtype, word, bytes));
    }
    next();
    return absl::OkStatus();
  }

  absl::Status parse_int_element(DType dtype, std::string_view word, std::vector<uint8_t>* bytes) {
    std::optional<int64_t> value = text_ir::parse_int(word);
    int64_t low = INT64_MIN, high = INT64_MAX;
    if (dtype == DType::kI32) low = INT32_MIN, high = INT32_MAX;
    if (dtype == DType::kI8) low = INT8_MIN, high = INT8_MAX;
    if (dtype == DType::kU8) low = 0, high = UINT8_MAX;
    if (!value || *value < low || *value > high) {
      return expected(str_cat("an integer in the range of ", dtype_name(dtype)));
    }
    if (dtype == DType::kI64) append_bytes(bytes, *value);
    if (dtype == DType::kI32) append_bytes(bytes, static_cast<int32_t>(*value));
    if (dtype == DType::kI8 || dtype == DType::kU8) bytes->push_back(static_cast<uint8_t>(*value));
    return absl::OkStatus();
  }

  // `elided` or `[e0, e1, ...]`, flat, in row-major order.
  absl::StatusOr<Tensor> parse_tensor_data(const TensorType& type) {
    if (at_word("elided")) {
      next();
      return Tensor::elided(type);
    }
    const Token open = peek();
    if (!is_punct(open, '[')) return expected("'[' (the tensor's elements) or 'elided'");
    next();
    std::vector<uint8_t> bytes;
    int64_t count = 0;
    while (!at_punct(']')) {
      if (count > 0) AMPC_RETURN_IF_ERROR(expect_punct(','));
      AMPC_RETURN_IF_ERROR(parse_element(type.dtype, &bytes));
      ++count;
    }
    next();
    if (count != type.num_elements()) {
      return error_at(open, str_cat("expected ", type.num_elements(), " elements for ",
                                    type_to_string(type), " but found ", count));
    }
    return Tensor(type, std::move(bytes));
  }

  // ---- Attributes -----------------------------------------------------------------------------

  absl::StatusOr<AttrValue> parse_list() {
    next();  // '['
    std::vector<std::string> strings;
    std::vector<std::string> numbers;
    const bool of_strings = peek().kind == TokenKind::kString;
    bool any_float = false;
    while (!at_punct(']')) {
      if (!strings.empty() || !numbers.empty()) AMPC_RETURN_IF_ERROR(expect_punct(','));
      const Token& item = peek();
      if (of_strings) {
        if (item.kind != TokenKind::kString) return expected("a string");
        strings.push_back(item.text);
      } else {
        const bool is_int = item.kind == TokenKind::kWord && text_ir::is_int_literal(item.text);
        const bool is_float = item.kind == TokenKind::kWord && text_ir::parse_f32(item.text);
        if (!is_int && !is_float) return expected("a number or ']'");
        if (is_int && !text_ir::parse_int(item.text)) {
          return expected("an integer in the range of int64");
        }
        any_float |= !is_int;
        numbers.push_back(item.text);
      }
      next();
    }
    next();
    if (of_strings) return AttrValue(std::move(strings));
    if (any_float) {
      std::vector<float> floats;
      for (const std::string& n : numbers) floats.push_back(*text_ir::parse_f32(n));
      return AttrValue(std::move(floats));
    }
    std::vector<int64_t> ints;
    for (const std::string& n : numbers) ints.push_back(*text_ir::parse_int(n));
    return AttrValue(std::move(ints));
  }

  absl::StatusOr<AttrValue> parse_attr_value() {
    const Token& token = peek();
    if (token.kind == TokenKind::kString) return AttrValue(next().text);
    if (is_punct(token, '[')) return parse_list();
    if (token.kind == TokenKind::kWord) {
      if (std::optional<DType> dtype = parse_dtype(token.text)) {
        next();
        if (!at_punct('[')) return AttrValue(*dtype);
        AMPC_ASSIGN_OR_RETURN(Shape shape, parse_shape());
        AMPC_ASSIGN_OR_RETURN(Tensor tensor, parse_tensor_data(TensorType{*dtype, shape}));
        return AttrValue(std::move(tensor));
      }
      if (text_ir::is_int_literal(token.text)) {
        std::optional<int64_t> value = text_ir::parse_int(token.text);
        if (!value) return expected("an integer in the range of int64");
        next();
        return AttrValue(*value);
      }
      if (std::optional<float> value = text_ir::parse_f32(token.text)) {
        next();
        return AttrValue(*value);
      }
    }
    return expected("an attribute value (number, string, list, dtype or tensor)");
  }

  absl::Status parse_attrs(const OpDef* def, Attributes* attrs) {
    next();  // '<'
    while (!at_punct('>')) {
      if (!attrs->empty()) AMPC_RETURN_IF_ERROR(expect_punct(','));
      const Token name = peek();
      if (name.kind != TokenKind::kWord && name.kind != TokenKind::kString) {
        return expected("an attribute name");
      }
      next();
      AMPC_RETURN_IF_ERROR(expect_punct('='));
      AMPC_ASSIGN_OR_RETURN(AttrValue value, parse_attr_value());
      const AttrSpec* spec = def ? def->find_attr(name.text) : nullptr;
      if (spec != nullptr && !conform_to_kind(spec->kind, &value)) {
        return error_at(name, str_cat("expected attribute '", name.text, "' of ",
                                      def->qualified_name(), " to be ", attr_kind_name(spec->kind),
                                      " but found ", attr_kind_name(attr_kind(value))));
      }
      if (!attrs->emplace(name.text, std::move(value)).second) {
        return error_at(name, str_cat("attribute '", name.text, "' is given twice"));
      }
    }
    next();
    return absl::OkStatus();
  }

  // ---- Graph structure ------------------------------------------------------------------------

  absl::StatusOr<std::unique_ptr<Graph>> parse_one(std::string_view keyword) {
    AMPC_RETURN_IF_ERROR(parse_header(keyword));
    while (!at_word("return")) {
      if (at_word("init")) {
        AMPC_RETURN_IF_ERROR(parse_init());
      } else {
        AMPC_RETURN_IF_ERROR(parse_node());
      }
    }
    AMPC_RETURN_IF_ERROR(parse_return());
    return std::move(graph_);
  }

  absl::Status parse_header(std::string_view keyword) {
    if (!at_word(keyword)) return expected(str_cat("'", keyword, "'"));
    next();
    if (peek().kind != TokenKind::kWord && peek().kind != TokenKind::kString) {
      return expected("a graph name");
    }
    graph_ = std::make_unique<Graph>(next().text);
    AMPC_RETURN_IF_ERROR(expect_punct('('));
    while (!at_punct(')')) {
      if (!graph_->inputs().empty()) AMPC_RETURN_IF_ERROR(expect_punct(','));
      const Token name = peek();
      if (name.kind != TokenKind::kValue) return expected("a graph input '%name: type' or ')'");
      next();
      AMPC_RETURN_IF_ERROR(expect_punct(':'));
      AMPC_ASSIGN_OR_RETURN(TensorType type, parse_type());
      AMPC_RETURN_IF_ERROR(define(name, graph_->add_input(name.text, std::move(type))));
    }
    next();
    if (at_word("opset")) AMPC_RETURN_IF_ERROR(parse_opsets());
    return expect_punct('{');
  }

  // `opset(17, ampc:1)`: a bare version is the standard domain's.
  absl::Status parse_opsets() {
    next();
    AMPC_RETURN_IF_ERROR(expect_punct('('));
    std::unordered_set<std::string> seen;
    do {
      const Token entry = peek();
      std::string domain;
      if ((entry.kind == TokenKind::kWord || entry.kind == TokenKind::kString) &&
          is_punct(peek(1), ':')) {
        domain = entry.text == "ai.onnx" ? "" : entry.text;
        next();
        next();
      }
      std::optional<int64_t> version =
          peek().kind == TokenKind::kWord ? text_ir::parse_int(peek().text) : std::nullopt;
      if (!version || *version < 1) {
        return expected("an opset version (an integer >= 1) or 'domain:version'");
      }
      if (!seen.insert(domain).second) {
        return error_at(entry, str_cat("the opset of domain '", domain, "' is given twice"));
      }
      next();
      graph_->set_opset(domain, *version);
    } while (accept_punct(','));
    return expect_punct(')');
  }

  // `init %name: type = [elements]` or `= elided`.
  absl::Status parse_init() {
    next();
    const Token name = peek();
    if (name.kind != TokenKind::kValue) return expected("an initializer name '%name'");
    next();
    AMPC_RETURN_IF_ERROR(expect_punct(':'));
    AMPC_ASSIGN_OR_RETURN(TensorType type, parse_type());
    AMPC_RETURN_IF_ERROR(expect_punct('='));
    AMPC_ASSIGN_OR_RETURN(Tensor data, parse_tensor_data(type));
    return define(name, graph_->add_initializer(name.text, std::move(data)));
  }

  absl::Status parse_return() {
    next();
    if (peek().kind == TokenKind::kValue) {
      do {
        AMPC_ASSIGN_OR_RETURN(Value * output, parse_use("a graph output", false));
        graph_->add_output(output);
      } while (accept_punct(','));
    }
    while (at_word("update")) AMPC_RETURN_IF_ERROR(parse_state_update());
    return expect_punct('}');
  }

  // `update %state = %output`: after each run, graph output %output replaces initializer %state.
  absl::Status parse_state_update() {
    next();
    const Token state = peek();
    if (state.kind != TokenKind::kValue) return expected("a state initializer '%name'");
    AMPC_ASSIGN_OR_RETURN(Value * value, parse_use("a state initializer", false));
    if (value->kind() != Value::Kind::kInitializer) {
      return error_at(state, str_cat("'%", state.text, "' is not an initializer"));
    }
    AMPC_RETURN_IF_ERROR(expect_punct('='));
    const Token update = peek();
    AMPC_ASSIGN_OR_RETURN(Value * output, parse_use("a graph output", false));
    if (!output->is_graph_output()) {
      return error_at(update, str_cat("'%", update.text, "' is not a graph output"));
    }
    graph_->add_state_update(value->name(), output->name());
    return absl::OkStatus();
  }

  absl::Status parse_node();
  absl::StatusOr<std::pair<std::string, std::string>> parse_op_name();
  absl::Status parse_node_info(std::string* name, std::string* doc);
  absl::StatusOr<std::vector<std::optional<TensorType>>> parse_output_types(
      const std::vector<std::optional<Token>>& outputs);

  std::vector<Token> tokens_;
  size_t pos_ = 0;
  std::unique_ptr<Graph> graph_;
  std::unordered_map<std::string, Definition> values_;
};

// ---- Nodes --------------------------------------------------------------------------------------

// `Op`, `domain.Op` (split at the last '.'), `"Op"` or `"domain"."Op"`.
absl::StatusOr<std::pair<std::string, std::string>> Parser::parse_op_name() {
  const Token& token = peek();
  std::string domain, op;
  if (token.kind == TokenKind::kWord) {
    const size_t dot = token.text.rfind('.');
    if (dot != std::string::npos) domain = token.text.substr(0, dot);
    op = dot == std::string::npos ? token.text : token.text.substr(dot + 1);
    if (op.empty()) return expected("an op name");
    next();
  } else if (token.kind == TokenKind::kString) {
    op = next().text;
    if (is_word(peek(), ".") && peek(1).kind == TokenKind::kString) {
      next();
      domain = std::move(op);
      op = next().text;
    }
  } else {
    return expected("a node ('%out = Op(%in) : type'), 'init' or 'return'");
  }
  if (domain == "ai.onnx") domain.clear();
  return std::pair(std::move(domain), std::move(op));
}

// `{name="...", doc="..."}`
absl::Status Parser::parse_node_info(std::string* name, std::string* doc) {
  next();  // '{'
  std::unordered_set<std::string> seen;
  while (!at_punct('}')) {
    if (!seen.empty()) AMPC_RETURN_IF_ERROR(expect_punct(','));
    const Token key = peek();
    if (!is_word(key, "name") && !is_word(key, "doc")) return expected("'name' or 'doc'");
    if (!seen.insert(key.text).second) {
      return error_at(key, str_cat("'", key.text, "' is given twice"));
    }
    next();
    AMPC_RETURN_IF_ERROR(expect_punct('='));
    if (peek().kind != TokenKind::kString) return expected("a string");
    *(key.text == "name" ? name : doc) = next().text;
  }
  next();
  return absl::OkStatus();
}

// `: t0, t1, ...`, one per output; an omitted output's type is `_`.
absl::StatusOr<std::vector<std::optional<TensorType>>> Parser::parse_output_types(
    const std::vector<std::optional<Token>>& outputs) {
  AMPC_RETURN_IF_ERROR(expect_punct(':'));
  const Token first = peek();
  std::vector<std::optional<TensorType>> types;
  do {
    const Token& token = peek();
    const size_t i = types.size();
    const bool omitted = is_word(token, "_");
    if (i < outputs.size() && omitted != !outputs[i]) {
      return omitted ? expected(str_cat("the type of ", describe(*outputs[i])))
                     : expected(str_cat("'_' (output ", i, " is omitted)"));
    }
    if (omitted) {
      next();
      types.push_back(std::nullopt);
    } else {
      AMPC_ASSIGN_OR_RETURN(TensorType type, parse_type());
      types.push_back(std::move(type));
    }
  } while (accept_punct(','));
  if (types.size() != outputs.size()) {
    return error_at(first, str_cat("expected ", outputs.size(),
                                   " output types (one per output) "
                                   "but found ",
                                   types.size()));
  }
  return types;
}

// OUTS = [DOMAIN.]OP[<ATTRS>](OPERANDS) [{name=..., doc=...}] : TYPES [# PRECISION]
absl::Status Parser::parse_node() {
  std::vector<std::optional<Token>> outputs;
  if (peek().kind == TokenKind::kValue || at_word("_")) {
    do {
      if (at_word("_")) {
        outputs.push_back(std::nullopt);
      } else if (peek().kind == TokenKind::kValue) {
        outputs.push_back(peek());
      } else {
        return expected("an output value or '_'");
      }
      next();
    } while (accept_punct(','));
    AMPC_RETURN_IF_ERROR(expect_punct('='));
  }
  const Token op_token = peek();
  AMPC_ASSIGN_OR_RETURN(auto op, parse_op_name());
  const auto& [domain, op_type] = op;
  const OpDef* def = OpRegistry::global().find(domain, op_type, graph_->opset(domain));
  Attributes attrs;
  if (at_punct('<')) AMPC_RETURN_IF_ERROR(parse_attrs(def, &attrs));
  for (const AttrSpec& spec : def ? def->attrs : std::vector<AttrSpec>()) {
    if (spec.required && !attrs.contains(spec.name)) {
      return error_at(op_token, str_cat("expected attribute '", spec.name, "', which ",
                                        def->qualified_name(), " requires, but found none"));
    }
  }
  AMPC_RETURN_IF_ERROR(expect_punct('('));
  std::vector<Value*> operands;
  while (!at_punct(')')) {
    if (!operands.empty()) AMPC_RETURN_IF_ERROR(expect_punct(','));
    AMPC_ASSIGN_OR_RETURN(Value * operand, parse_use("an operand value, '_' or ')'", true));
    operands.push_back(operand);
  }
  next();
  std::string name, doc;
  if (at_punct('{')) AMPC_RETURN_IF_ERROR(parse_node_info(&name, &doc));
  std::vector<std::optional<TensorType>> types;
  if (!outputs.empty()) {
    AMPC_ASSIGN_OR_RETURN(types, parse_output_types(outputs));
  }
  Node* node = graph_->create_node(domain, op_type, operands, types, std::move(attrs));
  node->set_name(std::move(name));
  node->set_doc_string(std::move(doc));
  for (size_t i = 0; i < outputs.size(); ++i) {
    if (outputs[i]) AMPC_RETURN_IF_ERROR(define(*outputs[i], node->output(static_cast<int>(i))));
  }
  if (tokens_[pos_].kind == TokenKind::kComment) {
    AMPC_RETURN_IF_ERROR(text_ir::parse_precision(tokens_[pos_], &node->mutable_precision()));
    ++pos_;
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<Graph>> parse_graph(std::string_view text) {
  AMPC_ASSIGN_OR_RETURN(std::vector<Token> tokens, text_ir::tokenize(text));
  return Parser(std::move(tokens)).parse();
}

}  // namespace ampc
