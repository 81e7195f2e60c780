// For the CPU convolution kernel tests: the convolution written directly from its definition in
// f64 (N-D, groups, strides, dilations, explicit begin/end pads; the forward sum and both
// gradients), and one-node graphs that run the gradient kernels.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "compiler/strings.h"
#include "tests/runtime/cpu/kernel_test_util.h"

namespace ampc::testing {

using Ints = std::vector<int64_t>;

// The row-major offset of `index` in `dims`.
inline int64_t flat(const Ints& dims, const Ints& index) {
  int64_t offset = 0;
  for (size_t d = 0; d < dims.size(); ++d) offset = offset * dims[d] + index[d];
  return offset;
}

struct ConvCase {
  Shape x;                        // [N, C, spatial...]
  Shape w;                        // [M, C / group, kernel...]
  Ints strides, dilations, pads;  // pads: begins, then ends
  int64_t group = 1;

  size_t rank() const { return x.size() - 2; }
  Ints in() const { return Ints(x.begin() + 2, x.end()); }
  Ints kernel() const { return Ints(w.begin() + 2, w.end()); }
  Shape y() const {
    Shape y = {x[0], w[0]};
    for (size_t i = 0; i < rank(); ++i) {
      const int64_t extent = (w[2 + i] - 1) * dilations[i] + 1;
      y.push_back((x[2 + i] + pads[i] + pads[rank() + i] - extent) / strides[i] + 1);
    }
    return y;
  }
  std::string attrs() const {
    return str_cat("strides=[", str_join(strides, ", "), "], dilations=[",
                   str_join(dilations, ", "), "], pads=[", str_join(pads, ", "),
                   "], group=", group);
  }
  std::string describe() const {
    return str_cat("X ", shape_to_string(x), " W ", shape_to_string(w), " ", attrs());
  }
};

// Calls tap(x_offset, w_offset, y_offset) for every product x * w that the convolution adds into
// an output element (taps in padding skipped), each output's products in (channel, kernel
// offset) order.
template <typename Tap>
void for_each_product(const ConvCase& c, Tap&& tap) {
  const Shape y_shape = c.y();
  const Ints in = c.in(), kernel = c.kernel(), out(y_shape.begin() + 2, y_shape.end());
  const int64_t channels_per_group = c.w[1], outs_per_group = c.w[0] / c.group;
  for (int64_t n = 0; n < c.x[0]; ++n) {
    for (int64_t m = 0; m < c.w[0]; ++m) {
      const int64_t g = m / outs_per_group;
      for_each_index(out, [&](const Ints& o) {
        const int64_t y_offset = (n * c.w[0] + m) * num_elements(out) + flat(out, o);
        for (int64_t ci = 0; ci < channels_per_group; ++ci) {
          const int64_t channel = g * channels_per_group + ci;
          for_each_index(kernel, [&](const Ints& k) {
            Ints i(in.size());
            for (size_t d = 0; d < in.size(); ++d) {
              i[d] = o[d] * c.strides[d] - c.pads[d] + k[d] * c.dilations[d];
              if (i[d] < 0 || i[d] >= in[d]) return;
            }
            tap((n * c.x[1] + channel) * num_elements(in) + flat(in, i),
                (m * channels_per_group + ci) * num_elements(kernel) + flat(kernel, k), y_offset);
          });
        }
      });
    }
  }
}

// Y = conv(X, W) + bias (bias may be null), summed in f64 from the bias up.
inline std::vector<double> direct_conv(const ConvCase& c, const std::vector<double>& x,
                                       const std::vector<double>& w,
                                       const std::vector<double>* bias) {
  const Shape y_shape = c.y();
  std::vector<double> y(num_elements(y_shape), 0.0);
  if (bias != nullptr) {
    const int64_t out = num_elements(y_shape) / (y_shape[0] * y_shape[1]);
    for (size_t i = 0; i < y.size(); ++i) y[i] = (*bias)[(i / out) % y_shape[1]];
  }
  for_each_product(c, [&](int64_t xi, int64_t wi, int64_t yi) { y[yi] += x[xi] * w[wi]; });
  return y;
}

// dX of the convolution for output gradient dY.
inline std::vector<double> direct_grad_data(const ConvCase& c, const std::vector<double>& dy,
                                            const std::vector<double>& w) {
  std::vector<double> dx(num_elements(c.x), 0.0);
  for_each_product(c, [&](int64_t xi, int64_t wi, int64_t yi) { dx[xi] += dy[yi] * w[wi]; });
  return dx;
}

// dW of the convolution for output gradient dY.
inline std::vector<double> direct_grad_filter(const ConvCase& c, const std::vector<double>& x,
                                              const std::vector<double>& dy) {
  std::vector<double> dw(num_elements(c.w), 0.0);
  for_each_product(c, [&](int64_t xi, int64_t wi, int64_t yi) { dw[wi] += dy[yi] * x[xi]; });
  return dw;
}

// ---- Running the gradient kernels ----------------------------------------------------------

// Runs the one ampc-domain node `op<attrs>(inputs...)` with an output of type `output`.
inline Tensor run_ampc(const std::string& op, const std::string& attrs,
                       const std::vector<Tensor>& inputs, const TensorType& output) {
  std::vector<std::optional<TensorType>> types;
  for (const Tensor& input : inputs) types.push_back(input.type());
  std::string text = one_node_graph("ampc." + op, attrs, types, {output}, 17);
  const std::string plain = "opset(17)";
  text.replace(text.find(plain), plain.size(), "opset(17, ampc:1)");
  std::vector<Tensor> outputs = run(text, inputs);
  return outputs.empty() ? Tensor(output) : outputs[0];
}

inline Tensor grad_data(const ConvCase& c, DType dtype, const std::vector<double>& dy,
                        const std::vector<double>& w) {
  return run_ampc("ConvGradData", str_cat(c.attrs(), ", input_shape=[", str_join(c.x, ", "), "]"),
                  {Tensor::from_doubles(dtype, c.y(), dy), Tensor::from_doubles(dtype, c.w, w)},
                  {dtype, c.x});
}

inline Tensor grad_filter(const ConvCase& c, DType dtype, const std::vector<double>& x,
                          const std::vector<double>& dy) {
  return run_ampc(
      "ConvGradFilter", str_cat(c.attrs(), ", kernel_shape=[", str_join(c.kernel(), ", "), "]"),
      {Tensor::from_doubles(dtype, c.x, x), Tensor::from_doubles(dtype, c.y(), dy)}, {dtype, c.w});
}

}  // namespace ampc::testing
