// The model zoo (models/zoo/, written by models/export_zoo.py): small versions of GPT-2, a
// Llama-style decoder, a BERT-style masked LM, a decoder on left-padded batches, a T5-style
// encoder, an nn.Transformer encoder-decoder, a mixture of experts, ResNet-18, MobileNetV3-small,
// a U-Net, a ViT, a Swin block, a ConvNeXt, an MLP-Mixer, a contrastive image-text model, a graph
// net, a Conformer block, a 1-D conv net on waveforms, a GRU and LSTM tagger, a recommender on
// EmbeddingBags (ONNX Loops) and the models of user reports, each as PyTorch's exporters wrote it.
//
// - Every file in the folder imports, or fails naming the op, its domain and opset and the
//   nearest ops ampc supports.
// - Every faithful export (its loss and parameters are PyTorch's; manifest.json) trains, its
//   PyTorch parameters only (float buffers are initializers too), 10 steps of SGD with
//   momentum and of AdamW, compiled at fp32, fp16 and bf16, with the losses PyTorch recorded in
//   f32: within 1e-4 relative at fp32 (f32 rounding differences only), within 3% at fp16 and bf16
//   (a low-precision run against the f32 reference: the documented bar for mixed precision);
//   the trained model, exported with its loss and run as `ampc run` runs it, gives PyTorch's
//   eval-mode loss on a held-out batch within the same bars.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>

#include "absl/strings/match.h"
#include "compiler/compile.h"
#include "compiler/onnx_io.h"
#include "compiler/strings.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "runtime/npy.h"
#include "runtime/training_session.h"
#include "tests/temp_dir.h"
#include "tests/test_util.h"

namespace ampc::runtime {
namespace {

namespace fs = std::filesystem;

std::string zoo_path(std::string_view file) {
  return testing::source_path(str_cat("models/zoo/", file));
}

struct ZooRun {
  std::string file;
  std::vector<std::string> parameters;  // the initializers that are PyTorch parameters
  std::string model;
  std::string optimizer;  // "sgd" or "adamw"
  std::string precision;  // "fp32", "fp16" or "bf16"
  // PyTorch's eval-mode loss on the held-out batch after the 10 steps, from the state the file
  // holds (the TorchScript exporter's BatchNorm statistics include the example batch).
  double eval_loss = 0;
  double eval_f32_vs_f64 = 0;  // how far PyTorch's f32 and f64 eval losses part
};

void PrintTo(const ZooRun& r, std::ostream* os) {
  *os << r.file << "/" << r.optimizer << "/" << r.precision;
}

std::vector<ZooRun> faithful_runs() {
  std::ifstream in(zoo_path("manifest.json"));
  std::vector<ZooRun> runs;
  if (!in) return runs;
  const nlohmann::json manifest = nlohmann::json::parse(in);
  for (const nlohmann::json& entry : manifest.at("entries")) {
    if (entry.at("status") != "ok") continue;
    for (const char* optimizer : {"sgd", "adamw"}) {
      for (const char* precision : {"fp32", "fp16", "bf16"}) {
        runs.push_back({entry.at("file"), entry.at("parameters"), entry.at("model"), optimizer,
                        precision, entry.at("eval_loss").at(optimizer).get<double>(),
                        entry.at("eval_f32_vs_f64").at(optimizer).get<double>()});
      }
    }
  }
  return runs;
}

TEST(Zoo, EveryExportImportsOrNamesTheMissingOp) {
  int files = 0;
  for (const auto& entry : fs::directory_iterator(zoo_path(""))) {
    if (entry.path().extension() != ".onnx") continue;
    ++files;
    absl::StatusOr<std::unique_ptr<Graph>> graph = import_onnx_file(entry.path().string());
    if (graph.ok()) continue;
    const std::string message(graph.status().message());
    EXPECT_EQ(graph.status().code(), absl::StatusCode::kUnimplemented) << message;
    for (const char* fragment : {"op '", "(domain '", "opset ", "nearest ops ampc supports"}) {
      EXPECT_TRUE(absl::StrContains(message, fragment)) << message;
    }
  }
  EXPECT_GE(files, 10);
}

TEST(Zoo, ManifestListsEveryFileAndNamesWhyAnExportIsNotTrained) {
  std::ifstream in(zoo_path("manifest.json"));
  ASSERT_TRUE(in) << "models/zoo/manifest.json is missing";
  const nlohmann::json manifest = nlohmann::json::parse(in);
  for (const nlohmann::json& entry : manifest.at("entries")) {
    const std::string status = entry.at("status");
    if (status == "export failed") continue;
    EXPECT_TRUE(fs::exists(zoo_path(entry.at("file").get<std::string>()))) << entry.at("file");
    if (status != "ok") {
      EXPECT_FALSE(entry.at("reason").get<std::string>().empty()) << entry.at("file");
    }
  }
  EXPECT_GE(faithful_runs().size(), 6u * 8);
}

// The left-padded decoder, compiled for training from each export (dynamo's default one folds
// the causal mask into a bool initializer and lifts the scales; at opset 23 both attentions
// are Attention ops, the second with a bool mask, which the importer expands with the guard):
// both attentions fuse, the eager one (finfo.min bias; in the TorchScript file its
// probabilities go through Dropout with ratio 0) and the scaled_dot_product_attention one
// behind PyTorch's safe-softmax guard, which is `safe`; no Dropout is left on the step. (The
// training of the faithful files against PyTorch is among the runs below.)
TEST(Zoo, TheLeftPaddedDecodersAttentionsBothFuseTheGuardedOneSafe) {
  for (const char* exporter : {"torchscript", "dynamo", "dynamo_raw", "dynamo_opset23"}) {
    SCOPED_TRACE(exporter);
    CompileOptions options;
    options.training = TrainingOptions{};
    Diagnostics diagnostics;
    absl::StatusOr<std::unique_ptr<Graph>> graph =
        compile_file(zoo_path(str_cat("padded_decoder.", exporter, ".onnx")), options, diagnostics);
    ASSERT_TRUE(graph.ok()) << graph.status();
    const Graph* step = (*graph)->training_step();
    ASSERT_NE(step, nullptr);
    int fused = 0;
    int safe = 0;
    for (const Node* node : step->node_list()) {
      EXPECT_NE(node->op_type(), "Dropout") << node->describe();
      if (node->domain() != kAmpcDomain || node->op_type() != "Attention") continue;
      ++fused;
      if (node->int_attr("safe") != 0) ++safe;
    }
    EXPECT_EQ(fused, 2);
    EXPECT_EQ(safe, 1);
  }
}

// "file/optimizer/precision", as tests/runtime/zoo_known_deviations.txt names a run.
std::string run_name(const ZooRun& r) {
  return str_cat(r.file, "/", r.optimizer, "/", r.precision);
}

// Runs that do not match PyTorch yet, each with what is known: NAME: reason.
std::map<std::string, std::string> known_deviations() {
  std::ifstream in(testing::source_path("tests/runtime/zoo_known_deviations.txt"));
  std::map<std::string, std::string> known;
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line[0] == '#') continue;
    const size_t colon = line.find(": ");
    if (colon != std::string::npos) known[line.substr(0, colon)] = line.substr(colon + 2);
  }
  return known;
}

// Cuts batch `index` out of `all` ([N, ...]).
Tensor batch_slice(const Tensor& all, int64_t index) {
  TensorType type{all.dtype(), Shape(all.shape().begin() + 1, all.shape().end())};
  const int64_t size = type.byte_size();
  std::vector<uint8_t> slice(all.bytes().begin() + index * size,
                             all.bytes().begin() + (index + 1) * size);
  return Tensor(type, std::move(slice));
}

// An export that is not the training model (the default exporter's optimizer folds weights
// into constants and a causal mask into an initializer of 0 and -inf) still trains as the model
// it is: default trainable set, finite losses. Its batches are its model's, when they are plain
// arrays.
TEST(Zoo, UnfaithfulExportsStillTrainWithFiniteLosses) {
  std::ifstream in(zoo_path("manifest.json"));
  ASSERT_TRUE(in);
  const nlohmann::json manifest = nlohmann::json::parse(in);
  int trained = 0;
  for (const nlohmann::json& entry : manifest.at("entries")) {
    if (entry.at("status") != "unfaithful") continue;
    const std::string file = entry.at("file");
    absl::StatusOr<std::map<std::string, Tensor>> ref =
        read_npz(zoo_path(entry.at("model").get<std::string>() + ".train_ref.npz"));
    ASSERT_TRUE(ref.ok()) << ref.status();
    if (ref->contains("batch.x.scale")) continue;
    CompileOptions options;
    options.training = TrainingOptions{};
    options.training->optimizer.kind = OptimizerOptions::Kind::kSgd;
    options.training->optimizer.momentum = 0.9f;
    options.training->lr = 0.01f;
    Diagnostics diagnostics;
    absl::StatusOr<std::unique_ptr<Graph>> graph =
        compile_file(zoo_path(file), options, diagnostics);
    ASSERT_TRUE(graph.ok()) << file << ": " << graph.status();
    absl::StatusOr<std::unique_ptr<TrainingSession>> session =
        TrainingSession::create(*std::move(graph));
    ASSERT_TRUE(session.ok()) << file << ": " << session.status();
    for (int64_t step = 0; step < 3; ++step) {
      std::map<std::string, Tensor> batch;
      for (const auto& [name, all] : *ref) {
        if (name.starts_with("batch.")) batch[name.substr(6)] = batch_slice(all, step);
      }
      absl::StatusOr<StepStats> stats = (*session)->step(batch, 0.01);
      ASSERT_TRUE(stats.ok()) << file << ": " << stats.status();
      EXPECT_TRUE(std::isfinite(stats->loss)) << file << " step " << step;
    }
    ++trained;
  }
  EXPECT_GE(trained, 4);
}

// PyTorch's dynamo exporter records which initializers are parameters and which are buffers (the
// exported program's graph signature, in the graph's metadata): from its faithful exports, ampc
// trains exactly PyTorch's parameters with no --trainable (float buffers such as a rotary or
// position table, and BatchNorm's statistics, stay as they are).
TEST(Zoo, DynamoExportsTrainPyTorchsParametersByDefault) {
  std::ifstream in(zoo_path("manifest.json"));
  ASSERT_TRUE(in);
  const nlohmann::json manifest = nlohmann::json::parse(in);
  int checked = 0;
  for (const nlohmann::json& entry : manifest.at("entries")) {
    const std::string exporter = entry.at("exporter");
    if (entry.at("status") != "ok" || !exporter.starts_with("dynamo")) continue;
    const std::string file = entry.at("file");
    CompileOptions options;
    options.training = TrainingOptions{};
    options.training->optimizer.kind = OptimizerOptions::Kind::kSgd;
    Diagnostics diagnostics;
    absl::StatusOr<std::unique_ptr<Graph>> graph =
        compile_file(zoo_path(file), options, diagnostics);
    ASSERT_TRUE(graph.ok()) << file << ": " << graph.status();
    std::vector<std::string> trained;
    for (const auto& node : (*graph)->training_step()->nodes()) {
      if (node->op_type() == "SGD") trained.push_back(node->operand(0)->name());
    }
    std::sort(trained.begin(), trained.end());
    std::vector<std::string> parameters = entry.at("parameters");
    std::sort(parameters.begin(), parameters.end());
    EXPECT_EQ(trained, parameters) << file;
    ++checked;
  }
  EXPECT_GE(checked, 10);
}

// The arrays `<prefix><input>` of a train_ref.npz by input: float ones as stored, or int8
// multiples of `<prefix><input>.scale`.
std::map<std::string, Tensor> arrays_of(const std::map<std::string, Tensor>& ref,
                                        const std::string& prefix) {
  std::map<std::string, Tensor> arrays;
  for (const auto& [name, tensor] : ref) {
    if (!name.starts_with(prefix) || name.ends_with(".scale")) continue;
    const std::string input = name.substr(prefix.size());
    auto scale = ref.find(name + ".scale");
    if (scale == ref.end()) {
      arrays[input] = tensor;
      continue;
    }
    Tensor values(TensorType{DType::kF32, tensor.shape()});
    const double factor = scale->second.element_as_double(0);
    for (int64_t i = 0; i < tensor.num_elements(); ++i) {
      values.set_element(i, tensor.element_as_double(i) * factor);
    }
    arrays[input] = std::move(values);
  }
  return arrays;
}

class ZooTraining : public ::testing::TestWithParam<ZooRun> {};

TEST_P(ZooTraining, MatchesPyTorchsF32Losses) {
  const ZooRun& run = GetParam();
  const std::map<std::string, std::string> known = known_deviations();
  if (auto it = known.find(run_name(run)); it != known.end()) {
    GTEST_SKIP() << "known deviation (tests/runtime/zoo_known_deviations.txt): " << it->second;
  }
  absl::StatusOr<std::map<std::string, Tensor>> ref =
      read_npz(zoo_path(run.model + ".train_ref.npz"));
  ASSERT_TRUE(ref.ok()) << ref.status();

  // The optimizers of models/export_zoo.py.
  CompileOptions options;
  options.training = TrainingOptions{};
  // Float buffers (rotary tables) are initializers too; PyTorch trains only its parameters.
  std::vector<std::string> exact;
  for (const std::string& name : run.parameters) {
    std::string escaped;
    for (char c : name) {
      if (std::string_view(".[]()*+?^$|\\{}").find(c) != std::string_view::npos) escaped += '\\';
      escaped += c;
    }
    exact.push_back(escaped);
  }
  options.training->autodiff.trainable = str_cat("^(", str_join(exact, "|"), ")$");
  OptimizerOptions& optimizer = options.training->optimizer;
  if (run.optimizer == "adamw") {
    optimizer.kind = OptimizerOptions::Kind::kAdamW;
    optimizer.weight_decay = 0.01f;
  } else {
    optimizer.kind = OptimizerOptions::Kind::kSgd;
    optimizer.momentum = 0.9f;
    optimizer.weight_decay = 1e-4f;
  }
  options.training->lr = static_cast<float>(ref->at(run.optimizer + ".lr").element_as_double(0));
  if (run.precision != "fp32") {
    options.mixed_precision = MixedPrecisionOptions{};
    options.mixed_precision->policy.low = run.precision == "fp16" ? DType::kF16 : DType::kBF16;
  }
  if (run.precision == "fp16") {
    // GradScaler's first scale, 65536, overflows these small models' gradients and skips the
    // first step, exactly as PyTorch's would (tests/runtime/loss_scale tests that); the f32
    // reference skips nothing, so these runs start where no step overflows.
    options.training->loss_scale = LossScaleOptions{};
    options.training->loss_scale->init = 1024;
  }
  Diagnostics diagnostics;
  absl::StatusOr<std::unique_ptr<Graph>> graph =
      compile_file(zoo_path(run.file), options, diagnostics);
  ASSERT_TRUE(graph.ok()) << graph.status();
  absl::StatusOr<std::string> bytes = export_onnx_bytes(**graph);
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  absl::StatusOr<std::unique_ptr<Graph>> imported = import_onnx_bytes(*bytes, run.file);
  ASSERT_TRUE(imported.ok()) << imported.status();
  absl::StatusOr<std::unique_ptr<TrainingSession>> session =
      TrainingSession::create(*std::move(imported));
  ASSERT_TRUE(session.ok()) << session.status();

  // PyTorch's own f32 and f64 runs part ways this much: a bar below ten times that cannot tell
  // an error from rounding.
  const double tolerance = run.precision == "fp32" ? 1e-4 : 3e-2;
  const double spread = ref->at(run.optimizer + ".f32_vs_f64").element_as_double(0);
  if (spread > tolerance / 10) {
    GTEST_SKIP() << "PyTorch's f32 and f64 runs of this recipe differ by " << spread
                 << " relative: too chaotic to compare at " << tolerance;
  }

  const std::map<std::string, Tensor> batches = arrays_of(*ref, "batch.");
  ASSERT_FALSE(batches.empty());
  const Tensor& losses = ref->at(run.optimizer + ".loss");
  for (int64_t step = 0; step < losses.num_elements(); ++step) {
    std::map<std::string, Tensor> batch;
    for (const auto& [name, all] : batches) batch[name] = batch_slice(all, step % all.shape()[0]);
    absl::StatusOr<StepStats> stats = (*session)->step(batch, options.training->lr);
    ASSERT_TRUE(stats.ok()) << stats.status();
    ASSERT_FALSE(stats->found_inf)
        << "step " << step << " overflowed at scale " << stats->loss_scale;
    const double want = losses.element_as_double(step);
    EXPECT_LE(std::abs(stats->loss - want), tolerance * std::abs(want))
        << "step " << step << ": loss " << stats->loss << ", PyTorch " << want;
  }

  // The trained model, exported with its loss and loaded as `ampc run` loads it, gives the
  // eval-mode loss PyTorch's trained model has on the held-out batch (BatchNorm on its running
  // statistics), where PyTorch's f32 and f64 runs agree well below the bar (AdamW moves a bias
  // before a BatchNorm by the rounding noise of its zero gradient: training losses cannot see
  // it, eval losses can).
  const testing::ScopedTempDir folder("ampc_zoo_");
  const fs::path exported = folder.path / "trained.onnx";
  const absl::Status written = (*session)->export_inference_model(
      exported.string(), {}, TrainingSession::ExportedLoss::kKept);
  ASSERT_TRUE(written.ok()) << written;
  absl::StatusOr<std::unique_ptr<InferenceSession>> eval = InferenceSession::load(exported);
  ASSERT_TRUE(eval.ok()) << eval.status();
  absl::StatusOr<std::map<std::string, Tensor>> outputs = (*eval)->run(arrays_of(*ref, "eval."));
  ASSERT_TRUE(outputs.ok()) << outputs.status();
  const double eval_loss = outputs->at((*session)->loss_name()).element_as_double(0);
  if (run.eval_f32_vs_f64 > tolerance / 10) {
    std::printf("eval loss not compared: PyTorch's f32 and f64 eval losses differ by %g\n",
                run.eval_f32_vs_f64);
  } else {
    EXPECT_LE(std::abs(eval_loss - run.eval_loss), tolerance * std::abs(run.eval_loss))
        << "eval loss " << eval_loss << ", PyTorch " << run.eval_loss;
  }
}

INSTANTIATE_TEST_SUITE_P(Exports, ZooTraining, ::testing::ValuesIn(faithful_runs()),
                         [](const auto& info) {
                           std::string name = str_cat(info.param.file, "_", info.param.optimizer,
                                                      "_", info.param.precision);
                           for (char& c : name) {
                             if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
                           }
                           return name;
                         });

}  // namespace
}  // namespace ampc::runtime
