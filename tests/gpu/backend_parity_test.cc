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
#include <set>

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
      "Exp", "Log",  "Tanh", "Sigmoid", "Erf", "Gelu", "Softplus",
      "Elu", "Selu", "Celu", "Mish",    "Sin", "Cos",  "Pow"};
  static const std::set<std::string> accumulating = {"MatMul",
                                                     "Gemm",
                                                     "Conv",
                                                     "BatchNormalization",
                                                     "ReduceSum",
                                                     "ReduceMean",
                                                     "GlobalAveragePool",
                                                     "AveragePool",
                                                     "CumSum",
                                                     "Softmax",
                                                     "LogSoftmax",
                                                     "LayerNormalization",
                                                     "SoftmaxCrossEntropyLoss",
                                                     "NegativeLogLikelihoodLoss"};
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

TEST(BackendParity, EveryOpSampleRunsOnCudaAsOnTheCpu) {
  if (!testing::cuda_device_present()) GTEST_SKIP() << "no usable CUDA device";
  std::shared_ptr<runtime::Backend> cpu = *runtime::create_backend(runtime::Device::kCpu);
  std::shared_ptr<runtime::Backend> cuda = *runtime::create_backend(runtime::Device::kCuda);
  std::mt19937 rng(20261125);
  int compared = 0;
  std::vector<std::string> failures;
  for (const OpDef* def : OpRegistry::global().all()) {
    if (def->domain != kOnnxDomain) continue;
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
  EXPECT_GT(compared, 200);
  EXPECT_TRUE(failures.empty()) << failures.size() << " differ:\n" << str_join(failures, "\n");
}

}  // namespace
}  // namespace ampc
