// Inputs lent to a session (ampc::TensorView, InferenceSession::lend_input): on the CPU the
// kernels read the caller's memory where it is. Shown two ways: a change the caller makes to its
// buffer after lending it and before the run is what the run computes (a copy taken when lent
// would not see it), and the backend counts no copy to the device. Memory that cannot be read in
// place (misaligned, an input that is also an output) is copied; either way the loan ends with
// the launch.
#include <cstring>
#include <vector>

#include "compiler/compile.h"
#include "gtest/gtest.h"
#include "runtime/batch_data.h"
#include "runtime/session.h"
#include "runtime/training_session.h"
#include "tests/runtime/training_test_util.h"
#include "tests/test_util.h"

namespace ampc::runtime {
namespace {

constexpr std::string_view kAddOne = R"(
  graph g(%x: f32[4], %one: f32[]) opset(17) {
    %y = Add(%x, %one) {name="add"} : f32[4]
    return %y
  })";

std::unique_ptr<InferenceSession> open(std::string_view text) {
  absl::StatusOr<std::unique_ptr<InferenceSession>> session =
      InferenceSession::create(testing::parse_or_fail(text));
  EXPECT_TRUE(session.ok()) << session.status();
  return session.ok() ? *std::move(session) : nullptr;
}

std::vector<float> output_values(const InferenceSession& session, std::string_view name) {
  absl::StatusOr<Tensor> out = session.output(name);
  EXPECT_TRUE(out.ok()) << out.status();
  if (!out.ok()) return {};
  const std::span<const float> values = out->data<float>();
  return {values.begin(), values.end()};
}

const TensorType kX{DType::kF32, {4}};
const TensorType kScalar{DType::kF32, {}};

TEST(LentInput, TheCpuReadsTheCallersMemoryInPlace) {
  std::unique_ptr<InferenceSession> session = open(kAddOne);
  ASSERT_NE(session, nullptr);
  ASSERT_TRUE(session->set_input("one", Tensor::from_f32({}, {1})).ok());
  alignas(16) float x[4] = {1, 2, 3, 4};
  const int64_t copies = session->backend().counters().copies_to_device;
  ASSERT_TRUE(session->lend_input("x", TensorView(kX, x)).ok());
  x[2] = 100;  // after the loan, before the run: a copy made when lent would still hold 3
  ASSERT_TRUE(session->run().ok());
  // Exact: each output is one f32 addition.
  EXPECT_EQ(output_values(*session, "y"), (std::vector<float>{2, 3, 101, 5}));
  EXPECT_EQ(session->backend().counters().copies_to_device, copies);
}

TEST(LentInput, TheLoanEndsWithTheLaunch) {
  std::unique_ptr<InferenceSession> session = open(kAddOne);
  ASSERT_NE(session, nullptr);
  ASSERT_TRUE(session->set_input("one", Tensor::from_f32({}, {1})).ok());
  float x[4] = {1, 2, 3, 4};
  ASSERT_TRUE(session->lend_input("x", TensorView(kX, x)).ok());
  ASSERT_TRUE(session->run().ok());
  // The lent input is unset; the one set by copy stays set.
  const absl::Status again = session->run();
  EXPECT_EQ(again.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(again.message().find("input 'x' is not set"), std::string_view::npos) << again;
  // A copy replaces a loan: the lender's later writes are not read.
  ASSERT_TRUE(session->lend_input("x", TensorView(kX, x)).ok());
  ASSERT_TRUE(session->set_input("x", Tensor::from_f32({4}, {10, 20, 30, 40})).ok());
  x[0] = -1;
  ASSERT_TRUE(session->run().ok());
  EXPECT_EQ(output_values(*session, "y"), (std::vector<float>{11, 21, 31, 41}));
  ASSERT_TRUE(session->run().ok());  // and stays set
}

TEST(LentInput, MisalignedMemoryIsCopied) {
  std::unique_ptr<InferenceSession> session = open(kAddOne);
  ASSERT_NE(session, nullptr);
  // Four floats one byte into a buffer: not aligned to 4 bytes, so the kernels cannot read them
  // there; the session copies them (one copy of 16 bytes) and computes the same.
  alignas(16) unsigned char storage[1 + 4 * sizeof(float)];
  const float x[4] = {1.5f, -2, 3, 0.25f};
  std::memcpy(storage + 1, x, sizeof(x));
  const Backend::Counters before = session->backend().counters();
  absl::StatusOr<std::map<std::string, Tensor>> out =
      session->run({{"x", TensorView(kX, storage + 1)}, {"one", Tensor::from_f32({}, {1})}});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(out->at("y").to_double_vector(), (std::vector<double>{2.5, -1, 4, 1.25}));
  // The scalar is aligned (read in place); the misaligned input is the one copy.
  EXPECT_EQ(session->backend().counters().copies_to_device - before.copies_to_device, 1);
  EXPECT_EQ(session->backend().counters().bytes_to_device - before.bytes_to_device, 16);
}

TEST(LentInput, AnInputThatIsAnOutputIsCopied) {
  // %x is returned as it is: the output must stay readable after the loan ends.
  std::unique_ptr<InferenceSession> session = open(R"(
    graph g(%x: f32[4], %one: f32[]) opset(17) {
      %y = Add(%x, %one) {name="add"} : f32[4]
      return %y, %x
    })");
  ASSERT_NE(session, nullptr);
  std::vector<float> x = {1, 2, 3, 4};
  absl::StatusOr<std::map<std::string, Tensor>> out =
      session->run({{"x", TensorView(kX, x.data())}, {"one", Tensor::from_f32({}, {1})}});
  ASSERT_TRUE(out.ok()) << out.status();
  x.assign(4, 0);
  EXPECT_EQ(out->at("x").to_double_vector(), (std::vector<double>{1, 2, 3, 4}));
  EXPECT_EQ(output_values(*session, "x"), (std::vector<float>{1, 2, 3, 4}));
}

TEST(LentInput, ABadViewNamesTheInputAndLeavesNoLoan) {
  std::unique_ptr<InferenceSession> session = open(kAddOne);
  ASSERT_NE(session, nullptr);
  float x[4] = {1, 2, 3, 4};
  const float one = 1;
  const TensorType wrong{DType::kF32, {2, 2}};
  absl::StatusOr<std::map<std::string, Tensor>> out =
      session->run({{"one", TensorView(kScalar, &one)}, {"x", TensorView(wrong, x)}});
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(out.status().message().find("input 'x' must be f32[4], not f32[2,2]"),
            std::string_view::npos)
      << out.status();
  // The loan of `one` made before the failure ended with it: `one` is unset again.
  ASSERT_TRUE(session->set_input("x", Tensor::from_f32({4}, {1, 2, 3, 4})).ok());
  const absl::Status ran = session->run();
  EXPECT_NE(ran.message().find("input 'one' is not set"), std::string_view::npos) << ran;
  const absl::Status no_data = session->lend_input("x", TensorView(kX, nullptr));
  EXPECT_NE(no_data.message().find("input 'x' has no data"), std::string_view::npos) << no_data;
}

TEST(LentInput, ATrainingStepReadsItsBatchInPlace) {
  // Two sessions of the MLP with SGD: one fed the batches' tensors (which lend their bytes), the
  // other views of a copy of those bytes in memory this test owns. Both take the same steps bit
  // for bit, and neither copies its batch to the device: each step copies only the learning rate
  // (4 bytes).
  CompileOptions options;
  options.training = TrainingOptions{};
  options.training->lr = 0.05f;
  auto open_mlp = [&] {
    return testing::compile_training_file(testing::source_path("models/mlp.onnx"), options);
  };
  std::unique_ptr<TrainingSession> tensors = open_mlp();
  std::unique_ptr<TrainingSession> views = open_mlp();
  ASSERT_NE(tensors, nullptr);
  ASSERT_NE(views, nullptr);
  absl::StatusOr<BatchData> data =
      BatchData::load(testing::source_path("models/mlp.train.npz"), tensors->batch_inputs());
  ASSERT_TRUE(data.ok()) << data.status();
  for (int64_t step = 0; step < 5; ++step) {
    const std::map<std::string, Tensor> batch = data->batch(step % data->num_batches());
    std::vector<std::vector<std::byte>> owned;
    TensorViews lent;
    for (const auto& [name, tensor] : batch) {
      const std::span<const uint8_t> bytes = tensor.bytes();
      owned.emplace_back(reinterpret_cast<const std::byte*>(bytes.data()),
                         reinterpret_cast<const std::byte*>(bytes.data() + bytes.size()));
      lent.set(name, TensorView(tensor.type(), owned.back().data()));
    }
    const Backend::Counters before = views->backend().counters();
    absl::StatusOr<StepStats> a = tensors->step(batch, 0.05f);
    absl::StatusOr<StepStats> b = views->step(lent, 0.05f);
    ASSERT_TRUE(a.ok()) << a.status();
    ASSERT_TRUE(b.ok()) << b.status();
    EXPECT_EQ(a->loss, b->loss) << "step " << step;
    EXPECT_EQ(a->grad_norm, b->grad_norm) << "step " << step;
    EXPECT_EQ(views->backend().counters().copies_to_device - before.copies_to_device, 1);
    EXPECT_EQ(views->backend().counters().bytes_to_device - before.bytes_to_device, 4);
  }
  // The same batch again gives the eval graph's outputs without a copy either.
  const std::map<std::string, Tensor> batch = data->batch(0);
  TensorViews eval;
  for (const TensorInfo& input : views->eval_inputs()) eval.set(input.name, batch.at(input.name));
  const Backend::Counters before = views->backend().counters();
  absl::StatusOr<std::map<std::string, Tensor>> a = tensors->evaluate(eval);
  absl::StatusOr<std::map<std::string, Tensor>> b = views->evaluate(eval);
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(*a, *b);
  EXPECT_EQ(views->backend().counters().copies_to_device, before.copies_to_device);
}

}  // namespace
}  // namespace ampc::runtime
