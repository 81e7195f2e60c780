// ampc.SGD, ampc.Adam, ampc.GlobalNorm and ampc.ClipCoefficient on the CPU backend against
// hand-computed values, PyTorch's update rules transcribed here in f64 (plain double arithmetic,
// no fused operations), and f32 results recorded from PyTorch.
//
// The recorded tables came from running PyTorch 2.15.0 (CPU, AVX2) once by hand:
// torch.optim.SGD / Adam / AdamW with foreach=False on a 19-element parameter for three steps,
// and torch.linalg.vector_norm / torch.nn.utils.get_total_norm / clip_grad_norm_'s coefficient,
// on the `pattern` values below, each lr a Python float equal to the f32 lr given here.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "compiler/strings.h"
#include "gtest/gtest.h"
#include "tests/runtime/cpu/kernel_test_util.h"

namespace ampc {
namespace {

using testing::as_floats;
using testing::expect_near_all;
using testing::on_cpu_threads;
using testing::random_values;
using testing::run_node;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

// ((i * 37 + seed * 101) % 61 - 30) / 13 * scale, rounded to f32: what the PyTorch runs used.
std::vector<float> pattern(int64_t n, int seed, double scale) {
  std::vector<float> values(n);
  for (int64_t i = 0; i < n; ++i) {
    values[i] = static_cast<float>((((i * 37 + seed * 101) % 61) - 30) / 13.0 * scale);
  }
  return values;
}

Tensor f32(const std::vector<float>& values) {
  return Tensor::from_f32({static_cast<int64_t>(values.size())}, values);
}
Tensor f64(const std::vector<double>& values) {
  return Tensor::from_doubles(DType::kF64, {static_cast<int64_t>(values.size())}, values);
}
Tensor scalar(DType dtype, double value) { return Tensor::from_doubles(dtype, {}, {value}); }

// Runs ampc.`op`<attrs>(param, grad, states..., lr, step); outputs like param.
std::vector<Tensor> update(const std::string& op, const std::string& attrs, const Tensor& param,
                           const Tensor& grad, const std::vector<Tensor>& states, double lr,
                           double step, DType scalar_dtype = DType::kF32) {
  std::vector<Tensor> inputs = {param, grad};
  inputs.insert(inputs.end(), states.begin(), states.end());
  inputs.push_back(scalar(scalar_dtype, lr));
  inputs.push_back(scalar(scalar_dtype, step));
  return run_node("ampc." + op, attrs, inputs,
                  std::vector<TensorType>(states.size() + 1, param.type()));
}

// ---- SGD -----------------------------------------------------------------------------------

struct SgdConfig {
  std::string attrs;
  double momentum = 0, dampening = 0, weight_decay = 0;
  bool nesterov = false, maximize = false;
};

// torch.optim.SGD's _single_tensor_sgd for one tensor, in f64; `first` when no buffer exists.
void reference_sgd(const SgdConfig& c, std::vector<double>& param, std::vector<double>& buffer,
                   const std::vector<double>& grad, double lr, bool first) {
  for (size_t i = 0; i < param.size(); ++i) {
    double g = c.maximize ? -grad[i] : grad[i];
    if (c.weight_decay != 0) g = g + c.weight_decay * param[i];
    if (c.momentum != 0) {
      buffer[i] = first ? g : c.momentum * buffer[i] + (1 - c.dampening) * g;
      g = c.nesterov ? g + c.momentum * buffer[i] : buffer[i];
    }
    param[i] = param[i] - lr * g;
  }
}

TEST(SgdKernel, PlainStepIsParamMinusLrTimesGradAndKeepsTheBuffer) {
  const std::vector<Tensor> out = update("SGD", "", f64({1, -2, 0.5}), f64({0.5, 4, -8}),
                                         {f64({7, 8, 9})}, 0.25, 3, DType::kF64);
  expect_near_all(out[0], {0.875, -3, 2.5}, 0);
  expect_near_all(out[1], {7, 8, 9}, 0);
}

TEST(SgdKernel, FirstStepStartsTheBufferAtTheDecayedGradient) {
  // step 0: the incoming buffer is ignored; buf = g + 0.5 * p = {1, 3}; p -= 0.1 * buf.
  const std::vector<Tensor> out = update("SGD", "momentum=0.9, weight_decay=0.5", f64({2, 2}),
                                         f64({0, 2}), {f64({kNaN, 5})}, 0.1, 0, DType::kF64);
  expect_near_all(out[1], {1, 3}, 1e-15);
  expect_near_all(out[0], {1.9, 1.7}, 1e-15);
}

TEST(SgdKernel, ChainedStepsMatchPyTorchsRuleInF64) {
  const std::vector<SgdConfig> configs = {
      {"", 0, 0, 0, false, false},
      {"momentum=0.9", 0.9, 0, 0, false, false},
      {"momentum=0.9, dampening=0.25", 0.9, 0.25, 0, false, false},
      {"momentum=0.5, nesterov=1", 0.5, 0, 0, true, false},
      {"momentum=0.9, nesterov=1, weight_decay=0.01, maximize=1", 0.9, 0, 0.01, true, true},
      {"weight_decay=0.1, maximize=1", 0, 0, 0.1, false, true},
  };
  for (const SgdConfig& config : configs) {
    SCOPED_TRACE(config.attrs);
    std::vector<double> param = random_values(23, 1), buffer(23, 0);
    Tensor param_t = f64(param), buffer_t = f64(buffer);
    for (int step = 0; step < 4; ++step) {
      const std::vector<double> grad = random_values(23, 10 + step, 0.5);
      const double lr = 0.05 * (step + 1);
      reference_sgd(config, param, buffer, grad, lr, step == 0);
      const std::vector<Tensor> out =
          update("SGD", config.attrs, param_t, f64(grad), {buffer_t}, lr, step, DType::kF64);
      param_t = out[0];
      buffer_t = out[1];
      expect_near_all(param_t, param, 1e-14);
      expect_near_all(buffer_t, buffer, 1e-14);
    }
  }
}

// Without momentum the buffer may be omitted (the optimizer pass does, as PyTorch keeps none):
// then only the parameter is updated, by PyTorch's rule in f64 and to the bits the buffered
// update gives in f32; with `skip` set it comes out as it went in.
TEST(SgdKernel, WithoutMomentumTheBufferMayBeOmitted) {
  for (const SgdConfig& config :
       {SgdConfig{"", 0, 0, 0, false, false},
        SgdConfig{"weight_decay=0.1, maximize=1", 0, 0, 0.1, false, true}}) {
    SCOPED_TRACE(config.attrs);
    std::vector<double> param = random_values(23, 1), unused(23, 0);
    const std::vector<double> grad = random_values(23, 4, 0.5);
    const std::vector<Tensor> omitted = testing::run(
        testing::one_node_graph("ampc.SGD", config.attrs,
                                {f64(param).type(), f64(grad).type(), std::nullopt,
                                 TensorType{DType::kF64, {}}, TensorType{DType::kF64, {}}},
                                {f64(param).type()}),
        {f64(param), f64(grad), scalar(DType::kF64, 0.25), scalar(DType::kF64, 2)});
    ASSERT_EQ(omitted.size(), 1u);
    reference_sgd(config, param, unused, grad, 0.25, false);
    expect_near_all(omitted[0], param, 1e-15);

    const std::vector<float> p = pattern(19, 1, 1.0), g = pattern(19, 2, 0.5);
    const Tensor buffered = update("SGD", config.attrs, f32(p), f32(g), {f32(p)}, 0.05, 1)[0];
    for (const bool skip : {false, true}) {
      const std::vector<Tensor> out =
          testing::run(testing::one_node_graph(
                           "ampc.SGD", config.attrs,
                           {f32(p).type(), f32(g).type(), std::nullopt, TensorType{DType::kF32, {}},
                            TensorType{DType::kF32, {}}, TensorType{DType::kBool, {}}},
                           {f32(p).type()}),
                       {f32(p), f32(g), scalar(DType::kF32, 0.05), scalar(DType::kF32, 1),
                        Tensor(TensorType{DType::kBool, {}}, {uint8_t{skip}})});
      ASSERT_EQ(out.size(), 1u);
      EXPECT_TRUE(std::ranges::equal(out[0].bytes(), (skip ? f32(p) : buffered).bytes()))
          << "skip " << skip;
    }
  }
}

// PyTorch 2.15.0: SGD(lr=0.05, momentum=0.9, dampening=0.1, weight_decay=0.01) and
// SGD(lr=0.05, momentum=0.9, nesterov=True, weight_decay=0.1, maximize=True); param
// pattern(19, 1, 1.0), grads pattern(19, 2 + k, 0.5) for k = 0, 1, 2.
const std::vector<float> kSgdMomentumParam = {
    0x1.6e3a2p-1f,  -0x1.32be9p+0f,  0x1.c7bd22p+0f, -0x1.0828d4p-6f, -0x1.edfc42p+0f,
    0x1.0c7f7p+0f,  -0x1.10b358p+0f, 0x1.e9c85cp+0f, 0x1.dea94ap-4f,  -0x1.cbf10ap+0f,
    0x1.2e8aaap+0f, -0x1.dd504p-1f,  0x1.05e9ccp+1f, 0x1.ffae62p-3f,  -0x1.a9e5d2p+0f,
    0x1.5095ep+0f,  -0x1.ed1f9ep-2f, 0x1.16ef66p+1f, 0x1.88041p-2f};
const std::vector<float> kSgdMomentumBuffer = {
    0x1.b6dbcp-1f,   0x1.88aafep-2f,  0x1.efbe2cp-3f, -0x1.d63f64p-3f, -0x1.68161cp-1f,
    -0x1.b07c12p-1f, 0x1.298058p-1f,  0x1.c234cp-2f,  -0x1.06502p-5f,  -0x1.02eb42p-1f,
    -0x1.4b513cp-1f, 0x1.8eab2cp-1f,  0x1.464536p-1f, 0x1.53174cp-3f,  -0x1.3b80dcp-2f,
    -0x1.cc4cc4p-2f, -0x1.d7a5c6p-1f, 0x1.ab700cp-1f, 0x1.73e156p-2f};
const std::vector<float> kSgdNesterovParam = {
    0x1.b145dcp-1f, -0x1.cb5726p-1f, 0x1.b0a69cp+0f, -0x1.1464a8p-3f, -0x1.e0db14p+0f,
    0x1.6aee32p-1f, -0x1.700008p-1f, 0x1.de5228p+0f, 0x1.63deep-5f,   -0x1.b32f88p+0f,
    0x1.c6454cp-1f, -0x1.14a8f2p-1f, 0x1.05fedcp+1f, 0x1.c6541cp-3f,  -0x1.8583fcp+0f,
    0x1.10ce32p+0f, -0x1.84cap-1f,   0x1.1cd4a2p+1f, 0x1.99d83ep-2f};
const std::vector<float> kSgdNesterovBuffer = {
    -0x1.85e67ap-1f, -0x1.43bdeep-1f, 0x1.067b5p-2f,   0x1.290bbp-3f,   0x1.18d6f8p-2f,
    0x1.29b388p+0f,  -0x1.98228cp-1f, 0x1.76c84p-4f,   -0x1.443638p-6f, 0x1.c036ep-4f,
    0x1.ff0274p-1f,  -0x1.ec872cp-1f, -0x1.2c5cap-4f,  -0x1.7a1946p-3f, -0x1.c5dc2p-5f,
    0x1.aa9dd2p-1f,  0x1.71a314p-1f,  -0x1.e7c0d8p-3f, -0x1.65d5dep-2f};

TEST(SgdKernel, F32MatchesPyTorchBitForBit) {
  struct Case {
    std::string attrs;
    const std::vector<float>& param;
    const std::vector<float>& buffer;
  };
  for (const Case& c : {Case{"momentum=0.9, dampening=0.1, weight_decay=0.01", kSgdMomentumParam,
                             kSgdMomentumBuffer},
                        Case{"momentum=0.9, nesterov=1, weight_decay=0.1, maximize=1",
                             kSgdNesterovParam, kSgdNesterovBuffer}}) {
    SCOPED_TRACE(c.attrs);
    Tensor param = f32(pattern(19, 1, 1.0)), buffer = f32(std::vector<float>(19, 0));
    for (int step = 0; step < 3; ++step) {
      const std::vector<Tensor> out =
          update("SGD", c.attrs, param, f32(pattern(19, 2 + step, 0.5)), {buffer}, 0.05f, step);
      param = out[0];
      buffer = out[1];
    }
    EXPECT_EQ(as_floats(param), c.param);
    EXPECT_EQ(as_floats(buffer), c.buffer);
  }
}

// ---- Adam ----------------------------------------------------------------------------------

struct AdamConfig {
  std::string attrs;
  double beta1 = 0.9, beta2 = 0.999, epsilon = 1e-8, weight_decay = 0;
  bool decoupled = false, maximize = false;
};

// torch.optim.Adam / AdamW's _single_tensor_adam for one tensor, in f64; `t` counts this update.
void reference_adam(const AdamConfig& c, std::vector<double>& param, std::vector<double>& m,
                    std::vector<double>& v, const std::vector<double>& grad, double lr, double t) {
  for (size_t i = 0; i < param.size(); ++i) {
    double g = c.maximize ? -grad[i] : grad[i];
    if (c.weight_decay != 0) {
      if (c.decoupled) {
        param[i] *= 1 - lr * c.weight_decay;
      } else {
        g += c.weight_decay * param[i];
      }
    }
    m[i] = m[i] + (1 - c.beta1) * (g - m[i]);
    v[i] = c.beta2 * v[i] + (1 - c.beta2) * g * g;
    const double bias_correction1 = 1 - std::pow(c.beta1, t);
    const double bias_correction2 = 1 - std::pow(c.beta2, t);
    const double denom = std::sqrt(v[i]) / std::sqrt(bias_correction2) + c.epsilon;
    param[i] -= lr / bias_correction1 * m[i] / denom;
  }
}

TEST(AdamKernel, FirstStepFromZeroStateMovesEachWeightByAboutLr) {
  // m = 0.1 g, v = 0.001 g^2: bias-corrected they are g and g^2, so the step is
  // lr * g / (|g| + eps): lr * sign(g) for |g| >> eps, half of it at |g| = eps.
  const std::vector<double> g = {3, -0.5, 1e-8, 0};
  const std::vector<Tensor> out =
      update("Adam", "", f64({1, 1, 1, 1}), f64(g), {f64({0, 0, 0, 0}), f64({0, 0, 0, 0})}, 0.01, 0,
             DType::kF64);
  expect_near_all(out[0], {1 - 0.01 * 3 / (3 + 1e-8), 1.01 - 0.01 * 1e-8 / (0.5 + 1e-8), 0.995, 1},
                  1e-15);
  expect_near_all(out[1], {0.3, -0.05, 1e-9, 0}, 1e-15);
  expect_near_all(out[2], {0.009, 0.00025, 1e-19, 0}, 1e-15);
}

TEST(AdamKernel, AdamDecaysTheGradientAndAdamWTheWeight) {
  // One step from zero state, p = 2, g = 1, lr = 0.1, weight_decay = 0.5. Adam: g' = 1 + 0.5 * 2
  // = 2, step lr * g' / |g'| = 0.1. AdamW: p = 2 * (1 - 0.1 * 0.5) = 1.9, then the step 0.1.
  const std::vector<Tensor> zeros = {f64({0}), f64({0})};
  const std::vector<Tensor> adam = update("Adam", "weight_decay=0.5, epsilon=0.0", f64({2}),
                                          f64({1}), zeros, 0.1, 0, DType::kF64);
  const std::vector<Tensor> adamw =
      update("Adam", "weight_decay=0.5, decoupled_weight_decay=1, epsilon=0.0", f64({2}), f64({1}),
             zeros, 0.1, 0, DType::kF64);
  expect_near_all(adam[0], {1.9}, 1e-15);
  expect_near_all(adam[1], {0.2}, 1e-15);
  expect_near_all(adamw[0], {1.8}, 1e-15);
  expect_near_all(adamw[1], {0.1}, 1e-15);
}

TEST(AdamKernel, ChainedStepsMatchPyTorchsRuleInF64) {
  const std::vector<AdamConfig> configs = {
      {""},
      {"weight_decay=0.01", 0.9, 0.999, 1e-8, 0.01},
      {"weight_decay=0.1, decoupled_weight_decay=1", 0.9, 0.999, 1e-8, 0.1, true},
      {"beta1=0.8, beta2=0.99, epsilon=1e-3, maximize=1", 0.8, 0.99, 1e-3, 0, false, true},
      // 1 - beta1 >= 0.5 takes torch.lerp's other branch.
      {"beta1=0.3, weight_decay=0.05", 0.3, 0.999, 1e-8, 0.05},
  };
  for (const AdamConfig& config : configs) {
    for (int first_step : {0, 1000}) {
      SCOPED_TRACE(str_cat(config.attrs, " from step ", first_step));
      std::vector<double> param = random_values(23, 1), m(23, 0), v(23, 0);
      Tensor param_t = f64(param), m_t = f64(m), v_t = f64(v);
      for (int step = first_step; step < first_step + 4; ++step) {
        const std::vector<double> grad = random_values(23, 10 + step, step % 2 ? 1e-3 : 1);
        const double lr = 1e-3 * (step % 3 + 1);
        reference_adam(config, param, m, v, grad, lr, step + 1);
        const std::vector<Tensor> out =
            update("Adam", config.attrs, param_t, f64(grad), {m_t, v_t}, lr, step, DType::kF64);
        param_t = out[0];
        m_t = out[1];
        v_t = out[2];
        expect_near_all(param_t, param, 1e-14);
        expect_near_all(m_t, m, 1e-14);
        expect_near_all(v_t, v, 1e-14);
      }
    }
  }
}

// PyTorch 2.15.0: Adam(lr=1e-3 as f32, weight_decay=0.01) and AdamW(lr=1e-3 as f32,
// betas=(0.8, 0.99), eps=1e-6, weight_decay=0.1, maximize=True); param pattern(19, 1, 1.0),
// grads pattern(19, 2 + k, scale_k), scales 1, 1e-3, 0.3.
const std::vector<float> kAdamL2Param = {
    0x1.8ae0e8p-1f, -0x1.1437b6p+0f, 0x1.c446bep+0f, -0x1.3202acp-4f, -0x1.ecc3bp+0f,
    0x1.d99afap-1f, -0x1.d9adfep-1f, 0x1.eba85ap+0f, 0x1.441192p-4f,  -0x1.c565ep+0f,
    0x1.142714p+0f, -0x1.8aec12p-1f, 0x1.09858p+1f,  0x1.dd107ap-3f,  -0x1.9e0742p+0f,
    0x1.3b7c2ep+0f, -0x1.39ec0ep-1f, 0x1.1d371p+1f,  0x1.8c0a5ep-2f};
const std::vector<float> kAdamL2ExpAvg = {
    -0x1.877cbcp-5f, 0x1.f47e0ap-4f,  0x1.0ca14ep-4f, -0x1.271414p-3f, 0x1.a850fep-6f,
    -0x1.f70c3p-6f,  0x1.1e1a18p-3f,  0x1.54577cp-4f, -0x1.033904p-3f, 0x1.6394c2p-5f,
    -0x1.b06746p-7f, 0x1.41f52ap-3f,  0x1.9c0da2p-4f, -0x1.bebbe4p-4f, 0x1.f30114p-5f,
    0x1.1a93a2p-8f,  -0x1.a492d6p-3f, 0x1.e3c3cap-4f, -0x1.7705bcp-4f};
const std::vector<float> kAdamL2ExpAvgSq = {
    0x1.834a96p-11f, 0x1.0c480ap-8f, 0x1.279eaep-12f, 0x1.779c32p-9f,  0x1.bd0de2p-10f,
    0x1.125e7ap-11f, 0x1.34109ap-8f, 0x1.ad5b6cp-12f, 0x1.355da4p-9f,  0x1.08119ap-9f,
    0x1.7a46f8p-12f, 0x1.5f4e1ap-8f, 0x1.3533a6p-11f, 0x1.f411fap-10f, 0x1.38862ap-9f,
    0x1.07202cp-12f, 0x1.4af484p-8f, 0x1.af612cp-11f, 0x1.8b3c76p-10f};
const std::vector<float> kAdamWParam = {
    0x1.88beaep-1f, -0x1.131c4ap+0f, 0x1.c568ep+0f,  -0x1.43a45p-4f, -0x1.ebba12p+0f,
    0x1.d787dap-1f, -0x1.d77644p-1f, 0x1.ecca84p+0f, 0x1.3265eep-4f, -0x1.c4563cp+0f,
    0x1.132baep+0f, -0x1.88b468p-1f, 0x1.0a14f2p+1f, 0x1.d43a78p-3f, -0x1.9cf32p+0f,
    0x1.3a9764p+0f, -0x1.3c1634p-1f, 0x1.1dc444p+1f, 0x1.87a2a6p-2f};
const std::vector<float> kAdamWExpAvg = {
    0x1.22edeep-4f,  -0x1.752d5ap-3f, -0x1.dcb2e4p-4f, 0x1.d78812p-3f, -0x1.78e1dep-6f,
    0x1.5edea4p-5f,  -0x1.b07646p-3f, -0x1.29a26p-3f,  0x1.9c3f26p-3f, -0x1.a994aep-5f,
    0x1.c6ebaep-7f,  -0x1.ebbf32p-3f, -0x1.64eb4ep-3f, 0x1.60f638p-3f, -0x1.4b5c3p-4f,
    -0x1.eda328p-7f, 0x1.5383a8p-2f,  -0x1.a0343ap-3f, 0x1.25ad4ap-3f};
const std::vector<float> kAdamWExpAvgSq = {
    0x1.e23978p-8f, 0x1.4c53d4p-5f, 0x1.523bd2p-9f, 0x1.ccab9ap-6f, 0x1.15656ap-6f,
    0x1.56c2dp-8f,  0x1.7d04f6p-5f, 0x1.eae01ap-9f, 0x1.7c285ep-6f, 0x1.492216p-6f,
    0x1.d8fd34p-9f, 0x1.b1dc64p-5f, 0x1.62f4ccp-8f, 0x1.33f1c6p-6f, 0x1.852b64p-6f,
    0x1.46d9fap-9f, 0x1.93e948p-5f, 0x1.f1ac2ap-8f, 0x1.e80fb2p-7f};

TEST(AdamKernel, F32MatchesPyTorchBitForBit) {
  // The moments match exactly. So does the parameter here, though PyTorch's CPU sqrt (MKL) is
  // not correctly rounded and can, rarely, move a parameter's last bit (see the kernel's header).
  struct Case {
    std::string attrs;
    const std::vector<float>& param;
    const std::vector<float>& exp_avg;
    const std::vector<float>& exp_avg_sq;
  };
  const std::vector<double> scales = {1, 1e-3, 0.3};
  for (const Case& c :
       {Case{"weight_decay=0.01", kAdamL2Param, kAdamL2ExpAvg, kAdamL2ExpAvgSq},
        Case{"beta1=0.8, beta2=0.99, epsilon=1e-6, weight_decay=0.1, decoupled_weight_decay=1, "
             "maximize=1",
             kAdamWParam, kAdamWExpAvg, kAdamWExpAvgSq}}) {
    SCOPED_TRACE(c.attrs);
    const Tensor zeros = f32(std::vector<float>(19, 0));
    Tensor param = f32(pattern(19, 1, 1.0)), m = zeros, v = zeros;
    for (int step = 0; step < 3; ++step) {
      const std::vector<Tensor> out = update(
          "Adam", c.attrs, param, f32(pattern(19, 2 + step, scales[step])), {m, v}, 1e-3f, step);
      param = out[0];
      m = out[1];
      v = out[2];
    }
    EXPECT_EQ(as_floats(param), c.param);
    EXPECT_EQ(as_floats(m), c.exp_avg);
    EXPECT_EQ(as_floats(v), c.exp_avg_sq);
  }
}

TEST(UpdateKernels, SameBitsOnAnyThreadCount) {
  const int64_t n = 100003;
  std::vector<float> p(n), g(n), s(n);
  for (int64_t i = 0; i < n; ++i) {
    p[i] = std::sin(0.1f * i);
    g[i] = std::cos(0.37f * i);
    s[i] = 0.01f * std::abs(g[i]);
  }
  for (const std::string op : {"SGD", "Adam"}) {
    const bool sgd = op == "SGD";
    const std::vector<Tensor> states =
        sgd ? std::vector<Tensor>{f32(s)} : std::vector<Tensor>{f32(s), f32(s)};
    const std::string attrs = sgd ? "momentum=0.9, weight_decay=0.1" : "weight_decay=0.1";
    auto run_on = [&](int threads) {
      return on_cpu_threads(threads,
                            [&] { return update(op, attrs, f32(p), f32(g), states, 1e-2, 7); });
    };
    const std::vector<Tensor> one = run_on(1), four = run_on(4);
    for (size_t k = 0; k < one.size(); ++k) EXPECT_EQ(one[k], four[k]) << op << " output " << k;
  }
}

// `skip` set: the parameter and state come out as they went in, bit for bit (NaN payloads and
// -0 too); `skip` clear: the same update as without the input.
TEST(UpdateKernels, SkipLeavesParameterAndStateAsTheyWere) {
  const std::vector<float> p = {1.5f, -0.0f, std::nanf("7"), 3e38f}, g = {0.5f, 1, 2, -3},
                           s = {0.25f, 0, -1, 2};
  for (const std::string op : {"SGD", "Adam"}) {
    const bool sgd = op == "SGD";
    const std::vector<Tensor> states =
        sgd ? std::vector<Tensor>{f32(s)} : std::vector<Tensor>{f32(s), f32(s)};
    const std::string attrs = sgd ? "momentum=0.9" : "weight_decay=0.1";
    std::vector<Tensor> inputs = {f32(p), f32(g)};
    inputs.insert(inputs.end(), states.begin(), states.end());
    inputs.push_back(scalar(DType::kF32, 0.1));
    inputs.push_back(scalar(DType::kF32, 3));
    const std::vector<Tensor> unskipped = update(op, attrs, f32(p), f32(g), states, 0.1, 3);
    for (const bool skip : {true, false}) {
      std::vector<Tensor> with_skip = inputs;
      with_skip.push_back(Tensor(TensorType{DType::kBool, {}}, {uint8_t{skip}}));
      const std::vector<Tensor> out =
          run_node("ampc." + op, attrs, with_skip,
                   std::vector<TensorType>(states.size() + 1, f32(p).type()));
      for (size_t k = 0; k < out.size(); ++k) {
        const Tensor& expected = skip ? (k == 0 ? inputs[0] : inputs[k + 1]) : unskipped[k];
        EXPECT_TRUE(std::ranges::equal(out[k].bytes(), expected.bytes()))
            << op << " output " << k << " skip " << skip;
      }
    }
  }
}

// ---- GlobalNorm and ClipCoefficient ----------------------------------------------------------

Tensor global_norm(const std::vector<Tensor>& inputs) {
  return testing::run_op("ampc.GlobalNorm", "", inputs, {inputs.at(0).dtype(), {}});
}

Tensor clip_coefficient(double max_norm, const Tensor& norm) {
  return testing::run_op("ampc.ClipCoefficient", str_cat("max_norm=", max_norm), {norm},
                         {norm.dtype(), {}});
}

TEST(GlobalNormKernel, PythagoreanValuesAreExact) {
  // sqrt(3^2 + 4^2) = 5, then sqrt(5^2 + 12^2 + 0^2) = 13.
  const Tensor norm = global_norm({f32({3, 4}), Tensor::from_f32({1, 1}, {12}), f32({})});
  EXPECT_EQ(norm.type(), (TensorType{DType::kF32, {}}));
  EXPECT_EQ(norm.element_as_double(0), 13);
}

TEST(GlobalNormKernel, MatchesTheF64NormOfAllElements) {
  std::vector<Tensor> inputs;
  double sum = 0;
  uint32_t seed = 1;
  for (int64_t n : {1, 7, 8, 9, 100, 1001}) {
    ++seed;
    const std::vector<double> values = random_values(n, seed, 0.1 * seed);
    for (double x : values) sum += x * x;
    inputs.push_back(f64(values));
  }
  expect_near_all(global_norm(inputs), {std::sqrt(sum)}, 1e-14);
}

// PyTorch 2.15.0: vector_norm of pattern(37, 5, 0.01), pattern(5, 6, 1), pattern(1000, 7, 0.03),
// pattern(1, 8, 2); get_total_norm of the four; clamp(max_norm / (total + 1e-6), max=1).
TEST(GlobalNormKernel, F32MatchesPyTorchBitForBit) {
  const std::vector<Tensor> inputs = {f32(pattern(37, 5, 0.01)), f32(pattern(5, 6, 1)),
                                      f32(pattern(1000, 7, 0.03)), f32(pattern(1, 8, 2))};
  const std::vector<float> norms = {0x1.51de1ep-4f, 0x1.7d367ap+1f, 0x1.48b346p+0f, 0x1.276276p+1f};
  for (size_t k = 0; k < inputs.size(); ++k) {
    EXPECT_EQ(global_norm({inputs[k]}).data<float>()[0],
              std::sqrt(norms[k] * norms[k]))  // the norm of the one-element stack of norms
        << "input " << k;
  }
  const Tensor total = global_norm(inputs);
  EXPECT_EQ(total.data<float>()[0], 0x1.fd9bp+1f);
  EXPECT_EQ(clip_coefficient(1.0, total).data<float>()[0], 0x1.0133ecp-2f);
  EXPECT_EQ(clip_coefficient(0.25, total).data<float>()[0], 0x1.0133ecp-4f);
  EXPECT_EQ(clip_coefficient(100.0, total).data<float>()[0], 1.0f);
}

// PyTorch 2.15.0: get_total_norm([pattern(n, 20 + k, 0.1)]) for the k-th n below: every
// remainder n % 8, as the summation order treats each differently.
TEST(GlobalNormKernel, EveryRemainderMatchesPyTorchBitForBit) {
  const std::vector<int64_t> sizes = {1,  2,  3,  4,  5,  6,  7,  8,    9,    10,
                                      11, 12, 13, 14, 15, 16, 17, 1003, 1005, 1007};
  const std::vector<float> expected = {
      0x1.6a56a6p-3f, 0x1.21a186p-3f, 0x1.d3999ep-3f, 0x1.34e978p-2f, 0x1.31ae74p-2f,
      0x1.43d136p-2f, 0x1.7bbad4p-2f, 0x1.8d4cp-2f,   0x1.a7614ap-2f, 0x1.bb366cp-2f,
      0x1.b80d2ep-2f, 0x1.f781ep-2f,  0x1.01b898p-1f, 0x1.eac6f8p-2f, 0x1.0c6c4p-1f,
      0x1.24b88p-1f,  0x1.0f2764p-1f, 0x1.129fb4p+2f, 0x1.12f3b4p+2f, 0x1.12f23ep+2f};
  for (size_t k = 0; k < sizes.size(); ++k) {
    const Tensor norm = global_norm({f32(pattern(sizes[k], 20 + static_cast<int>(k), 0.1))});
    EXPECT_EQ(norm.data<float>()[0], expected[k]) << sizes[k] << " elements";
  }
}

TEST(GlobalNormKernel, SameBitsOnAnyThreadCount) {
  std::vector<Tensor> inputs;
  for (int k = 0; k < 5; ++k) {
    const std::vector<double> values = random_values(20000 + k, k, 1e-2);
    inputs.push_back(f32(std::vector<float>(values.begin(), values.end())));
  }
  const Tensor one = on_cpu_threads(1, [&] { return global_norm(inputs); });
  const Tensor four = on_cpu_threads(4, [&] { return global_norm(inputs); });
  EXPECT_EQ(one, four);
}

TEST(GlobalNormKernel, NonFiniteValuesReachTheNorm) {
  EXPECT_EQ(global_norm({f32({1, 2}), f32({INFINITY})}).element_as_double(0), kInf);
  EXPECT_TRUE(std::isnan(global_norm({f32({NAN, 2}), f32({3})}).element_as_double(0)));
}

TEST(ClipCoefficientKernel, ScalesDownAboveMaxNormAndIsOneBelow) {
  expect_near_all(clip_coefficient(1, scalar(DType::kF64, 4)), {1 / (4 + 1e-6)}, 1e-15);
  expect_near_all(clip_coefficient(2.5, scalar(DType::kF64, 10)), {2.5 / (10 + 1e-6)}, 1e-15);
  expect_near_all(clip_coefficient(1, scalar(DType::kF64, 0.5)), {1}, 0);
  expect_near_all(clip_coefficient(1, scalar(DType::kF64, 0)), {1}, 0);
  // As PyTorch: (1 / (n + 1e-6)) * max_norm, in f32.
  const float n = 3.7f;
  expect_near_all(clip_coefficient(0.5, scalar(DType::kF32, n)), {(1 / (n + 1e-6f)) * 0.5f}, 0);
}

TEST(ClipCoefficientKernel, InfiniteNormGivesZeroAndNaNStaysNaN) {
  EXPECT_EQ(clip_coefficient(1, scalar(DType::kF32, kInf)).element_as_double(0), 0);
  EXPECT_TRUE(std::isnan(clip_coefficient(1, scalar(DType::kF32, kNaN)).element_as_double(0)));
}

}  // namespace
}  // namespace ampc
