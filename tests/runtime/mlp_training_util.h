// Test helpers for training a small perceptron (tests/runtime/gradient_accumulation_test.cc,
// data_parallel_test.cc): the model in text IR for any batch size, with the same weights for
// every size, and how far two updates of the same weights differ.
#pragma once

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "fmt/format.h"

namespace ampc::testing {

inline std::string values_text(const std::vector<float>& values) {
  std::string text;
  for (float v : values) text += fmt::format("{}{}", text.empty() ? "" : ", ", v);
  return text;
}

inline std::vector<float> uniform(std::mt19937& rng, size_t count, float bound) {
  std::uniform_real_distribution<float> dist(-bound, bound);
  std::vector<float> values(count);
  for (float& v : values) v = dist(rng);
  return values;
}

// A two-layer perceptron with a mean squared error over a batch of `batch` rows; the weights are
// the same for every batch size.
inline std::string mlp_model(int batch) {
  std::mt19937 rng(7);
  const std::vector<float> w1 = uniform(rng, 4 * 8, 0.5f);
  const std::vector<float> b1 = uniform(rng, 8, 0.1f);
  const std::vector<float> w2 = uniform(rng, 8 * 3, 0.35f);
  return fmt::format(R"(
    graph mlp(%x: f32[{0},4], %t: f32[{0},3]) opset(17) {{
      init %w1: f32[4,8] = [{1}]
      init %b1: f32[8] = [{2}]
      init %w2: f32[8,3] = [{3}]
      %h = MatMul(%x, %w1) {{name="fc1"}} : f32[{0},8]
      %hb = Add(%h, %b1) {{name="bias1"}} : f32[{0},8]
      %r = Relu(%hb) {{name="relu"}} : f32[{0},8]
      %y = MatMul(%r, %w2) {{name="fc2"}} : f32[{0},3]
      %d = Sub(%y, %t) {{name="error"}} : f32[{0},3]
      %sq = Mul(%d, %d) {{name="square"}} : f32[{0},3]
      %loss = ReduceMean<keepdims=0>(%sq) {{name="mean"}} : f32[]
      return %loss
    }})",
                     batch, values_text(w1), values_text(b1), values_text(w2));
}

// The perceptron with a training-mode BatchNormalization between its layers: the 8 hidden units
// as 4 channels of 2 positions each ([batch, 4, 2]), normalized by the batch's statistics.
inline std::string mlp_batch_norm_model(int batch) {
  std::mt19937 rng(11);
  const std::vector<float> w1 = uniform(rng, 4 * 8, 0.5f);
  const std::vector<float> w2 = uniform(rng, 8 * 3, 0.35f);
  const std::vector<float> scale = uniform(rng, 4, 0.5f);
  const std::vector<float> bias = uniform(rng, 4, 0.1f);
  return fmt::format(R"(
    graph mlp_bn(%x: f32[{0},4], %t: f32[{0},3]) opset(17) {{
      init %w1: f32[4,8] = [{1}]
      init %w2: f32[8,3] = [{2}]
      init %bn_scale: f32[4] = [{3}]
      init %bn_bias: f32[4] = [{4}]
      init %bn_mean: f32[4] = [0, 0, 0, 0]
      init %bn_var: f32[4] = [1, 1, 1, 1]
      init %channels: i64[3] = [{0}, 4, 2]
      init %rows: i64[2] = [{0}, 8]
      %h = MatMul(%x, %w1) {{name="fc1"}} : f32[{0},8]
      %hc = Reshape(%h, %channels) {{name="to_channels"}} : f32[{0},4,2]
      %n, %rm, %rv = BatchNormalization<momentum=0.75, training_mode=1>(%hc, %bn_scale, %bn_bias, %bn_mean, %bn_var) {{name="bn"}} : f32[{0},4,2], f32[4], f32[4]
      %r = Relu(%n) {{name="relu"}} : f32[{0},4,2]
      %rf = Reshape(%r, %rows) {{name="to_rows"}} : f32[{0},8]
      %y = MatMul(%rf, %w2) {{name="fc2"}} : f32[{0},3]
      %d = Sub(%y, %t) {{name="error"}} : f32[{0},3]
      %sq = Mul(%d, %d) {{name="square"}} : f32[{0},3]
      %loss = ReduceMean<keepdims=0>(%sq) {{name="mean"}} : f32[]
      return %loss
    }})",
                     batch, values_text(w1), values_text(w2), values_text(scale),
                     values_text(bias));
}

inline double norm(const std::vector<double>& v) {
  double sum = 0;
  for (double x : v) sum += x * x;
  return std::sqrt(sum);
}

// |(a - start) - (b - start)| / |b - start|: how far two updates of the same weights differ,
// relative to the update's size.
inline double relative_update_gap(const std::vector<double>& start, const std::vector<double>& a,
                                  const std::vector<double>& b) {
  std::vector<double> gap(start.size());
  std::vector<double> update(start.size());
  for (size_t i = 0; i < start.size(); ++i) {
    gap[i] = a[i] - b[i];
    update[i] = b[i] - start[i];
  }
  return norm(gap) / norm(update);
}

}  // namespace ampc::testing
