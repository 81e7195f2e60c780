// The CUDA backend against the CPU reference, end to end (label `gpu`; skipped without a GPU):
// the three example models' forward pass (eval graph: loss and logits) in fp32, fp16 and bf16
// compiles, and Dropout's masks, which must be the CPU's bit for bit for the same seed, random
// stream and element.
#include <cmath>

#include "compiler/compile.h"
#include "compiler/strings.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "runtime/npy.h"
#include "runtime/session.h"
#include "tests/test_util.h"

namespace ampc::runtime {
namespace {

#define SKIP_WITHOUT_GPU() \
  if (!testing::cuda_device_present()) GTEST_SKIP() << "no usable CUDA device"

// The model compiled for inference with every node's precision decided for `low` (f32: as
// exported).
std::unique_ptr<Graph> compiled(const std::string& model, DType low) {
  CompileOptions options;
  if (low != DType::kF32) {
    options.mixed_precision = MixedPrecisionOptions{};
    options.mixed_precision->policy.low = low;
    options.mixed_precision->policy.low_source = "test";
  }
  Diagnostics diagnostics;
  absl::StatusOr<std::unique_ptr<Graph>> graph =
      compile_file(testing::source_path("models/" + model + ".onnx"), options, diagnostics);
  EXPECT_TRUE(graph.ok()) << graph.status();
  return graph.ok() ? *std::move(graph) : nullptr;
}

// models/<model>.ref.npz holds the inputs PyTorch was given, by graph input name.
std::map<std::string, Tensor> reference_inputs(const std::string& model) {
  std::map<std::string, Tensor> inputs;
  absl::StatusOr<std::map<std::string, Tensor>> arrays =
      read_npz(testing::source_path("models/" + model + ".ref.npz"));
  EXPECT_TRUE(arrays.ok()) << arrays.status();
  if (!arrays.ok()) return inputs;
  for (auto& [name, tensor] : *arrays) {
    if (!name.starts_with("output.") && !name.starts_with("grad.")) inputs[name] = tensor;
  }
  return inputs;
}

std::map<std::string, Tensor> run_on(Device device, const std::string& model, DType low) {
  std::unique_ptr<Graph> graph = compiled(model, low);
  if (graph == nullptr) return {};
  absl::StatusOr<std::unique_ptr<InferenceSession>> session =
      InferenceSession::create(std::move(graph), SessionOptions{.device = device});
  EXPECT_TRUE(session.ok()) << device_name(device) << ": " << session.status();
  if (!session.ok()) return {};
  absl::StatusOr<std::map<std::string, Tensor>> outputs = (*session)->run(reference_inputs(model));
  EXPECT_TRUE(outputs.ok()) << device_name(device) << ": " << outputs.status();
  return outputs.ok() ? *outputs : std::map<std::string, Tensor>{};
}

struct ModelCase {
  std::string model;
  DType low;
};

void PrintTo(const ModelCase& c, std::ostream* os) { *os << c.model << " " << dtype_name(c.low); }

class CudaModelForward : public ::testing::TestWithParam<ModelCase> {};

// GEMMs and convolutions sum in another order on the GPU; the outputs (f32 logits, the f32 loss)
// agree within a tolerance that grows with the low dtype's rounding of the activations on the way.
TEST_P(CudaModelForward, OutputsEqualTheCpusWithinTheDtypesTolerance) {
  SKIP_WITHOUT_GPU();
  const auto& [model, low] = GetParam();
  const std::map<std::string, Tensor> cpu = run_on(Device::kCpu, model, low);
  const std::map<std::string, Tensor> cuda = run_on(Device::kCuda, model, low);
  ASSERT_FALSE(cpu.empty());
  ASSERT_EQ(cpu.size(), cuda.size());
  const double rtol = low == DType::kF32 ? 1e-4 : low == DType::kF16 ? 1e-2 : 4e-2;
  for (const auto& [name, want] : cpu) {
    const Tensor& got = cuda.at(name);
    ASSERT_EQ(got.type(), want.type()) << name;
    double scale = 0;
    for (int64_t i = 0; i < want.num_elements(); ++i) {
      scale = std::max(scale, std::abs(want.element_as_double(i)));
    }
    for (int64_t i = 0; i < want.num_elements(); ++i) {
      EXPECT_NEAR(got.element_as_double(i), want.element_as_double(i), rtol * (scale + 1e-3))
          << model << " " << dtype_name(low) << " output " << name << " element " << i;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    ExampleModels, CudaModelForward,
    ::testing::Values(ModelCase{"mlp", DType::kF32}, ModelCase{"mlp", DType::kF16},
                      ModelCase{"mlp", DType::kBF16}, ModelCase{"cnn", DType::kF32},
                      ModelCase{"cnn", DType::kF16}, ModelCase{"cnn", DType::kBF16},
                      ModelCase{"tiny_gpt", DType::kF32}, ModelCase{"tiny_gpt", DType::kF16},
                      ModelCase{"tiny_gpt", DType::kBF16}),
    [](const ::testing::TestParamInfo<ModelCase>& info) {
      return info.param.model + "_" + std::string(dtype_name(info.param.low));
    });

// Dropout in training mode over 100,003 elements (not a multiple of any vector width), in each
// float dtype, for two random streams: output and mask bit for bit the CPU's.
TEST(CudaDropout, MasksAndOutputsAreTheCpusBitForBit) {
  SKIP_WITHOUT_GPU();
  for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16}) {
    const std::string type = str_cat(dtype_name(dtype), "[100003]");
    const std::string text =
        str_cat("graph g(%x: ", type, ") {\n", "  init %ratio: f32[] = [0.3]\n",
                "  init %training: bool[] = [true]\n",
                "  %y, %mask = Dropout<seed=7>(%x, %ratio, %training) : ", type, ", bool[100003]\n",
                "  return %y, %mask\n}\n");
    std::vector<double> values(100003);
    for (size_t i = 0; i < values.size(); ++i) values[i] = std::sin(0.01 * static_cast<double>(i));
    const Tensor x = Tensor::from_doubles(dtype, {100003}, values);
    for (uint64_t stream : {0u, 12345u}) {
      std::map<std::string, Tensor> outputs[2];
      for (Device device : {Device::kCpu, Device::kCuda}) {
        std::unique_ptr<Graph> graph = testing::parse_or_fail(text);
        ASSERT_NE(graph, nullptr);
        absl::StatusOr<std::unique_ptr<InferenceSession>> session =
            InferenceSession::create(std::move(graph), SessionOptions{.device = device});
        ASSERT_TRUE(session.ok()) << session.status();
        (*session)->set_random_stream(stream);
        absl::StatusOr<std::map<std::string, Tensor>> out = (*session)->run({{"x", x}});
        ASSERT_TRUE(out.ok()) << out.status();
        outputs[device == Device::kCuda] = *out;
      }
      EXPECT_EQ(outputs[1].at("mask"), outputs[0].at("mask")) << dtype_name(dtype) << " " << stream;
      EXPECT_EQ(outputs[1].at("y"), outputs[0].at("y")) << dtype_name(dtype) << " " << stream;
    }
  }
}

}  // namespace
}  // namespace ampc::runtime
