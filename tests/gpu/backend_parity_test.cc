// The CUDA backend against the CPU reference, op by op (label `gpu`; skipped without a GPU).
//
// Every sample of every ONNX op (ops/*.cc) becomes a one-node graph, in each of f32, f16 and bf16
// (the sample's f32 operands turned into the dtype, but for the operands the op keeps in f32, such
// as BatchNormalization's statistics), with the same random inputs on both backends. The outputs
// are compared under the numeric contract (docs/architecture.md):
//   - bit-exact: casts, data movement, comparisons and element-wise ops made of single IEEE
//     operations (NaN equals NaN);
//   - transcendentals: within 4 ulp of f32 in f32 (2 ulp for the function, the rest for the few
//     roundings around it), and 1 unit of the dtype after rounding to f16 or bf16;
//   - reductions, GEMMs, convolutions, normalizations and losses: within sqrt(K) * 4 * 2^-24 of
//     the output's scale (K the longest input, a bound on the reduction length), plus one unit of
//     the output dtype.
#include <cmath>
#include <cstdlib>
#include <random>
#include <set>

#include "absl/strings/str_split.h"
#include "compiler/op_def.h"
#include "compiler/strings.h"
#include "gtest/gtest.h"
#include "runtime/interpreter.h"
#include "runtime/kernel.h"
#include "tests/op_sample_graph.h"
#include "tests/test_util.h"

namespace ampc {
namespace {

enum class Contract { kExact, kTranscendental, kAccumulating };

Contract contract_of(const std::string& op) {
  static const std::set<std::string> transcendental = {
      "Exp", "Log", "Tanh", "Sigmoid", "Erf", "Gelu", "Softplus", "Elu", "Selu", "Celu", "Mish",
      "Sin", "Cos", "Tan", "Asin", "Acos", "Atan", "Sinh", "Cosh", "Asinh", "Acosh", "Atanh", "Pow",
      // Box-Muller's log and cosine in f64 (runtime/random_math.h).
      "RandomNormal", "RandomNormalLike",
      // Adam's bias corrections are pow in f64 (CUDA's within 2 ulp of glibc's).
      "Adam", "GeluGrad"};
  static const std::set<std::string> accumulating = {
      "MatMul", "Gemm", "Conv", "BatchNormalization", "ReduceSum", "ReduceMean",
      "GlobalAveragePool", "AveragePool", "CumSum", "Softmax", "LogSoftmax", "LayerNormalization",
      "SoftmaxCrossEntropyLoss", "NegativeLogLikelihoodLoss", "GlobalNorm", "SoftmaxGrad",
      "LogSoftmaxGrad", "SoftmaxCrossEntropyLossGrad", "NegativeLogLikelihoodLossGrad",
      "LayerNormalizationGrad", "BatchNormalizationGrad", "ConvGradData", "ConvGradFilter",
      // Tiled: its sums in another order.
      "Attention", "AttentionGrad"};
  if (transcendental.contains(op)) return Contract::kTranscendental;
  if (accumulating.contains(op)) return Contract::kAccumulating;
  return Contract::kExact;
}

// One unit in the last place of `dtype` at |x|.
double ulp(DType dtype, double x) {
  const int mantissa = dtype == DType::kF16 ? 10 : dtype == DType::kBF16 ? 7 : 23;
  const int min_exponent = dtype == DType::kF16 ? -14 : -126;
  int exponent = 0;
  std::frexp(x, &exponent);
  return std::ldexp(1.0, std::max(exponent - 1, min_exponent) - mantissa);
}

// Empty when `got` (CUDA) agrees with `want` (CPU) under `contract`; else what differs.
std::string compare(const Tensor& got, const Tensor& want, Contract contract, int64_t k) {
  if (got.type() != want.type()) {
    return str_cat("type ", type_to_string(got.type()), " vs ", type_to_string(want.type()));
  }
  const DType dtype = want.dtype();
  if (!is_float(dtype) || contract == Contract::kExact) {
    return got == want ? std::string() : std::string("bits differ");
  }
  double scale = 0;
  for (int64_t i = 0; i < want.num_elements(); ++i) {
    const double w = want.element_as_double(i);
    if (std::isfinite(w)) scale = std::max(scale, std::abs(w));
  }
  for (int64_t i = 0; i < want.num_elements(); ++i) {
    const double g = got.element_as_double(i);
    const double w = want.element_as_double(i);
    if (std::isnan(w) || std::isinf(w)) {
      if (!(std::isnan(w) ? std::isnan(g) : g == w))
        return str_cat("element ", i, ": ", g, " vs ", w);
      continue;
    }
    double tolerance;
    if (contract == Contract::kTranscendental) {
      tolerance = dtype == DType::kF32 ? 4 * ulp(DType::kF32, w) + 1e-7 : ulp(dtype, w);
    } else {
      tolerance = std::sqrt(static_cast<double>(k)) * 4 * 0x1p-24 * (scale + 1) +
                  (dtype == DType::kF32 ? 0 : ulp(dtype, w));
    }
    if (!(std::abs(g - w) <= tolerance)) {
      return str_cat("element ", i, ": cuda ", g, ", cpu ", w, " (tolerance ", tolerance, ")");
    }
  }
  return "";
}

// The ops to compare: all, or those named in AMPC_PARITY_OPS ("ReduceSum,Softmax"), so a slow
// tool such as compute-sanitizer's racecheck can be pointed at a few kernels.
std::set<std::string> selected_ops() {
  const char* list = std::getenv("AMPC_PARITY_OPS");
  if (list == nullptr || *list == '\0') return {};
  std::vector<std::string> ops = absl::StrSplit(list, ',', absl::SkipEmpty());
  return {ops.begin(), ops.end()};
}

// f64 is outside the CUDA backend's types (f32, f16, bf16 and the integers, docs/architecture.md):
// a sample that keeps an f64 operand is listed, not compared.
bool has_f64_operand(const Node& node) {
  for (const Value* operand : node.operands()) {
    if (operand != nullptr && operand->type().dtype == DType::kF64) return true;
  }
  return false;
}

TEST(BackendParity, EveryOpSampleRunsOnCudaAsOnTheCpu) {
  if (!testing::cuda_device_present()) GTEST_SKIP() << "no usable CUDA device";
  const std::set<std::string> only = selected_ops();
  std::shared_ptr<runtime::Backend> cpu = *runtime::create_backend(runtime::Device::kCpu);
  std::shared_ptr<runtime::Backend> cuda = *runtime::create_backend(runtime::Device::kCuda);
  std::mt19937 rng(20261125);
  int compared = 0;
  std::vector<std::string> failures;
  for (const OpDef* def : OpRegistry::global().all()) {
    // The ampc domain's ops (gradients, optimizer, loss scaling) where they have a CUDA kernel;
    // tests/tools/ops_cli_test.cc names those still to be written.
    const bool ampc_op = def->domain == kAmpcDomain;
    if ((def->domain != kOnnxDomain && !ampc_op) || (!only.empty() && !only.contains(def->name))) {
      continue;
    }
    for (const OpSample& sample : def->samples) {
      for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16}) {
        const std::string what =
            str_cat(def->name, " sample '", sample.name, "' in ", dtype_name(dtype));
        testing::SampleGraph built = testing::sample_graph(*def, sample, dtype, rng);
        if (built.graph == nullptr) continue;
        const Node& node = *built.graph->nodes().front();
        if (!runtime::KernelRegistry::global().resolve(node, runtime::Device::kCpu).ok()) {
          continue;  // the dtype has no CPU kernel either
        }
        if (ampc_op &&
            !runtime::KernelRegistry::global().resolve(node, runtime::Device::kCuda).ok()) {
          continue;
        }
        if (has_f64_operand(node)) {
          std::printf("not compared (f64): %s\n", what.c_str());
          continue;
        }
        absl::StatusOr<std::vector<Tensor>> want =
            runtime::interpret_graph(*built.graph, built.inputs, *cpu);
        absl::StatusOr<std::vector<Tensor>> got =
            runtime::interpret_graph(*built.graph, built.inputs, *cuda);
        if (!want.ok()) continue;  // a sample the CPU rejects on these values
        if (!got.ok()) {
          failures.push_back(str_cat(what, ": ", got.status().message()));
          continue;
        }
        int64_t k = 1;
        for (const Tensor& input : built.inputs) k = std::max(k, input.num_elements());
        for (size_t o = 0; o < want->size(); ++o) {
          const std::string difference = compare((*got)[o], (*want)[o], contract_of(def->name), k);
          if (!difference.empty())
            failures.push_back(str_cat(what, " output ", o, ": ", difference));
        }
        ++compared;
      }
    }
  }
  std::printf("compared %d samples on cuda and cpu\n", compared);
  EXPECT_GT(compared, only.empty() ? 200 : 0);
  EXPECT_TRUE(failures.empty()) << failures.size() << " differ:\n" << str_join(failures, "\n");
}

// The scatters apply duplicate indices in index order on both backends, so even without a
// reduction (the last one wins) and with f16 rounding each update, CUDA gives the CPU's bits.
TEST(BackendParity, ScattersWithDuplicateIndicesMatchTheCpuBitForBit) {
  if (!testing::cuda_device_present()) GTEST_SKIP() << "no usable CUDA device";
  std::shared_ptr<runtime::Backend> cpu = *runtime::create_backend(runtime::Device::kCpu);
  std::shared_ptr<runtime::Backend> cuda = *runtime::create_backend(runtime::Device::kCuda);
  std::mt19937 rng(20261202);
  std::uniform_int_distribution<int> pick(-3, 2);
  std::uniform_real_distribution<double> value(-2, 2);
  for (const char* reduction : {"none", "add", "mul", "max", "min"}) {
    for (const char* dtype : {"f32", "f16", "bf16"}) {
      SCOPED_TRACE(str_cat(reduction, " ", dtype));
      std::unique_ptr<Graph> graph = testing::parse_or_fail(
          str_cat("graph g(%x: ", dtype, "[3,64], %i: i64[6,64], %u: ", dtype,
                  "[6,64], %t: i64[40,1], %v: ", dtype,
                  "[40,64]) opset(18) {\n  %a = ScatterElements<reduction=\"", reduction,
                  "\">(%x, %i, %u) : ", dtype, "[3,64]\n  %b = ScatterND<reduction=\"", reduction,
                  "\">(%x, %t, %v) : ", dtype, "[3,64]\n  return %a, %b\n}"));
      ASSERT_NE(graph, nullptr);
      std::vector<Tensor> inputs;
      for (const Value* input : graph->inputs()) {
        Tensor t(input->type());
        for (int64_t k = 0; k < t.num_elements(); ++k) {
          if (is_float(t.dtype())) {
            t.set_element(k, value(rng));
          } else {
            t.set_element_i64(k, pick(rng));  // a row of 3, often repeated
          }
        }
        inputs.push_back(std::move(t));
      }
      absl::StatusOr<std::vector<Tensor>> want = runtime::interpret_graph(*graph, inputs, *cpu);
      absl::StatusOr<std::vector<Tensor>> got = runtime::interpret_graph(*graph, inputs, *cuda);
      ASSERT_TRUE(want.ok()) << want.status();
      ASSERT_TRUE(got.ok()) << got.status();
      for (size_t o = 0; o < want->size(); ++o) {
        EXPECT_EQ(compare((*got)[o], (*want)[o], Contract::kExact, 1), "") << "output " << o;
      }
    }
  }
}

// A bad index is reported through the device error word, naming the node, as on the CPU.
TEST(BackendParity, OutOfRangeIndicesAreErrorsOnCuda) {
  if (!testing::cuda_device_present()) GTEST_SKIP() << "no usable CUDA device";
  std::shared_ptr<runtime::Backend> cuda = *runtime::create_backend(runtime::Device::kCuda);
  const char* const graphs[] = {
      R"(graph g(%x: f32[2,3], %i: i64[2,2]) {
        %y = GatherElements<axis=1>(%x, %i) : f32[2,2]
        return %y
      })",
      R"(graph g(%x: f32[2,3], %i: i64[2,2]) {
        %y = GatherND(%x, %i) : f32[2]
        return %y
      })",
  };
  for (const char* text : graphs) {
    std::unique_ptr<Graph> graph = testing::parse_or_fail(text);
    ASSERT_NE(graph, nullptr);
    const Tensor data = Tensor::from_f32({2, 3}, {0, 1, 2, 3, 4, 5});
    absl::StatusOr<std::vector<Tensor>> out =
        runtime::interpret_graph(*graph, {data, Tensor::from_i64({2, 2}, {0, 1, 1, 3})}, *cuda);
    ASSERT_FALSE(out.ok()) << text;
    EXPECT_NE(out.status().message().find("index 3 (element 3 of the indices) is out of range"),
              std::string::npos)
        << out.status();
  }
  std::unique_ptr<Graph> scatter =
      testing::parse_or_fail(R"(graph g(%x: f32[4], %i: i64[2,1], %u: f32[2]) {
    %y = ScatterND(%x, %i, %u) : f32[4]
    return %y
  })");
  ASSERT_NE(scatter, nullptr);
  absl::StatusOr<std::vector<Tensor>> out =
      runtime::interpret_graph(*scatter,
                               {Tensor::from_f32({4}, {0, 1, 2, 3}),
                                Tensor::from_i64({2, 1}, {-5, 0}), Tensor::from_f32({2}, {1, 2})},
                               *cuda);
  ASSERT_FALSE(out.ok());
  EXPECT_NE(out.status().message().find("ScatterND"), std::string::npos) << out.status();
}

// The random ops draw the CPU's numbers on CUDA: uniform and Bernoulli draws bit for bit (the
// same hash of seed, stream and element, rounded once), normal draws within the transcendental
// contract; a probability outside [0, 1] is an error through the device error word.
TEST(BackendParity, RandomDrawsAreTheCpus) {
  if (!testing::cuda_device_present()) GTEST_SKIP() << "no usable CUDA device";
  std::shared_ptr<runtime::Backend> cpu = *runtime::create_backend(runtime::Device::kCpu);
  std::shared_ptr<runtime::Backend> cuda = *runtime::create_backend(runtime::Device::kCuda);
  std::unique_ptr<Graph> graph = testing::parse_or_fail(R"(graph g(%p: f32[4096]) opset(17) {
    %u32 = RandomUniform<shape=[4096], seed=1.0>() : f32[4096]
    %u16 = RandomUniform<shape=[4096], dtype=f16, low=-2.0, high=3.0>() : f16[4096]
    %ub = RandomUniformLike<dtype=bf16, seed=2.0>(%p) : bf16[4096]
    %b = Bernoulli<seed=3.0>(%p) : f32[4096]
    %bh = Bernoulli<dtype=f16>(%p) : f16[4096]
    %n32 = RandomNormal<shape=[4096], seed=4.0, mean=1.0, scale=2.0>() : f32[4096]
    %nb = RandomNormalLike<dtype=bf16>(%p) : bf16[4096]
    return %u32, %u16, %ub, %b, %bh, %n32, %nb
  })");
  ASSERT_NE(graph, nullptr);
  std::mt19937 rng(20261128);
  std::uniform_real_distribution<float> probability(0, 1);
  std::vector<float> p(4096);
  for (float& v : p) v = probability(rng);
  const std::vector<Tensor> inputs = {Tensor::from_f32({4096}, p)};
  absl::StatusOr<std::vector<Tensor>> want = runtime::interpret_graph(*graph, inputs, *cpu);
  absl::StatusOr<std::vector<Tensor>> got = runtime::interpret_graph(*graph, inputs, *cuda);
  ASSERT_TRUE(want.ok()) << want.status();
  ASSERT_TRUE(got.ok()) << got.status();
  for (size_t o = 0; o < want->size(); ++o) {
    const Contract contract = o >= 5 ? Contract::kTranscendental : Contract::kExact;
    EXPECT_EQ(compare((*got)[o], (*want)[o], contract, 1), "") << "output " << o;
  }
  p[7] = 1.5f;
  absl::StatusOr<std::vector<Tensor>> bad =
      runtime::interpret_graph(*graph, {Tensor::from_f32({4096}, p)}, *cuda);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("element 7 of input 0"), std::string::npos) << bad.status();
}

// Integer Pow of 0 to a negative power: an error on both backends, through the device error word
// on CUDA.
TEST(BackendParity, IntegerPowOfZeroToANegativePowerIsAnErrorOnCuda) {
  if (!testing::cuda_device_present()) GTEST_SKIP() << "no usable CUDA device";
  std::shared_ptr<runtime::Backend> cuda = *runtime::create_backend(runtime::Device::kCuda);
  std::unique_ptr<Graph> graph = testing::parse_or_fail(R"(graph g(%x: i64[3], %e: i64[3]) {
    %y = Pow(%x, %e) : i64[3]
    return %y
  })");
  ASSERT_NE(graph, nullptr);
  absl::StatusOr<std::vector<Tensor>> out = runtime::interpret_graph(
      *graph, {Tensor::from_i64({3}, {2, 0, 5}), Tensor::from_i64({3}, {3, -2, 1})}, *cuda);
  ASSERT_FALSE(out.ok());
  EXPECT_NE(out.status().message().find("Pow of 0 to a negative power at output element 1"),
            std::string::npos)
      << out.status();
}

}  // namespace
}  // namespace ampc
