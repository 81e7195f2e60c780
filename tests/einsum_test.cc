// Einsum, which import expands into Transpose, Reshape, Slice, ReduceSum, Mul and MatMul
// (compiler/onnx_einsum.cc): outputs against a brute-force f64 einsum written here, gradients
// against central differences in f64, the ops a few common equations become, and errors that
// name the node. ONNX's own test_einsum_* cases run in the conformance suites.
//
// Tolerance: an output element is a sum of K products of n operands (K the product of the sizes
// of the letters summed out). Summed in f32 in any order, with one rounding per product and per
// intermediate result, it is within (K + n) * eps_f32 * sum|products| of the exact value: the
// bound the f32 outputs are held to (sum|products| is the reference run on |inputs|). An f16
// output adds half an f16 ulp of the result, its one rounding on store.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <map>
#include <random>

#include "compiler/onnx_io.h"
#include "compiler/strings.h"
#include "gtest/gtest.h"
#include "onnx/onnx_pb.h"
#include "runtime/interpreter.h"
#include "tests/gradient_check.h"
#include "tests/onnx_model_builder.h"

namespace ampc {
namespace {

// ---- The reference: numpy.einsum by brute force, in f64 ------------------------------------

struct Reference {
  Shape shape;
  std::vector<double> values;      // einsum of the inputs
  std::vector<double> magnitudes;  // einsum of their absolute values: sum|products|
  int64_t terms = 1;               // products summed into each output element
};

std::vector<std::string> split(const std::string& text, char separator) {
  std::vector<std::string> parts(1);
  for (char c : text) {
    if (c == separator) {
      parts.emplace_back();
    } else {
      parts.back() += c;
    }
  }
  return parts;
}

// Each '...' becomes digits, '0' + d for dim d of the widest '...', right-aligned.
std::string expand_ellipsis(const std::string& term, size_t rank, size_t widest) {
  const size_t at = term.find("...");
  if (at == std::string::npos) return term;
  const size_t dims = rank - (term.size() - 3);
  std::string digits;
  for (size_t d = widest - dims; d < widest; ++d) digits += static_cast<char>('0' + d);
  return term.substr(0, at) + digits + term.substr(at + 3);
}

Reference naive_einsum(std::string equation, const std::vector<Tensor>& inputs) {
  std::erase(equation, ' ');
  const size_t arrow = equation.find("->");
  std::vector<std::string> terms = split(equation.substr(0, arrow), ',');
  size_t widest = 0;
  for (size_t i = 0; i < terms.size(); ++i) {
    if (terms[i].find("...") == std::string::npos) continue;
    widest = std::max(widest, inputs[i].shape().size() - (terms[i].size() - 3));
  }
  for (size_t i = 0; i < terms.size(); ++i) {
    terms[i] = expand_ellipsis(terms[i], inputs[i].shape().size(), widest);
  }
  std::string all_digits;
  for (size_t d = 0; d < widest; ++d) all_digits += static_cast<char>('0' + d);
  std::string output;
  if (arrow != std::string::npos) {
    output = equation.substr(arrow + 2);
    if (const size_t at = output.find("..."); at != std::string::npos) {
      output = output.substr(0, at) + all_digits + output.substr(at + 3);
    }
  } else {
    output = all_digits;
    std::string letters;
    for (const std::string& term : terms) letters += term;
    std::sort(letters.begin(), letters.end());
    for (char c : letters) {
      if (std::isalpha(c) && std::count(letters.begin(), letters.end(), c) == 1) output += c;
    }
  }
  // Sizes, a dim of 1 broadcasting; the output's labels first, then those summed.
  std::map<char, int64_t> sizes;
  for (size_t i = 0; i < terms.size(); ++i) {
    for (size_t d = 0; d < terms[i].size(); ++d) {
      int64_t& size = sizes.try_emplace(terms[i][d], 1).first->second;
      size = std::max(size, inputs[i].shape()[d]);
    }
  }
  std::string labels = output;
  Reference ref;
  for (const auto& [label, size] : sizes) {
    if (output.find(label) != std::string::npos) continue;
    labels += label;
    ref.terms *= size;
  }
  for (char label : output) ref.shape.push_back(sizes.at(label));
  const int64_t count = TensorType{DType::kF64, ref.shape}.num_elements();
  ref.values.assign(count, 0.0);
  ref.magnitudes.assign(count, 0.0);
  std::map<char, int64_t> index;
  for (char label : labels) index[label] = 0;
  while (true) {
    double product = 1;
    double magnitude = 1;
    for (size_t i = 0; i < terms.size(); ++i) {
      const Shape& shape = inputs[i].shape();
      int64_t flat = 0;
      for (size_t d = 0; d < terms[i].size(); ++d) {
        flat = flat * shape[d] + (shape[d] == 1 ? 0 : index[terms[i][d]]);
      }
      const double v = inputs[i].element_as_double(flat);
      product *= v;
      magnitude *= std::abs(v);
    }
    int64_t out = 0;
    for (char label : output) out = out * sizes.at(label) + index[label];
    ref.values[out] += product;
    ref.magnitudes[out] += magnitude;
    // The next combination, the last label fastest.
    int k = static_cast<int>(labels.size()) - 1;
    for (; k >= 0; --k) {
      if (++index[labels[k]] < sizes.at(labels[k])) break;
      index[labels[k]] = 0;
    }
    if (k < 0) break;
  }
  return ref;
}

// ---- Models --------------------------------------------------------------------------------

std::vector<std::string> dims(const Shape& shape) {
  std::vector<std::string> out;
  for (int64_t d : shape) out.push_back(std::to_string(d));
  return out;
}

// y = Einsum(x0, x1, ...) over inputs of `shapes`.
testing::ModelBuilder einsum_model(const std::string& equation, const std::vector<Shape>& shapes,
                                   int elem_type, int64_t opset = 12) {
  testing::ModelBuilder m(opset);
  std::vector<std::string> names;
  for (size_t i = 0; i < shapes.size(); ++i) {
    names.push_back(str_cat("x", i));
    m.input(names.back(), elem_type, dims(shapes[i]));
  }
  testing::add_string_attr(m.node("Einsum", names, {"y"}, "einsum"), "equation", equation);
  return m;
}

absl::StatusOr<std::unique_ptr<Graph>> import_einsum(const std::string& equation,
                                                     const std::vector<Shape>& shapes,
                                                     int elem_type, int64_t opset = 12) {
  testing::ModelBuilder m = einsum_model(equation, shapes, elem_type, opset);
  m.output("y");
  return import_onnx_bytes(m.bytes(), "einsum.onnx");
}

struct Case {
  std::string name;
  std::string equation;
  std::vector<Shape> shapes;
};

std::ostream& operator<<(std::ostream& os, const Case& c) { return os << c.equation; }

const Case kCases[] = {
    {"MatMul", "ij,jk->ik", {{3, 4}, {4, 5}}},
    {"AttentionScores", "bhqd,bhkd->bhqk", {{2, 3, 4, 5}, {2, 3, 6, 5}}},
    {"SharedWeights", "bld,hd->blh", {{2, 3, 4}, {5, 4}}},
    {"BatchedMatMul", "bij,bjk->bik", {{3, 2, 4}, {3, 4, 5}}},
    {"TransposedOperands", "ki,kj->ij", {{4, 3}, {4, 5}}},
    {"OuterProduct", "i,j->ij", {{3}, {4}}},
    {"ThreeWayOuterProduct", "i,j,k->kji", {{2}, {3}, {4}}},
    {"InnerProduct", "i,i->", {{7}, {7}}},
    {"Elementwise", "ij,ij->ij", {{3, 4}, {3, 4}}},
    {"RowDots", "ij,ij->i", {{3, 4}, {3, 4}}},
    {"TransposeOnly", "ij->ji", {{3, 4}}},
    {"Permute3d", "abc->cab", {{2, 3, 4}}},
    {"Unchanged", "ij->ij", {{3, 4}}},
    {"SumAll", "ij->", {{3, 4}}},
    {"SumRows", "ij->j", {{3, 4}}},
    {"ImplicitMatMul", "ij,jk", {{3, 4}, {4, 5}}},
    {"ImplicitTranspose", "ba", {{3, 4}}},
    {"ImplicitUpperCaseFirst", "ab,aB", {{3, 4}, {3, 2}}},
    {"UpperCaseLetters", "Ab,bC->AC", {{3, 4}, {4, 5}}},
    {"Spaces", " ij , jk -> ik ", {{3, 4}, {4, 5}}},
    {"EllipsisBroadcast", "...ij,...jk->...ik", {{2, 1, 3, 4}, {5, 4, 2}}},
    {"EllipsisOfNoDims", "...ij,...jk->...ik", {{3, 4}, {4, 2}}},
    {"EllipsisInTheMiddle", "i...j,j->...i", {{2, 3, 4, 5}, {5}}},
    {"ImplicitEllipsis", "...i,i", {{2, 3, 4}, {4}}},
    {"EllipsisAgainstScalar", "...,...->...", {{}, {2, 3}}},
    {"Scalars", ",->", {{}, {}}},
    {"ThreeOperandChain", "ij,jk,kl->il", {{2, 3}, {3, 4}, {4, 5}}},
    {"ThreeOperandsSharingALetter", "bi,bj,bk->bijk", {{2, 3}, {2, 4}, {2, 2}}},
    {"SummedOutOfOneOperand", "ijk,jl->il", {{2, 3, 4}, {3, 5}}},
    {"SummedOutOfEach", "ab,cd->", {{2, 3}, {4, 5}}},
    {"FullContraction", "ijk,kji->", {{2, 3, 4}, {4, 3, 2}}},
    {"Diagonal", "ii->i", {{4, 4}}},
    {"Trace", "ii->", {{4, 4}}},
    {"ImplicitTrace", "ii", {{4, 4}}},
    {"BatchDiagonal", "...ii->...i", {{2, 3, 4, 4}}},
    {"TripleDiagonal", "iii->i", {{3, 3, 3}}},
    {"TwoDiagonals", "ijij->ij", {{2, 3, 2, 3}}},
    {"DiagonalTimesMatrix", "iij,jk->ik", {{3, 3, 4}, {4, 2}}},
};

class EinsumMatchesReference : public ::testing::TestWithParam<Case> {};

void expect_matches_reference(const Case& c, DType dtype) {
  const int elem_type = dtype == DType::kF16   ? onnx::TensorProto::FLOAT16
                        : dtype == DType::kI64 ? onnx::TensorProto::INT64
                                               : onnx::TensorProto::FLOAT;
  absl::StatusOr<std::unique_ptr<Graph>> graph = import_einsum(c.equation, c.shapes, elem_type);
  ASSERT_TRUE(graph.ok()) << graph.status();
  std::mt19937 rng(7);
  std::vector<Tensor> inputs;
  for (const Shape& shape : c.shapes) {
    Tensor x = testing::random_tensor(TensorType{DType::kF64, shape}, rng, -2, 2);
    std::vector<double> values;
    for (int64_t j = 0; j < x.num_elements(); ++j) {
      values.push_back(dtype == DType::kI64 ? std::round(x.element_as_double(j))
                                            : x.element_as_double(j));
    }
    inputs.push_back(Tensor::from_doubles(dtype, shape, values));
  }
  absl::StatusOr<std::vector<Tensor>> outputs = runtime::interpret_graph(**graph, inputs);
  ASSERT_TRUE(outputs.ok()) << outputs.status();
  const Reference want = naive_einsum(c.equation, inputs);
  const Tensor& got = outputs->at(0);
  ASSERT_EQ(got.type(), (TensorType{dtype, want.shape}));
  const double bound = static_cast<double>(want.terms + c.shapes.size()) * std::ldexp(1.0, -23);
  for (int64_t j = 0; j < got.num_elements(); ++j) {
    double tolerance = bound * want.magnitudes[j];
    if (dtype == DType::kF16) tolerance += std::ldexp(std::abs(want.values[j]), -11);
    if (dtype == DType::kI64) tolerance = 0;
    ASSERT_NEAR(got.element_as_double(j), want.values[j], tolerance) << "element " << j;
  }
}

TEST_P(EinsumMatchesReference, F32) { expect_matches_reference(GetParam(), DType::kF32); }

TEST_P(EinsumMatchesReference, I64Exactly) { expect_matches_reference(GetParam(), DType::kI64); }

INSTANTIATE_TEST_SUITE_P(Equations, EinsumMatchesReference, ::testing::ValuesIn(kCases),
                         [](const auto& info) { return info.param.name; });

TEST(Einsum, F16AttentionScoresRoundOnceFromF32Sums) {
  expect_matches_reference({"", "bhqd,bhkd->bhqk", {{2, 2, 3, 8}, {2, 2, 5, 8}}}, DType::kF16);
}

// ---- What the lowering emits ---------------------------------------------------------------

// The ops of the imported graph but its Constants (shapes and slice bounds).
std::vector<std::string> lowered_ops(const std::string& equation,
                                     const std::vector<Shape>& shapes) {
  absl::StatusOr<std::unique_ptr<Graph>> graph =
      import_einsum(equation, shapes, onnx::TensorProto::FLOAT);
  EXPECT_TRUE(graph.ok()) << graph.status();
  if (!graph.ok()) return {};
  std::vector<std::string> ops;
  for (const auto& node : (*graph)->nodes()) {
    if (node->op_type() != "Constant") ops.push_back(node->op_type());
  }
  EXPECT_EQ((*graph)->outputs().at(0)->name(), "y");
  return ops;
}

using Ops = std::vector<std::string>;

TEST(EinsumLowering, MatMulIsOneMatMul) {
  EXPECT_EQ(lowered_ops("ij,jk->ik", {{3, 4}, {4, 5}}), Ops{"MatMul"});
}

TEST(EinsumLowering, AttentionScoresTransposeOnlyTheKeys) {
  EXPECT_EQ(lowered_ops("bhqd,bhkd->bhqk", {{2, 3, 4, 5}, {2, 3, 6, 5}}),
            (Ops{"Transpose", "MatMul"}));
}

TEST(EinsumLowering, SharedWeightsAreOneTransposeAndMatMul) {
  EXPECT_EQ(lowered_ops("bld,hd->blh", {{2, 3, 4}, {5, 4}}), (Ops{"Transpose", "MatMul"}));
}

TEST(EinsumLowering, OuterProductIsABroadcastingMul) {
  EXPECT_EQ(lowered_ops("i,j->ij", {{3}, {4}}), (Ops{"Reshape", "Mul"}));
}

TEST(EinsumLowering, UnchangedOperandIsAnIdentity) {
  EXPECT_EQ(lowered_ops("ij->ij", {{3, 4}}), Ops{"Identity"});
}

TEST(EinsumLowering, SumIsOneReduceSum) {
  EXPECT_EQ(lowered_ops("ij->", {{3, 4}}), Ops{"ReduceSum"});
}

TEST(EinsumLowering, BatchDiagonalIsAReshapeAndAStridedSlice) {
  EXPECT_EQ(lowered_ops("...ii->...i", {{2, 3, 4, 4}}), (Ops{"Reshape", "Slice"}));
}

TEST(EinsumLowering, OutputNotAskedForEmitsNothing) {
  testing::ModelBuilder m = einsum_model("ij,jk->ik", {{3, 4}, {4, 5}}, onnx::TensorProto::FLOAT);
  m.graph().mutable_node(0)->set_output(0, "");
  m.output("x0");
  absl::StatusOr<std::unique_ptr<Graph>> graph = import_onnx_bytes(m.bytes(), "einsum.onnx");
  ASSERT_TRUE(graph.ok()) << graph.status();
  EXPECT_EQ((*graph)->num_nodes(), 0);
}

// ---- Gradients -----------------------------------------------------------------------------

// loss = sum(Einsum(x0, x1, ...) * W) in f64; every input differentiated.
void expect_gradients_match(const std::string& equation, const std::vector<Shape>& shapes,
                            const Shape& output) {
  testing::ModelBuilder m = einsum_model(equation, shapes, onnx::TensorProto::DOUBLE);
  m.input("W", onnx::TensorProto::DOUBLE, dims(output));
  m.node("Mul", {"y", "W"}, {"weighted"}, "weigh");
  testing::add_int_attr(m.node("ReduceSum", {"weighted"}, {"loss"}, "sum"), "keepdims", 0);
  m.output("loss");
  absl::StatusOr<std::unique_ptr<Graph>> graph = import_onnx_bytes(m.bytes(), "einsum.onnx");
  ASSERT_TRUE(graph.ok()) << graph.status();
  std::mt19937 rng(5);
  std::vector<Tensor> inputs;
  for (const Value* input : (*graph)->inputs()) {
    inputs.push_back(testing::random_tensor(input->type(), rng, -1.5, 1.5));
  }
  absl::StatusOr<testing::GradientCheck> check =
      testing::check_gradients(**graph, inputs, "^x[0-9]$");
  ASSERT_TRUE(check.ok()) << check.status().message();
  EXPECT_EQ(check->inputs_checked, static_cast<int>(shapes.size()));
  EXPECT_LT(check->max_relative_error, 1e-6) << check->worst_input;
}

TEST(EinsumGradients, AttentionScores) {
  expect_gradients_match("bhqd,bhkd->bhqk", {{2, 2, 3, 4}, {2, 2, 5, 4}}, {2, 2, 3, 5});
}

TEST(EinsumGradients, ThreeOperandChain) {
  expect_gradients_match("ij,jk,kl->il", {{2, 3}, {3, 4}, {4, 2}}, {2, 2});
}

TEST(EinsumGradients, OuterProduct) { expect_gradients_match("i,j->ji", {{3}, {4}}, {4, 3}); }

TEST(EinsumGradients, LetterSummedOutOfOneOperand) {
  expect_gradients_match("ijk,jl->il", {{2, 3, 4}, {3, 2}}, {2, 2});
}

TEST(EinsumGradients, EllipsisBroadcast) {
  expect_gradients_match("...ij,...jk->...ik", {{2, 1, 3, 2}, {4, 2, 3}}, {2, 4, 3, 3});
}

TEST(EinsumGradients, BatchDiagonalTimesMatrix) {
  expect_gradients_match("bii,ij->bj", {{2, 3, 3}, {3, 4}}, {2, 4});
}

// ---- Errors --------------------------------------------------------------------------------

// Importing `m` fails with a message that names the node and holds `message`.
void expect_import_error(const testing::ModelBuilder& m, const std::string& message) {
  absl::StatusOr<std::unique_ptr<Graph>> graph = import_onnx_bytes(m.bytes(), "einsum.onnx");
  ASSERT_FALSE(graph.ok()) << message;
  const std::string got(graph.status().message());
  EXPECT_NE(got.find("node 'einsum' (Einsum): "), std::string::npos) << got;
  EXPECT_NE(got.find(message), std::string::npos) << got;
}

struct BadCase {
  std::string equation;
  std::vector<Shape> shapes;
  std::string message;
  int elem_type = onnx::TensorProto::FLOAT;
};

TEST(Einsum, ErrorsNameTheNodeAndTheEquation) {
  const BadCase cases[] = {
      {"ij,jk",
       {{2, 3}, {3, 4}, {4, 5}},
       "equation 'ij,jk' has 2 terms before '->' but the node has 3 inputs"},
      {"i$j",
       {{2, 3}},
       "term 'i$j' has '$'; a term holds letters (a-z, A-Z) and at most one '...'"},
      {"i..j", {{2, 3}}, "term 'i..j' has '.'"},
      {"...i...", {{2, 3}}, "term '...i...' has two '...'"},
      {"ij->i->j", {{2, 3}}, "the output 'i->j' must be one term, and '->' appear once"},
      {"ij,jk->ik,k", {{2, 3}, {3, 4}}, "the output 'ik,k' must be one term"},
      {"ij->k", {{2, 3}}, "the output's letter 'k' is in no input"},
      {"ij->ii", {{2, 3}}, "the output has letter 'i' twice"},
      {"ijk", {{2, 3}}, "input 0 ('x0') is f32[2,3] but its term 'ijk' names 3 dims"},
      {"...ijk",
       {{2, 3}},
       "input 0 ('x0') is f32[2,3] but its term '...ijk' names at least 3 dims"},
      {"ij,jk",
       {{2, 3}, {4, 5}},
       "letter 'j' is 3 at dim 1 of input 0 ('x0') but 4 at dim 0 of input 1 ('x1')"},
      {"ii->i", {{2, 3}}, "letter 'i' is 2 at dim 0 of input 0 ('x0') but 3 at dim 1 of input 0"},
      {"...i,...i",
       {{2, 3}, {4, 3}},
       "the dims '...' stands for do not broadcast: '...' dim 0 is 2 at dim 0 of input 0 ('x0') "
       "but 4 at dim 0 of input 1"},
      {"...i->i", {{2, 3}}, "'...' stands for 1 dims of the inputs but the output has no '...'"},
      {"ij,jk", {{2, 0}, {0, 3}}, "dim 1 of input 0 ('x0') is empty"},
      {"ij->ij",
       {{2, 3}},
       "input 0 ('x0') is i8; ampc's Einsum takes f32, f16, bf16, f64, i64 and i32",
       onnx::TensorProto::INT8},
  };
  for (const BadCase& c : cases) {
    testing::ModelBuilder m = einsum_model(c.equation, c.shapes, c.elem_type);
    m.output("y");
    expect_import_error(m, c.message);
  }
}

TEST(Einsum, MixedInputTypesAreAnError) {
  testing::ModelBuilder m(12);
  m.input("a", onnx::TensorProto::FLOAT, {"2", "3"});
  m.input("b", onnx::TensorProto::DOUBLE, {"3", "4"});
  testing::add_string_attr(m.node("Einsum", {"a", "b"}, {"y"}, "einsum"), "equation", "ij,jk");
  m.output("y");
  expect_import_error(m, "input 1 ('b') is f64 but input 0 is f32; Einsum's inputs share one type");
}

TEST(Einsum, MissingEquationIsAnError) {
  testing::ModelBuilder m(12);
  m.input("a", onnx::TensorProto::FLOAT, {"2"});
  m.node("Einsum", {"a"}, {"y"}, "einsum");
  m.output("y");
  expect_import_error(m, "required attribute 'equation' is missing");
}

TEST(Einsum, BeforeOpset12IsAnError) {
  testing::ModelBuilder m = einsum_model("ij,jk", {{2, 3}, {3, 4}}, onnx::TensorProto::FLOAT, 11);
  m.output("y");
  expect_import_error(m, "ampc implements Einsum from opset 12; the model imports opset 11");
}

}  // namespace
}  // namespace ampc
