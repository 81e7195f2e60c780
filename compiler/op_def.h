// OpDef: everything ampc knows about one op, registered once per op in ops/<family>.cc.
//
// An OpDef carries the schema (operands, attributes with defaults), shape and dtype inference,
// an optional constant folder (for shape arithmetic), the autocast spec, the gradient rule slot
// and the samples the generic op tests run. Import, export and the text IR are generic over it.
#pragma once

#include <climits>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ampc/dtype.h"
#include "ampc/status.h"
#include "ampc/tensor.h"
#include "compiler/attribute.h"
#include "compiler/ir.h"

namespace ampc {

class InferenceContext;
class GradBuilder;

inline constexpr int kLatestOpset = INT_MAX;

struct OperandSpec {
  enum class Arity { kSingle, kOptional, kVariadic };
  std::string name;
  Arity arity = Arity::kSingle;
  // Element types accepted; empty accepts any.
  std::vector<DType> dtypes;
};

struct AttrSpec {
  std::string name;
  AttrKind kind = AttrKind::kInt;
  // The value used when a node omits the attribute; none means the attribute is optional with no
  // default (the op's inference decides) unless `required`.
  std::optional<AttrValue> default_value;
  bool required = false;
  // For an int attribute, the values ONNX defines ({0, 1} for a flag such as transB); a node
  // with another value is an error naming the node and the attribute.
  std::optional<std::pair<int64_t, int64_t>> int_range;
  // An attribute ampc adds to an ONNX op (Gather's padding_idx): ONNX files carry it in the
  // node's metadata_props as `ampc.<name>` (compiler/onnx_metadata.h), never in the attribute
  // list, which ONNX's checker holds to the op's definition.
  bool extension = false;
};

// An attribute that later opsets pass as an input (ReduceSum's axes from opset 13, Squeeze's
// from 13, ReduceMean's from 18, Split's `split` from 13, ...). The IR accepts both forms;
// canonicalize moves a constant input into the attribute and export writes the form the
// target opset expects.
struct AttrAsInput {
  std::string attr;
  int input = 0;
  int since_opset = 0;
};

enum class AutocastCategory { kNone, kAllow, kClear, kFollow, kDeny };
std::string_view autocast_category_name(AutocastCategory category);

struct AutocastSpec {
  AutocastCategory category = AutocastCategory::kNone;
  DType accumulate = DType::kF32;
  // Operands that stay fp32 whatever the node's precision (e.g. BatchNormalization statistics).
  std::vector<int> fp32_operands;
};

// Inputs for the generic op tests: a small case whose output types are given, so that the
// inference (and later the kernels and gradient rules) can be checked against them.
struct OpSample {
  std::string name;
  std::vector<TensorType> inputs;
  // Constant inputs, by operand index (e.g. Reshape's shape); others are graph inputs.
  std::vector<std::pair<int, Tensor>> constant_inputs;
  Attributes attrs;
  std::vector<TensorType> outputs;
};

// The values of a foldable node's inputs (all constant) and its inferred output types.
struct FoldContext {
  const Node& node;
  std::vector<const TensorType*> input_types;  // null for omitted optional inputs
  std::vector<const Tensor*> inputs;  // null for omitted inputs (and all, if fold_needs_values)
  std::vector<std::optional<TensorType>> output_types;
};

using InferFn = std::function<absl::Status(InferenceContext&)>;
using FoldFn = std::function<absl::StatusOr<std::vector<Tensor>>(const FoldContext&)>;
using GradFn = std::function<absl::StatusOr<std::vector<Value*>>(GradBuilder&)>;
using IdentityFn = std::function<bool(const Node&)>;

struct OpDef {
  std::string domain;  // "" for the standard ONNX domain
  std::string name;
  // The opsets whose definition of this op these semantics implement.
  int since_opset = 1;
  int until_opset = kLatestOpset;
  std::string summary;

  std::vector<OperandSpec> inputs;
  std::vector<OperandSpec> outputs;
  std::vector<AttrSpec> attrs;
  std::vector<AttrAsInput> attrs_as_inputs;

  InferFn infer;
  FoldFn fold;  // optional: only ops that take part in shape arithmetic
  // False for ops whose fold reads only input types (Shape): they fold whatever the data.
  bool fold_needs_values = true;
  AutocastSpec autocast;
  // The gradient rule (compiler/grad_builder.h); null for ops nothing differentiates through.
  GradFn gradient;
  // Float inputs that never get a gradient: statistics, clip bounds, loss weights. (Integer and
  // bool inputs never do anyway.) Autodiff does not look for trainable values behind them.
  std::vector<int> no_gradient_inputs;
  // Float inputs that are hyperparameters when they are initializers (Clip's bounds): an
  // initializer read only through such inputs is not trained unless the file declares it a
  // parameter or --trainable names it. A value computed from trained ones gets its gradient.
  std::vector<int> hyperparameter_inputs;
  // Outputs no gradient flows back from (running statistics, saved mean and variance): a loss
  // that reads them does not make the inputs trainable through them.
  std::vector<int> no_gradient_outputs;
  // Optional: whether `node` is the identity from its input 0 to its output 0 whatever its data
  // (Dropout with a constant ratio of 0, or not in training). canonicalize removes such a node
  // when nothing reads its other outputs; gradient rules ask it too.
  IdentityFn identity;
  std::vector<OpSample> samples;

  const AttrSpec* find_attr(std::string_view attr_name) const;
  int min_inputs() const;
  int max_inputs() const;  // INT_MAX when the last input is variadic
  int min_outputs() const;
  int max_outputs() const;
  // "MatMul" or "ampc.ReluGrad".
  std::string qualified_name() const;
};

class OpRegistry {
 public:
  // The process-wide registry that ops/*.cc fill at static initialization.
  static OpRegistry& global();

  void add(OpDef def);
  // The definition of `domain`.`name` valid at `opset`, or null.
  const OpDef* find(std::string_view domain, std::string_view name, int64_t opset) const;
  // Every definition of `domain`.`name`, oldest first (for "supported from opset N" messages).
  std::vector<const OpDef*> find_all(std::string_view domain, std::string_view name) const;
  // Sorted by domain, name and opset.
  std::vector<const OpDef*> all() const;
  // "Abs, Add, ..." — the names of the ops of `domain`, for messages.
  std::string supported_names(std::string_view domain) const;

 private:
  std::vector<std::unique_ptr<OpDef>> defs_;
};

// Registers a family of ops at static initialization:
// `static OpRegistration kConvOps(&register_conv_ops);` (the object named after the function, so
// that sources compiled together in a unity build do not clash).
struct OpRegistration {
  explicit OpRegistration(void (*register_ops)(OpRegistry&)) { register_ops(OpRegistry::global()); }
};

// What an inference function sees of a node: input types, constant input values (initializers
// or values already known from folding), attributes with defaults, and where to put the output
// types. Errors are returned as a Status; the caller adds the node's name.
class InferenceContext {
 public:
  InferenceContext(const Node& node, std::vector<const TensorType*> input_types,
                   std::vector<const Tensor*> input_values);
  // Values found only when the inference asks for them (the TypePropagator folds a constant
  // on demand): `value_of(i)` is input i's value, or null.
  using ValueSource = std::function<const Tensor*(int input)>;
  InferenceContext(const Node& node, std::vector<const TensorType*> input_types,
                   ValueSource value_of);

  const Node& node() const { return node_; }
  int64_t opset() const;
  int num_inputs() const { return static_cast<int>(input_types_.size()); }
  bool has_input(int i) const { return i < num_inputs() && input_types_[i] != nullptr; }
  const TensorType& input_type(int i) const;
  // The input's value when known at compile time, else null.
  const Tensor* input_value(int i) const;

  // Attribute access with OpDef defaults (see Node::int_attr).
  bool has_attr(std::string_view name) const;
  int64_t int_attr(std::string_view name) const { return node_.int_attr(name); }
  float float_attr(std::string_view name) const { return node_.float_attr(name); }
  const std::string& string_attr(std::string_view name) const { return node_.string_attr(name); }
  const std::vector<int64_t>& ints_attr(std::string_view name) const {
    return node_.ints_attr(name);
  }
  DType dtype_attr(std::string_view name) const { return node_.dtype_attr(name); }

  // The integer list given either as attribute `attr` or as constant input `input` (the two
  // forms of AttrAsInput). nullopt when neither is present; an error when the input is present
  // but its value is not known at compile time.
  absl::StatusOr<std::optional<std::vector<int64_t>>> ints_attr_or_input(std::string_view attr,
                                                                         int input) const;

  int num_outputs() const { return static_cast<int>(output_types_.size()); }
  bool has_output(int i) const;
  void set_output(int i, TensorType type);
  const std::vector<std::optional<TensorType>>& output_types() const { return output_types_; }

 private:
  const Node& node_;
  std::vector<const TensorType*> input_types_;
  std::vector<const Tensor*> input_values_;
  ValueSource value_of_;  // when set, asked instead of input_values_
  std::vector<std::optional<TensorType>> output_types_;
};

}  // namespace ampc
