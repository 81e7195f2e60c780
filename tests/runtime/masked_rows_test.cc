// Losses over the rows a boolean mask selects (`x[mask]`: NonZero, then GatherND or Gather),
// exported by PyTorch (tests/data/masked/make_models.py): a depth head's scale-invariant log
// loss on the pixels with a depth, a masked-LM head's cross-entropy on the labelled tokens, and
// a regression scored on the examples of positive weight. Compiled and trained for 4 SGD steps
// on two batches that select other numbers of rows than the export's, against PyTorch's f32
// losses within 1e-5 relative (PyTorch's own f32 rounding); and what ampc cannot map onto the
// whole rows is an error naming the node and the mask.
#include <algorithm>
#include <cmath>

#include "compiler/compile.h"
#include "compiler/onnx_io.h"
#include "compiler/strings.h"
#include "gtest/gtest.h"
#include "runtime/npy.h"
#include "runtime/training_session.h"
#include "tests/onnx_model_builder.h"
#include "tests/onnx_op_checks.h"
#include "tests/test_util.h"
#include "tests/training_file.h"

namespace ampc {
namespace {

using onnx::TensorProto;
using runtime::TrainingSession;
using testing::add_int_attr;
using testing::add_ints_attr;
using testing::expect_import_error;
using testing::import_ok;
using testing::ModelBuilder;
using testing::run_graph;

// x[m] for x [3, 4] and a mask m [3] (NonZero, Transpose, GatherND as PyTorch writes it), doubled
// (an op on the rows), then `reads` of the selection `rows`.
ModelBuilder select_rows(int elem_type = TensorProto::FLOAT) {
  ModelBuilder m;
  m.input("x", elem_type, {"3", "4"});
  m.input("m", TensorProto::BOOL, {"3"});
  m.node("NonZero", {"m"}, {"nz"}, "nonzero");
  add_ints_attr(m.node("Transpose", {"nz"}, {"at"}, "coordinates"), "perm", {1, 0});
  m.node("GatherND", {"x", "at"}, {"picked"}, "pick");
  m.node("Add", {"picked", "picked"}, {"rows"}, "double");
  return m;
}

// The mean of the selected rows, their sum over the rows and their largest element, against the
// same computed here from the rows the mask keeps: an empty selection gives ONNX's (and
// PyTorch's) reductions of nothing: NaN, zeros, the lowest float.
TEST(MaskedRows, ReductionsAcrossTheRowsReduceOnlyTheSelectedOnes) {
  ModelBuilder m = select_rows();
  add_int_attr(m.node("ReduceMean", {"rows"}, {"mean"}, "mean"), "keepdims", 0);
  m.initializer_i64("axis0", {1}, {0});
  add_int_attr(m.node("ReduceSum", {"rows", "axis0"}, {"sum"}, "sum"), "keepdims", 0);
  add_int_attr(m.node("ReduceMax", {"rows"}, {"max"}, "max"), "keepdims", 0);
  for (const char* out : {"mean", "sum", "max"}) m.output(out);
  std::unique_ptr<Graph> graph = import_ok(m);
  ASSERT_NE(graph, nullptr);
  const std::vector<float> x = {1, -2, 3, 0.5f, 4, 5, -6, 7, -1, 2, 9, -3};
  for (const std::vector<bool>& keep : std::vector<std::vector<bool>>{
           {true, false, true}, {false, true, false}, {true, true, true}, {false, false, false}}) {
    Tensor mask(TensorType{DType::kBool, {3}});
    double total = 0;
    float largest = -INFINITY;
    std::vector<float> sum(4, 0.0f);
    int selected = 0;
    for (int r = 0; r < 3; ++r) {
      mask.mutable_data<bool>()[r] = keep[static_cast<size_t>(r)];
      if (!keep[static_cast<size_t>(r)]) continue;
      ++selected;
      for (int c = 0; c < 4; ++c) {
        const float v = 2 * x[static_cast<size_t>(r * 4 + c)];
        total += v;
        sum[static_cast<size_t>(c)] += v;
        largest = std::max(largest, v);
      }
    }
    const std::vector<Tensor> out = run_graph(*graph, {Tensor::from_f32({3, 4}, x), mask});
    ASSERT_EQ(out.size(), 3u);
    if (selected == 0) {
      EXPECT_TRUE(std::isnan(out[0].element_as_double(0)));
    } else {
      // The sum of at most 12 small integers and halves is exact in f32; one division rounds.
      EXPECT_EQ(out[0].element_as_double(0), static_cast<float>(total / (selected * 4)));
    }
    for (int c = 0; c < 4; ++c) EXPECT_EQ(out[1].element_as_double(c), sum[static_cast<size_t>(c)]);
    EXPECT_EQ(out[2].element_as_double(0), largest);
  }
}

// The gradient of sum(log((2 * x[t > 0])^2)) against central differences in f64 (t drawn with x,
// its mask computed at run time): the rows left out, zeroed, make log 0 = -inf forward and 0 * inf
// = NaN backward, which never reaches x (PyTorch never computes them).
TEST(MaskedRows, GradientsReachTheSelectedRowsOnly) {
  ModelBuilder m = select_rows(TensorProto::DOUBLE);
  m.graph().mutable_input()->RemoveLast();  // the mask: computed from t
  m.input("t", TensorProto::DOUBLE, {"3"});
  m.initializer("zero", TensorProto::DOUBLE, {}).add_double_data(0);
  m.node("Greater", {"t", "zero"}, {"m"}, "positive");
  // Greater must come before NonZero: move it to the front.
  auto* nodes = m.graph().mutable_node();
  std::rotate(nodes->rbegin(), nodes->rbegin() + 1, nodes->rend());
  m.node("Mul", {"rows", "rows"}, {"squares"}, "square");
  m.node("Log", {"squares"}, {"logs"}, "log");
  add_int_attr(m.node("ReduceSum", {"logs"}, {"loss"}, "sum"), "keepdims", 0);
  m.output("loss");
  testing::expect_onnx_gradients_match(m, "^x$", 7);
}

// NonZero of a mask known at compile time is its indices, a constant: what PyTorch's TorchScript
// exporter writes for arange before opset 11 (NonZero of ConstantOfShape's ones, as in
// nn.EmbeddingBag's offsets), and for a constant mask.
TEST(MaskedRows, NonZeroOfAKnownMaskIsAConstant) {
  ModelBuilder m;
  m.initializer_i64("shape", {2}, {2, 3});
  m.initializer_i64("axis0", {1}, {0});
  onnx::NodeProto& ones = m.node("ConstantOfShape", {"shape"}, {"mask"}, "ones");
  onnx::AttributeProto* value = ones.add_attribute();
  value->set_name("value");
  value->set_type(onnx::AttributeProto::TENSOR);
  value->mutable_t()->set_data_type(TensorProto::INT64);
  value->mutable_t()->add_dims(1);
  value->mutable_t()->add_int64_data(1);
  m.initializer_i64("holes", {2, 3}, {1, 0, 1, 1, 1, 0});
  m.node("Mul", {"mask", "holes"}, {"some"}, "some");
  m.node("NonZero", {"some"}, {"at"}, "nonzero");
  m.output("at");
  std::unique_ptr<Graph> graph = import_ok(m);
  ASSERT_NE(graph, nullptr);
  EXPECT_EQ(testing::count_ops(*graph, "NonZero"), 0);
  const std::vector<Tensor> out = run_graph(*graph, {});
  ASSERT_EQ(out.size(), 1u);
  // Row-major order: (0,0), (0,2), (1,0), (1,1); rows of coordinates, one per axis.
  EXPECT_EQ(out[0], Tensor::from_i64({2, 4}, {0, 0, 1, 1, 0, 2, 0, 1}));
}

// What does not treat the rows independently, or reads how many there are, is an error that
// names the node and the mask.
TEST(MaskedRows, WhatCannotRunOnTheWholeRowsIsAnErrorNamingTheNodeAndTheMask) {
  ModelBuilder across = select_rows();
  add_int_attr(across.node("Softmax", {"rows"}, {"p"}, "softmax_over_rows"), "axis", 0);
  across.output("p");
  expect_import_error(across, "node 'softmax_over_rows' (Softmax) reads rows of 'x'['m']");
  expect_import_error(across, "it works across the rows (axis 0)");

  ModelBuilder count = select_rows();
  count.node("Shape", {"rows"}, {"n"}, "how_many");
  count.output("n");
  expect_import_error(count, "node 'how_many' (Shape)");

  ModelBuilder returned = select_rows();
  returned.output("rows");
  expect_import_error(returned, "rows of 'x'['m'] (x[mask]: their count depends on the data)");

  ModelBuilder twice = select_rows();  // rows picked from picked rows
  twice.node("GatherND", {"rows", "at"}, {"again"}, "pick_again");
  twice.output("again");
  expect_import_error(twice, "node 'pick_again' (GatherND) reads rows of 'x'['m']");

  ModelBuilder indices = select_rows();
  indices.node("Cast", {"at"}, {"f"}, "cast_indices");
  add_int_attr(indices.node("ReduceSum", {"f"}, {"s"}, "sum_indices"), "keepdims", 0);
  indices.output("s");
  expect_import_error(indices, "the indices of the true elements of mask 'm'");
}

class MaskedRows : public ::testing::TestWithParam<std::string> {};

TEST_P(MaskedRows, TrainOnBatchesSelectingOtherRowCountsAsPyTorchDoes) {
  const std::string& model = GetParam();
  absl::StatusOr<std::map<std::string, Tensor>> refs =
      runtime::read_npz(testing::source_path("tests/data/masked/masked_refs.npz"));
  ASSERT_TRUE(refs.ok()) << refs.status();
  const std::vector<std::map<std::string, Tensor>> batches = testing::fixture_batches(*refs, model);
  ASSERT_EQ(batches.size(), 2u);
  ASSERT_EQ(batches[0].size(), 2u);
  const std::string file = testing::source_path(str_cat("tests/data/masked/", model, ".onnx"));
  Diagnostics diagnostics;
  absl::StatusOr<std::unique_ptr<Graph>> graph =
      compile_file(file, testing::sgd_options(0.1f), diagnostics);
  ASSERT_TRUE(graph.ok()) << graph.status();
  absl::StatusOr<std::unique_ptr<TrainingSession>> session =
      testing::session_from_file_bytes(**graph, file);
  ASSERT_TRUE(session.ok()) << session.status();
  testing::expect_losses_track(**session, batches, refs->at(str_cat(model, ".loss")), 0.1f);
}

INSTANTIATE_TEST_SUITE_P(Exports, MaskedRows,
                         ::testing::Values("depth.torchscript", "depth.dynamo", "mlm.torchscript",
                                           "rows.torchscript", "rows.dynamo"),
                         [](const auto& info) {
                           std::string name = info.param;
                           name[name.find('.')] = '_';
                           return name;
                         });

}  // namespace
}  // namespace ampc
