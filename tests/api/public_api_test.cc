// The public C++ API (include/ampc/session.h), used as an embedding application uses it: a model
// compiled by the `ampc` CLI, loaded through ampc::TrainingSession, trained on the fixed batches
// of models/mlp.train_ref.npz at the learning rate compiled into it, and compared with PyTorch's
// losses recorded there (within 1e-4 relative, as the runtime's own trajectory tests). Then the
// rest of the surface: checkpoints resume bit for bit, the exported inference model runs through
// ampc::InferenceSession, state reads and writes, and errors that name what was wrong.
#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "ampc/ampc.h"
#include "compiler/onnx_io.h"
#include "gtest/gtest.h"
#include "runtime/npy.h"
#include "tests/test_util.h"
#include "tests/tools/cli_test_util.h"

namespace ampc {
namespace {

class PublicApi : public testing::TempDirTest {
 protected:
  PublicApi() : TempDirTest("ampc_public_api_") {}

  void SetUp() override {
    // PyTorch's recipe for the recorded trajectory (models/README.md): SGD, momentum 0.9, weight
    // decay 1e-4, lr 0.05.
    const testing::CliResult compiled = testing::run_ampc(
        "compile " + testing::source_path("models/mlp.onnx") + " -o " + path("mlp.train.onnx") +
        " --optimizer sgd --momentum 0.9 --weight-decay 1e-4 --lr 0.05");
    ASSERT_EQ(compiled.exit_code, 0) << compiled.err;
    absl::StatusOr<std::map<std::string, Tensor>> ref =
        runtime::read_npz(testing::source_path("models/mlp.train_ref.npz"));
    ASSERT_TRUE(ref.ok()) << ref.status();
    ref_ = *std::move(ref);
  }

  // Batch `index` of the recorded ones (batch.<input> holds 4 of them).
  TensorMap batch(int64_t index) const {
    TensorMap batch;
    for (const auto& [name, all] : ref_) {
      if (!name.starts_with("batch.")) continue;
      const TensorType type{all.dtype(), Shape(all.shape().begin() + 1, all.shape().end())};
      const int64_t bytes = type.byte_size();
      const int64_t at = index % all.shape()[0];
      batch[name.substr(6)] =
          Tensor(type, std::vector<uint8_t>(all.bytes().begin() + at * bytes,
                                            all.bytes().begin() + (at + 1) * bytes));
    }
    return batch;
  }

  std::unique_ptr<TrainingSession> load() const {
    absl::StatusOr<std::unique_ptr<TrainingSession>> session =
        TrainingSession::load(path("mlp.train.onnx"));
    EXPECT_TRUE(session.ok()) << session.status();
    return session.ok() ? *std::move(session) : nullptr;
  }

  std::map<std::string, Tensor> ref_;
};

TEST_F(PublicApi, TrainsTheMlpOnPyTorchsTrajectory) {
  std::unique_ptr<TrainingSession> session = load();
  ASSERT_NE(session, nullptr);
  ASSERT_TRUE(session->default_lr().has_value());
  EXPECT_EQ(static_cast<float>(*session->default_lr()), 0.05f);
  EXPECT_EQ(session->accumulation_steps(), 1);
  std::vector<std::string> wanted;
  for (const TensorInfo& input : session->batch_inputs()) wanted.push_back(input.name);
  std::vector<std::string> recorded;
  for (const auto& [name, tensor] : batch(0)) recorded.push_back(name);
  std::sort(wanted.begin(), wanted.end());
  EXPECT_EQ(wanted, recorded);  // a map's keys: sorted

  const Tensor& losses = ref_.at("sgd.loss");
  for (int64_t step = 0; step < losses.num_elements(); ++step) {
    absl::StatusOr<StepResult> result = session->step(batch(step));
    ASSERT_TRUE(result.ok()) << result.status();
    EXPECT_EQ(result->step, step + 1);
    EXPECT_EQ(result->lr, static_cast<double>(0.05f));
    EXPECT_FALSE(result->skipped);
    EXPECT_TRUE(std::isnan(result->loss_scale));  // f32: no loss scaling
    const double want = losses.element_as_double(step);
    EXPECT_LT(std::abs(result->loss - want), 1e-4 * std::abs(want))
        << "step " << step << ": loss " << result->loss << ", PyTorch " << want;
  }
  EXPECT_EQ(session->steps_done(), losses.num_elements());
}

TEST_F(PublicApi, CheckpointsResumeBitForBit) {
  std::unique_ptr<TrainingSession> session = load();
  ASSERT_NE(session, nullptr);
  for (int64_t step = 0; step < 3; ++step) ASSERT_TRUE(session->step(batch(step)).ok());
  ASSERT_TRUE(session->save_checkpoint(path("checkpoint.safetensors")).ok());
  std::vector<double> first;
  for (int64_t step = 3; step < 6; ++step) first.push_back(session->step(batch(step))->loss);

  std::unique_ptr<TrainingSession> resumed = load();
  ASSERT_NE(resumed, nullptr);
  const absl::Status loaded = resumed->load_checkpoint(path("checkpoint.safetensors"));
  ASSERT_TRUE(loaded.ok()) << loaded;
  EXPECT_EQ(resumed->steps_done(), 3);
  for (int64_t step = 3; step < 6; ++step) {
    EXPECT_EQ(resumed->step(batch(step))->loss, first[step - 3]) << "step " << step;
  }
  for (const std::string& name : session->state_names()) {
    EXPECT_EQ(*resumed->state(name), *session->state(name)) << name;
  }
}

TEST_F(PublicApi, ExportedModelRunsThroughInferenceSession) {
  std::unique_ptr<TrainingSession> session = load();
  ASSERT_NE(session, nullptr);
  ASSERT_TRUE(session->step(batch(0)).ok());
  ASSERT_TRUE(session->export_inference_model(path("mlp.trained.onnx"), /*keep_loss=*/true).ok());
  absl::StatusOr<TensorMap> evaluated = session->evaluate(batch(1));
  ASSERT_TRUE(evaluated.ok()) << evaluated.status();

  absl::StatusOr<std::unique_ptr<InferenceSession>> inference =
      InferenceSession::load(path("mlp.trained.onnx"));
  ASSERT_TRUE(inference.ok()) << inference.status();
  std::vector<std::string> names;
  for (const TensorInfo& output : (*inference)->outputs()) names.push_back(output.name);
  std::vector<std::string> eval_names;
  for (const TensorInfo& output : session->eval_outputs()) eval_names.push_back(output.name);
  EXPECT_EQ(names, eval_names);
  absl::StatusOr<TensorMap> outputs = (*inference)->run(batch(1));
  ASSERT_TRUE(outputs.ok()) << outputs.status();
  // The same graph on the same weights and the same backend: the same bits.
  for (const auto& [name, tensor] : *evaluated) EXPECT_EQ(outputs->at(name), tensor) << name;
}

// Random ops draw anew on each run, as a PyTorch forward does, and reproducibly: the k-th run of
// every session of the model draws alike.
TEST_F(PublicApi, InferenceRunsDrawAnewEachRunAndAlikeAcrossSessions) {
  std::unique_ptr<Graph> graph = testing::parse_or_fail(R"(
      graph g(%mu: f32[8]) opset(17) {
        %eps = RandomNormalLike(%mu) : f32[8]
        %z = Add(%mu, %eps) : f32[8]
        return %z
      })");
  ASSERT_NE(graph, nullptr);
  ASSERT_TRUE(export_onnx_file(*graph, path("sampler.onnx")).ok());
  const TensorMap input = {{"mu", Tensor::from_f32({8}, std::vector<float>(8, 1.0f))}};
  auto samples = [&](int runs) {
    absl::StatusOr<std::unique_ptr<InferenceSession>> session =
        InferenceSession::load(path("sampler.onnx"));
    EXPECT_TRUE(session.ok()) << session.status();
    std::vector<Tensor> drawn;
    for (int i = 0; session.ok() && i < runs; ++i) {
      absl::StatusOr<TensorMap> outputs = (*session)->run(input);
      EXPECT_TRUE(outputs.ok()) << outputs.status();
      if (outputs.ok()) drawn.push_back(outputs->at("z"));
    }
    return drawn;
  };
  const std::vector<Tensor> first = samples(3);
  ASSERT_EQ(first.size(), 3u);
  EXPECT_FALSE(first[0] == first[1]);
  EXPECT_FALSE(first[1] == first[2]);
  EXPECT_EQ(samples(3), first);
}

TEST_F(PublicApi, StateReadsAndWrites) {
  std::unique_ptr<TrainingSession> session = load();
  ASSERT_NE(session, nullptr);
  const std::vector<std::string> names = session->state_names();
  ASSERT_FALSE(names.empty());
  absl::StatusOr<Tensor> weight = session->state(names.front());
  ASSERT_TRUE(weight.ok()) << weight.status();
  Tensor zeros(weight->type());
  ASSERT_TRUE(session->set_state(names.front(), zeros).ok());
  EXPECT_EQ(*session->state(names.front()), zeros);
  const absl::Status wrong =
      session->set_state(names.front(), Tensor(TensorType{DType::kF64, {1}}));
  EXPECT_FALSE(wrong.ok());
  EXPECT_NE(wrong.message().find(names.front()), std::string::npos) << wrong;
}

TEST_F(PublicApi, ErrorsNameWhatWasWrong) {
  absl::StatusOr<std::unique_ptr<TrainingSession>> missing =
      TrainingSession::load(path("no_such_model.onnx"));
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("no_such_model.onnx"), std::string::npos)
      << missing.status();

  std::unique_ptr<TrainingSession> session = load();
  ASSERT_NE(session, nullptr);
  TensorMap incomplete = batch(0);
  const std::string dropped = incomplete.begin()->first;
  incomplete.erase(incomplete.begin());
  absl::StatusOr<StepResult> result = session->step(incomplete);
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(result.status().message().find(dropped), std::string::npos) << result.status();
  EXPECT_EQ(session->steps_done(), 0);
  // An explicit learning rate overrides the compiled one.
  absl::StatusOr<StepResult> slow = session->step(batch(0), 0.001f);
  ASSERT_TRUE(slow.ok()) << slow.status();
  EXPECT_EQ(slow->lr, static_cast<double>(0.001f));
}

TEST_F(PublicApi, BatchesLentAsViewsAreNotCopied) {
  // The same steps from the batch's tensors and from views of the caller's own copy of their
  // bytes: the same losses bit for bit, and each step copies only its learning rate (4 bytes) to
  // the CPU "device".
  std::unique_ptr<TrainingSession> tensors = load();
  std::unique_ptr<TrainingSession> views = load();
  ASSERT_NE(tensors, nullptr);
  ASSERT_NE(views, nullptr);
  for (int64_t step = 0; step < 3; ++step) {
    const TensorMap batch = this->batch(step);
    std::vector<std::vector<uint8_t>> owned;
    TensorViews lent;
    for (const auto& [name, tensor] : batch) {
      owned.emplace_back(tensor.bytes().begin(), tensor.bytes().end());
      lent.set(name, TensorView(tensor.type(), owned.back().data()));
    }
    const TransferCounts before = views->transfers();
    absl::StatusOr<StepResult> a = tensors->step(batch);
    absl::StatusOr<StepResult> b = views->step(lent);
    ASSERT_TRUE(a.ok()) << a.status();
    ASSERT_TRUE(b.ok()) << b.status();
    EXPECT_EQ(a->loss, b->loss) << "step " << step;
    EXPECT_EQ(views->transfers().copies_to_device - before.copies_to_device, 1);
    EXPECT_EQ(views->transfers().bytes_to_device - before.bytes_to_device, 4);
  }
  // The eval graph reads views too.
  const TensorMap batch = this->batch(0);
  TensorViews eval;
  for (const TensorInfo& input : views->eval_inputs()) eval.set(input.name, batch.at(input.name));
  absl::StatusOr<TensorMap> a = tensors->evaluate(eval);
  absl::StatusOr<TensorMap> b = views->evaluate(eval);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(*a, *b);
}

TEST_F(PublicApi, WeightsAreWhatTheExportHolds) {
  std::unique_ptr<TrainingSession> session = load();
  ASSERT_NE(session, nullptr);
  const std::vector<TensorInfo> weights = session->weight_infos();
  const std::vector<std::string> state = session->state_names();
  ASSERT_FALSE(weights.empty());
  for (const TensorInfo& weight : weights) {
    EXPECT_NE(std::find(state.begin(), state.end(), weight.name), state.end()) << weight.name;
    EXPECT_EQ(weight.name.find("momentum"), std::string::npos) << weight.name;
    EXPECT_EQ(session->state(weight.name)->type(), weight.type) << weight.name;
  }
  EXPECT_LT(weights.size(), state.size());  // the momentum buffers are state, not weights
}

// Tensor::create is the constructors' checked form for types and bytes from outside the program:
// what no tensor can hold is an InvalidArgument naming the type, where the constructors abort.
TEST(PublicApiTensor, CreateRefusesWhatNoTensorHolds) {
  const TensorType negative{DType::kF32, {2, -3}};
  absl::StatusOr<Tensor> refused = Tensor::create(negative);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(refused.status().message().find("f32[2,-3]"), std::string::npos) << refused.status();
  EXPECT_FALSE(Tensor::create(negative, {}).ok());

  // 2^62 elements of 4 bytes: the byte size does not fit in int64.
  const TensorType huge{DType::kF32, {int64_t{1} << 31, int64_t{1} << 31}};
  EXPECT_FALSE(Tensor::create(huge).ok());

  const TensorType pair{DType::kF16, {2}};
  absl::StatusOr<Tensor> short_bytes = Tensor::create(pair, {0x00, 0x3c, 0x00});
  ASSERT_FALSE(short_bytes.ok());
  EXPECT_NE(short_bytes.status().message().find("f16[2] takes 4 bytes, not the 3 given"),
            std::string::npos)
      << short_bytes.status();

  absl::StatusOr<Tensor> ones = Tensor::create(pair, {0x00, 0x3c, 0x00, 0x3c});
  ASSERT_TRUE(ones.ok()) << ones.status();
  EXPECT_EQ(ones->to_double_vector(), (std::vector<double>{1.0, 1.0}));
  absl::StatusOr<Tensor> zeros = Tensor::create(TensorType{DType::kBF16, {0, 5}});
  ASSERT_TRUE(zeros.ok()) << zeros.status();
  EXPECT_EQ(zeros->bytes().size(), 0u);
}

TEST(PublicApiVersion, HeadersAndLibraryAgree) {
  EXPECT_EQ(AMPC_VERSION_MAJOR, 0);
  EXPECT_EQ(std::string(AMPC_VERSION_STRING), std::to_string(AMPC_VERSION_MAJOR) + "." +
                                                  std::to_string(AMPC_VERSION_MINOR) + "." +
                                                  std::to_string(AMPC_VERSION_PATCH));
  EXPECT_EQ(device_name(Device::kCpu), "cpu");
  EXPECT_FALSE(parse_device("tpu").ok());
}

}  // namespace
}  // namespace ampc
