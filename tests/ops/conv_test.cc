// Conv, MaxPool, AveragePool and GlobalAveragePool: output sizes against the ONNX operator docs'
// formulas (computed by hand below), the ONNX node test models (expected shapes copied from
// their graph outputs), and the errors.
#include "compiler/op_def.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/ops/op_test_helpers.h"

namespace ampc::op_testing {
namespace {

using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using Ints = std::vector<int64_t>;

OpCase conv(TensorType x, TensorType w, Attributes attrs = {}) {
  return {"Conv", {std::move(x), std::move(w)}, {}, std::move(attrs), 11};
}
OpCase max_pool(TensorType x, Attributes attrs, int num_outputs = 1) {
  return {"MaxPool", {std::move(x)}, {}, std::move(attrs), 12, num_outputs};
}
OpCase average_pool(TensorType x, Attributes attrs, int64_t opset = 11) {
  return {"AveragePool", {std::move(x)}, {}, std::move(attrs), opset};
}

// ---- Conv ------------------------------------------------------------------------------------

TEST(Conv, ExplicitPadsAndStrides) {
  // test_basic_conv_with_padding / _without_padding: (5 + 2 - 3) / 1 + 1 = 5; (5 - 3) + 1 = 3.
  EXPECT_THAT(infer_ok(conv(f32({1, 1, 5, 5}), f32({1, 1, 3, 3}),
                            {{"kernel_shape", Ints{3, 3}}, {"pads", Ints{1, 1, 1, 1}}})),
              ElementsAre(f32({1, 1, 5, 5})));
  EXPECT_THAT(infer_ok(conv(f32({1, 1, 5, 5}), f32({1, 1, 3, 3}), {{"pads", Ints{0, 0, 0, 0}}})),
              ElementsAre(f32({1, 1, 3, 3})));
  // test_conv_with_strides_*: H = 7, W = 5, kernel 3, stride 2.
  const Attributes strided = {{"strides", Ints{2, 2}}};
  EXPECT_THAT(infer_ok(conv(f32({1, 1, 7, 5}), f32({1, 1, 3, 3}), strided)),
              ElementsAre(f32({1, 1, 3, 2})));  // (7-3)/2+1, (5-3)/2+1
  Attributes padded = strided;
  padded["pads"] = Ints{1, 1, 1, 1};
  EXPECT_THAT(infer_ok(conv(f32({1, 1, 7, 5}), f32({1, 1, 3, 3}), padded)),
              ElementsAre(f32({1, 1, 4, 3})));  // (9-3)/2+1, (7-3)/2+1
  Attributes asymmetric = strided;
  asymmetric["pads"] = Ints{1, 0, 1, 0};  // H pads 1+1, W pads 0+0
  EXPECT_THAT(infer_ok(conv(f32({1, 1, 7, 5}), f32({1, 1, 3, 3}), asymmetric)),
              ElementsAre(f32({1, 1, 4, 2})));
}

TEST(Conv, AutoPadSameGivesCeilOfInputOverStride) {
  // test_conv_with_autopad_same: SAME_LOWER, 5 / 2 -> 3.
  EXPECT_THAT(infer_ok(conv(f32({1, 1, 5, 5}), f32({1, 1, 3, 3}),
                            {{"auto_pad", std::string("SAME_LOWER")}, {"strides", Ints{2, 2}}})),
              ElementsAre(f32({1, 1, 3, 3})));
  // The kernel and dilation do not change the size: ceil(7 / 3) = 3, ceil(10 / 1) = 10.
  EXPECT_THAT(infer_ok(conv(f32({1, 1, 7, 7}), f32({1, 1, 3, 3}),
                            {{"auto_pad", std::string("SAME_UPPER")}, {"strides", Ints{3, 3}}})),
              ElementsAre(f32({1, 1, 3, 3})));
  EXPECT_THAT(infer_ok(conv(f32({1, 1, 10}), f32({1, 1, 3}),
                            {{"auto_pad", std::string("SAME_LOWER")}, {"dilations", Ints{2}}})),
              ElementsAre(f32({1, 1, 10})));
}

TEST(Conv, ValidDilatedGroupedAndThreeDimensional) {
  // 3-D VALID: (4-2)+1, (5-3)+1, (6-3)+1.
  EXPECT_THAT(infer_ok(conv(f32({1, 1, 4, 5, 6}), f32({2, 1, 2, 3, 3}),
                            {{"auto_pad", std::string("VALID")}})),
              ElementsAre(f32({1, 2, 3, 3, 4})));
  // 1-D, dilation 2 (extent 5), stride 2: (10 - 5) / 2 + 1 = 3.
  EXPECT_THAT(infer_ok(conv(f32({2, 4, 10}), f32({6, 4, 3}),
                            {{"strides", Ints{2}}, {"dilations", Ints{2}}})),
              ElementsAre(f32({2, 6, 3})));
  // Depthwise: 8 groups of one channel each.
  EXPECT_THAT(infer_ok(conv(f16({1, 8, 6, 6}), f16({8, 1, 3, 3}), {{"group", int64_t{8}}})),
              ElementsAre(f16({1, 8, 4, 4})));
}

TEST(Conv, BiasAndEveryOpset) {
  for (int64_t opset : {1, 11, 21}) {
    auto out = infer_op({"Conv", {f32({2, 3, 8, 8}), f32({4, 3, 3, 3}), f32({4})}, {}, {}, opset});
    ASSERT_TRUE(out.ok()) << "opset " << opset << ": " << out.status();
    EXPECT_THAT(*out, ElementsAre(f32({2, 4, 6, 6})));
  }
}

TEST(Conv, ChannelAndGroupMismatchesAreErrors) {
  EXPECT_THAT(error_of(conv(f32({1, 3, 5, 5}), f32({4, 2, 3, 3}))),
              AllOf(HasSubstr("3 channels"), HasSubstr("[4,2,3,3]"), HasSubstr("expects 2")));
  EXPECT_THAT(error_of(conv(f32({1, 4, 5, 5}), f32({3, 2, 3, 3}), {{"group", int64_t{2}}})),
              HasSubstr("not a multiple of group 2"));
  EXPECT_THAT(error_of(conv(f32({1, 4, 5, 5}), f32({4, 4, 3, 3}), {{"group", int64_t{0}}})),
              HasSubstr("group must be >= 1"));
  EXPECT_THAT(error_of({"Conv", {f32({1, 3, 5, 5}), f32({4, 3, 3, 3}), f32({3})}, {}, {}, 11}),
              AllOf(HasSubstr("B [3]"), HasSubstr("[4]")));
}

TEST(Conv, ShapeAndAttributeMistakesAreErrors) {
  EXPECT_THAT(error_of(conv(f32({1, 1, 5, 5}), f32({1, 1, 3, 3}), {{"kernel_shape", Ints{2, 2}}})),
              AllOf(HasSubstr("kernel_shape [2,2]"), HasSubstr("[1,1,3,3]")));
  EXPECT_THAT(error_of(conv(f32({1, 1, 5, 5}), f32({1, 1, 3}))),
              HasSubstr("must have the rank of X"));
  EXPECT_THAT(error_of(conv(f32({1, 5}), f32({1, 5}))), HasSubstr("1 to 3 spatial dims"));
  EXPECT_THAT(error_of(conv(f32({1, 1, 2, 2, 2, 2}), f32({1, 1, 1, 1, 1, 1}))),
              HasSubstr("1 to 3 spatial dims"));
  EXPECT_THAT(error_of(conv(f32({1, 1, 5, 5}), f32({1, 1, 3, 3}), {{"strides", Ints{1}}})),
              AllOf(HasSubstr("strides has 1 values"), HasSubstr("expected 2")));
  EXPECT_THAT(error_of(conv(f32({1, 1, 5, 5}), f32({1, 1, 3, 3}), {{"strides", Ints{1, 0}}})),
              HasSubstr("strides [1,0]"));
  EXPECT_THAT(error_of(conv(f32({1, 1, 5, 5}), f32({1, 1, 3, 3}), {{"pads", Ints{0, -1, 0, 0}}})),
              HasSubstr("below 0"));
  EXPECT_THAT(error_of(conv(f32({1, 1, 5, 5}), f32({1, 1, 3, 3}),
                            {{"auto_pad", std::string("SAME_UPPER")}, {"pads", Ints{1, 1, 1, 1}}})),
              HasSubstr("pads cannot be used together with auto_pad=SAME_UPPER"));
  EXPECT_THAT(
      error_of(conv(f32({1, 1, 5, 5}), f32({1, 1, 3, 3}), {{"auto_pad", std::string("SAME")}})),
      HasSubstr("auto_pad 'SAME' is not one of"));
  EXPECT_THAT(error_of({"Conv", {f32({1, 1, 5, 5}), f16({1, 1, 3, 3})}, {}, {}, 11}),
              HasSubstr("same element type"));
}

TEST(Conv, KernelLargerThanThePaddedInputIsAnError) {
  EXPECT_THAT(error_of(conv(f32({1, 1, 2, 2}), f32({1, 1, 3, 3}))),
              AllOf(HasSubstr("kernel extent 3"), HasSubstr("padded input size 2")));
  // Dilation 2 makes a 3-tap kernel span 5 > 4; VALID pads nothing either.
  EXPECT_THAT(error_of(conv(f32({1, 1, 4, 9}), f32({1, 1, 3, 3}), {{"dilations", Ints{2, 2}}})),
              HasSubstr("kernel extent 5"));
  EXPECT_THAT(
      error_of(conv(f32({1, 1, 2, 2}), f32({1, 1, 3, 3}), {{"auto_pad", std::string("VALID")}})),
      HasSubstr("kernel extent 3"));
  // The same kernel fits once padded: (2 + 2 - 3) + 1 = 2.
  EXPECT_THAT(infer_ok(conv(f32({1, 1, 2, 2}), f32({1, 1, 3, 3}), {{"pads", Ints{1, 1, 1, 1}}})),
              ElementsAre(f32({1, 1, 2, 2})));
}

// ---- MaxPool ---------------------------------------------------------------------------------

TEST(MaxPool, FloorModeSizes) {
  // test_maxpool_1d_default, _2d_default, _3d_default, _2d_strides, _2d_pads,
  // _2d_precomputed_strides, _2d_dilations.
  EXPECT_THAT(infer_ok(max_pool(f32({1, 3, 32}), {{"kernel_shape", Ints{2}}})),
              ElementsAre(f32({1, 3, 31})));
  EXPECT_THAT(infer_ok(max_pool(f32({1, 3, 32, 32}), {{"kernel_shape", Ints{2, 2}}})),
              ElementsAre(f32({1, 3, 31, 31})));
  EXPECT_THAT(infer_ok(max_pool(f32({1, 3, 32, 32, 32}), {{"kernel_shape", Ints{2, 2, 2}}})),
              ElementsAre(f32({1, 3, 31, 31, 31})));
  EXPECT_THAT(infer_ok(max_pool(f32({1, 3, 32, 32}),
                                {{"kernel_shape", Ints{5, 5}}, {"strides", Ints{3, 3}}})),
              ElementsAre(f32({1, 3, 10, 10})));  // (32-5)/3+1
  EXPECT_THAT(infer_ok(max_pool(f32({1, 3, 28, 28}),
                                {{"kernel_shape", Ints{3, 3}}, {"pads", Ints{2, 2, 2, 2}}})),
              ElementsAre(f32({1, 3, 30, 30})));  // 28+4-3+1
  EXPECT_THAT(infer_ok(max_pool(f32({1, 1, 5, 5}),
                                {{"kernel_shape", Ints{2, 2}}, {"strides", Ints{2, 2}}})),
              ElementsAre(f32({1, 1, 2, 2})));  // (5-2)/2+1 rounds down
  EXPECT_THAT(infer_ok(max_pool(f32({1, 1, 4, 4}),
                                {{"kernel_shape", Ints{2, 2}}, {"dilations", Ints{2, 2}}})),
              ElementsAre(f32({1, 1, 2, 2})));  // extent 3: 4-3+1
}

TEST(MaxPool, CeilModeRoundsUpUnlessTheLastWindowStartsInPadding) {
  // test_maxpool_2d_ceil: ceil((4-3)/2)+1 = 2.
  EXPECT_THAT(infer_ok(max_pool(f32({1, 1, 4, 4}), {{"kernel_shape", Ints{3, 3}},
                                                    {"strides", Ints{2, 2}},
                                                    {"ceil_mode", int64_t{1}}})),
              ElementsAre(f32({1, 1, 2, 2})));
  // 6 wide, kernel 3, stride 2: floor gives (6-3)/2+1 = 2, ceil gives 3.
  const Attributes k3s2 = {{"kernel_shape", Ints{3}}, {"strides", Ints{2}}};
  EXPECT_THAT(infer_ok(max_pool(f32({1, 1, 6}), k3s2)), ElementsAre(f32({1, 1, 2})));
  Attributes ceil = k3s2;
  ceil["ceil_mode"] = int64_t{1};
  EXPECT_THAT(infer_ok(max_pool(f32({1, 1, 6}), ceil)), ElementsAre(f32({1, 1, 3})));
  // ONNX's test_maxpool_2d_ceil_output_size_reduce_by_one: 2x2, kernel 1, stride 2 gives
  // ceil(1/2)+1 = 2, but window 2 would start at 2 >= 2 (all padding): 1.
  EXPECT_THAT(infer_ok(max_pool(f32({1, 1, 2, 2}), {{"kernel_shape", Ints{1, 1}},
                                                    {"strides", Ints{2, 2}},
                                                    {"ceil_mode", int64_t{1}}})),
              ElementsAre(f32({1, 1, 1, 1})));
  // PyTorch MaxPool1d(2, stride=2, padding=1, ceil_mode=True) on 5: ceil(5/2)+1 = 4, the 4th
  // window starts at 6 >= 5 + 1: 3.
  EXPECT_THAT(infer_ok(max_pool(f32({1, 1, 5}), {{"kernel_shape", Ints{2}},
                                                 {"strides", Ints{2}},
                                                 {"pads", Ints{1, 1}},
                                                 {"ceil_mode", int64_t{1}}})),
              ElementsAre(f32({1, 1, 3})));
  // A kernel larger than the input: one window with ceil_mode (ceil((7-8)/8)+1 = 1, as PyTorch's
  // nn.AvgPool2d(8, ceil_mode=True)), an error without it, and with ceil_mode when the kernel
  // exceeds the input by the stride or more (ceil((7-16)/8)+1 = 0).
  const Attributes k8s8 = {{"kernel_shape", Ints{8, 8}}, {"strides", Ints{8, 8}}};
  Attributes k8s8_ceil = k8s8;
  k8s8_ceil["ceil_mode"] = int64_t{1};
  EXPECT_THAT(infer_ok(max_pool(f32({1, 4, 7, 7}), k8s8_ceil)), ElementsAre(f32({1, 4, 1, 1})));
  EXPECT_THAT(
      error_of(max_pool(f32({1, 4, 7, 7}), k8s8)),
      HasSubstr("the kernel extent 8 (kernel 8, dilation 1) exceeds the padded input size 7"));
  EXPECT_THAT(error_of(max_pool(f32({1, 4, 7, 7}), {{"kernel_shape", Ints{16, 16}},
                                                    {"strides", Ints{8, 8}},
                                                    {"ceil_mode", int64_t{1}}})),
              HasSubstr("exceeds the padded input size 7 by the stride or more"));
}

TEST(MaxPool, AutoPadSizes) {
  // test_maxpool_2d_same_upper, _same_lower, _precomputed_same_upper.
  for (const char* mode : {"SAME_UPPER", "SAME_LOWER"}) {
    EXPECT_THAT(infer_ok(max_pool(f32({1, 3, 32, 32}),
                                  {{"kernel_shape", Ints{2, 2}}, {"auto_pad", std::string(mode)}})),
                ElementsAre(f32({1, 3, 32, 32})))
        << mode;
  }
  EXPECT_THAT(infer_ok(max_pool(f32({1, 1, 5, 5}), {{"kernel_shape", Ints{3, 3}},
                                                    {"strides", Ints{2, 2}},
                                                    {"auto_pad", std::string("SAME_UPPER")}})),
              ElementsAre(f32({1, 1, 3, 3})));
  // VALID is ceil((in - extent + 1) / s) in both modes: 6, kernel 3, stride 2 -> 2.
  for (int64_t ceil_mode : {0, 1}) {
    EXPECT_THAT(infer_ok(max_pool(f32({1, 1, 6}), {{"kernel_shape", Ints{3}},
                                                   {"strides", Ints{2}},
                                                   {"auto_pad", std::string("VALID")},
                                                   {"ceil_mode", ceil_mode}})),
                ElementsAre(f32({1, 1, 2})))
        << "ceil_mode " << ceil_mode;
  }
}

TEST(MaxPool, IndicesAreInt64LikeY) {
  // test_maxpool_with_argmax_2d_precomputed_pads and _precomputed_strides (storage_order 1).
  EXPECT_THAT(infer_ok(max_pool(f32({1, 1, 5, 5}),
                                {{"kernel_shape", Ints{5, 5}}, {"pads", Ints{2, 2, 2, 2}}}, 2)),
              ElementsAre(f32({1, 1, 5, 5}), i64({1, 1, 5, 5})));
  EXPECT_THAT(
      infer_ok(max_pool(
          f32({1, 1, 5, 5}),
          {{"kernel_shape", Ints{2, 2}}, {"strides", Ints{2, 2}}, {"storage_order", int64_t{1}}},
          2)),
      ElementsAre(f32({1, 1, 2, 2}), i64({1, 1, 2, 2})));
}

TEST(MaxPool, AcceptsBytesAndOpsetsFrom8) {
  // test_maxpool_2d_uint8.
  EXPECT_THAT(infer_ok(max_pool(u8({1, 1, 5, 5}),
                                {{"kernel_shape", Ints{5, 5}}, {"pads", Ints{2, 2, 2, 2}}})),
              ElementsAre(u8({1, 1, 5, 5})));
  for (int64_t opset : {8, 10, 12, 22}) {
    EXPECT_TRUE(
        infer_op({"MaxPool", {f32({1, 1, 4, 4})}, {}, {{"kernel_shape", Ints{2, 2}}}, opset}).ok())
        << opset;
  }
  EXPECT_FALSE(
      infer_op({"MaxPool", {f32({1, 1, 4, 4})}, {}, {{"kernel_shape", Ints{2, 2}}}, 7}).ok());
}

TEST(MaxPool, AttributeMistakesAreErrors) {
  EXPECT_THAT(error_of(max_pool(f32({1, 1, 4, 4}), {})), HasSubstr("kernel_shape"));
  EXPECT_THAT(error_of(max_pool(f32({1, 1, 4, 4}), {{"kernel_shape", Ints{2}}})),
              AllOf(HasSubstr("kernel_shape [2]"), HasSubstr("2 spatial dims")));
  EXPECT_THAT(
      error_of(max_pool(f32({1, 1, 4, 4}),
                        {{"kernel_shape", Ints{2, 2}}, {"storage_order", int64_t{2}}})),
      HasSubstr("attribute storage_order = 2 is not one of the values MaxPool defines (0 or 1)"));
  EXPECT_THAT(
      error_of(
          max_pool(f32({1, 1, 4, 4}), {{"kernel_shape", Ints{2, 2}}, {"ceil_mode", int64_t{2}}})),
      HasSubstr("attribute ceil_mode = 2 is not one of the values MaxPool defines (0 or 1)"));
  EXPECT_THAT(error_of(max_pool(i64({1, 1, 4, 4}), {{"kernel_shape", Ints{2, 2}}})),
              HasSubstr("does not accept"));
  EXPECT_THAT(error_of(max_pool(f32({1, 1, 2, 2}), {{"kernel_shape", Ints{3, 3}}})),
              HasSubstr("kernel extent 3"));
}

// ---- AveragePool -----------------------------------------------------------------------------

TEST(AveragePool, SizesMatchOnnxNodeTests) {
  // test_averagepool_* (opset 11).
  EXPECT_THAT(infer_ok(average_pool(f32({1, 3, 32}), {{"kernel_shape", Ints{2}}})),
              ElementsAre(f32({1, 3, 31})));
  EXPECT_THAT(infer_ok(average_pool(f32({1, 3, 32, 32, 32}), {{"kernel_shape", Ints{2, 2, 2}}})),
              ElementsAre(f32({1, 3, 31, 31, 31})));
  EXPECT_THAT(infer_ok(average_pool(f32({1, 1, 4, 4}), {{"kernel_shape", Ints{3, 3}},
                                                        {"strides", Ints{2, 2}},
                                                        {"ceil_mode", int64_t{1}}})),
              ElementsAre(f32({1, 1, 2, 2})));
  for (int64_t include : {0, 1}) {
    EXPECT_THAT(infer_ok(average_pool(f32({1, 3, 28, 28}), {{"kernel_shape", Ints{3, 3}},
                                                            {"pads", Ints{2, 2, 2, 2}},
                                                            {"count_include_pad", include}})),
                ElementsAre(f32({1, 3, 30, 30})));
    EXPECT_THAT(infer_ok(average_pool(f32({1, 1, 5, 5}), {{"kernel_shape", Ints{5, 5}},
                                                          {"pads", Ints{2, 2, 2, 2}},
                                                          {"count_include_pad", include}})),
                ElementsAre(f32({1, 1, 5, 5})));
  }
  EXPECT_THAT(infer_ok(average_pool(f32({1, 1, 5, 5}), {{"kernel_shape", Ints{3, 3}},
                                                        {"strides", Ints{2, 2}},
                                                        {"auto_pad", std::string("SAME_UPPER")}})),
              ElementsAre(f32({1, 1, 3, 3})));
  EXPECT_THAT(
      infer_ok(average_pool(f16({1, 3, 32, 32}), {{"kernel_shape", Ints{2, 2}},
                                                  {"auto_pad", std::string("SAME_LOWER")}})),
      ElementsAre(f16({1, 3, 32, 32})));
  EXPECT_THAT(infer_ok(average_pool(f32({1, 3, 32, 32}),
                                    {{"kernel_shape", Ints{5, 5}}, {"strides", Ints{3, 3}}})),
              ElementsAre(f32({1, 3, 10, 10})));
}

TEST(AveragePool, DilationsExistFromOpset19) {
  EXPECT_THAT(infer_ok(average_pool(f32({1, 1, 4, 4}),
                                    {{"kernel_shape", Ints{2, 2}}, {"dilations", Ints{2, 2}}}, 19)),
              ElementsAre(f32({1, 1, 2, 2})));
  const OpDef* v11 = OpRegistry::global().find("", "AveragePool", 18);
  const OpDef* v19 = OpRegistry::global().find("", "AveragePool", 19);
  ASSERT_NE(v11, nullptr);
  ASSERT_NE(v19, nullptr);
  EXPECT_EQ(v11->find_attr("dilations"), nullptr);  // import rejects it before opset 19
  EXPECT_NE(v19->find_attr("dilations"), nullptr);
  EXPECT_EQ(OpRegistry::global().find("", "AveragePool", 10), nullptr);
}

TEST(AveragePool, AttributeMistakesAreErrors) {
  EXPECT_THAT(error_of(average_pool(f32({1, 1, 4, 4}), {{"kernel_shape", Ints{2, 2}},
                                                        {"count_include_pad", int64_t{2}}})),
              HasSubstr("attribute count_include_pad"));
  EXPECT_THAT(error_of(average_pool(f32({4, 4}), {{"kernel_shape", Ints{2, 2}}})),
              HasSubstr("spatial dims"));
}

// ---- GlobalAveragePool -----------------------------------------------------------------------

TEST(GlobalAveragePool, KeepsBatchAndChannelsAndOnesElsewhere) {
  // test_globalaveragepool and _precomputed.
  EXPECT_THAT(infer_ok({"GlobalAveragePool", {f32({1, 3, 5, 5})}, {}, {}, 1}),
              ElementsAre(f32({1, 3, 1, 1})));
  EXPECT_THAT(infer_ok({"GlobalAveragePool", {f32({1, 1, 3, 3})}, {}, {}}),
              ElementsAre(f32({1, 1, 1, 1})));
  EXPECT_THAT(infer_ok({"GlobalAveragePool", {f16({2, 8, 4, 3, 2})}, {}, {}}),
              ElementsAre(f16({2, 8, 1, 1, 1})));
  EXPECT_THAT(error_of({"GlobalAveragePool", {f32({3})}, {}, {}}), HasSubstr("rank >= 2"));
}

// ---- Autocast spec and the ONNX node test models --------------------------------------------

TEST(ConvFamily, AutocastCategoriesFollowTheDesignTable) {
  const std::pair<const char*, AutocastCategory> expected[] = {
      {"Conv", AutocastCategory::kAllow},
      {"MaxPool", AutocastCategory::kClear},
      {"AveragePool", AutocastCategory::kFollow},
      {"GlobalAveragePool", AutocastCategory::kDeny},
  };
  for (const auto& [op, category] : expected) {
    for (const OpDef* def : OpRegistry::global().find_all("", op)) {
      EXPECT_EQ(def->autocast.category, category) << op << " from opset " << def->since_opset;
    }
  }
  EXPECT_EQ(OpRegistry::global().find("", "Conv", 17)->autocast.accumulate, DType::kF32);
}

TEST(ConvFamily, ImportsOnnxNodeTestModelsWithTheirOutputShapes) {
  expect_onnx_node_outputs({
      {"test_basic_conv_with_padding", {f32({1, 1, 5, 5})}},
      {"test_basic_conv_without_padding", {f32({1, 1, 3, 3})}},
      {"test_conv_with_autopad_same", {f32({1, 1, 3, 3})}},
      {"test_conv_with_strides_and_asymmetric_padding", {f32({1, 1, 4, 2})}},
      {"test_conv_with_strides_no_padding", {f32({1, 1, 3, 2})}},
      {"test_conv_with_strides_padding", {f32({1, 1, 4, 3})}},
      {"test_maxpool_1d_default", {f32({1, 3, 31})}},
      {"test_maxpool_2d_ceil", {f32({1, 1, 2, 2})}},
      {"test_maxpool_2d_default", {f32({1, 3, 31, 31})}},
      {"test_maxpool_2d_dilations", {f32({1, 1, 2, 2})}},
      {"test_maxpool_2d_pads", {f32({1, 3, 30, 30})}},
      {"test_maxpool_2d_precomputed_pads", {f32({1, 1, 5, 5})}},
      {"test_maxpool_2d_precomputed_same_upper", {f32({1, 1, 3, 3})}},
      {"test_maxpool_2d_precomputed_strides", {f32({1, 1, 2, 2})}},
      {"test_maxpool_2d_same_lower", {f32({1, 3, 32, 32})}},
      {"test_maxpool_2d_same_upper", {f32({1, 3, 32, 32})}},
      {"test_maxpool_2d_strides", {f32({1, 3, 10, 10})}},
      {"test_maxpool_2d_uint8", {u8({1, 1, 5, 5})}},
      {"test_maxpool_3d_default", {f32({1, 3, 31, 31, 31})}},
      {"test_maxpool_with_argmax_2d_precomputed_pads", {f32({1, 1, 5, 5}), i64({1, 1, 5, 5})}},
      {"test_maxpool_with_argmax_2d_precomputed_strides", {f32({1, 1, 2, 2}), i64({1, 1, 2, 2})}},
      {"test_averagepool_1d_default", {f32({1, 3, 31})}},
      {"test_averagepool_2d_ceil", {f32({1, 1, 2, 2})}},
      {"test_averagepool_2d_default", {f32({1, 3, 31, 31})}},
      {"test_averagepool_2d_pads", {f32({1, 3, 30, 30})}},
      {"test_averagepool_2d_pads_count_include_pad", {f32({1, 3, 30, 30})}},
      {"test_averagepool_2d_precomputed_pads", {f32({1, 1, 5, 5})}},
      {"test_averagepool_2d_precomputed_pads_count_include_pad", {f32({1, 1, 5, 5})}},
      {"test_averagepool_2d_precomputed_same_upper", {f32({1, 1, 3, 3})}},
      {"test_averagepool_2d_precomputed_strides", {f32({1, 1, 2, 2})}},
      {"test_averagepool_2d_same_lower", {f32({1, 3, 32, 32})}},
      {"test_averagepool_2d_same_upper", {f32({1, 3, 32, 32})}},
      {"test_averagepool_2d_strides", {f32({1, 3, 10, 10})}},
      {"test_averagepool_3d_default", {f32({1, 3, 31, 31, 31})}},
      {"test_globalaveragepool", {f32({1, 3, 1, 1})}},
      {"test_globalaveragepool_precomputed", {f32({1, 1, 1, 1})}},
  });
}

}  // namespace
}  // namespace ampc::op_testing
