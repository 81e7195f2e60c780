// DFT, STFT, MelWeightMatrix and the window functions, lowered at import (what PyTorch's dynamo
// exporter writes for torch.fft.* and torch.stft, and audio front ends compute their spectrograms
// with).
//
// A DFT of length N along one axis is linear in the signal, so it is one MatMul of the signal
// (its axis moved last, real and imaginary parts interleaved: [..., L * c]) by a matrix made at
// import ([L * c, K * c_out]: the e^(-+2 pi j k n / N) terms, in f64, rounded once to f32), then
// the result's axis moved back. Zero padding to N, truncation, the one-sided spectrum (RFFT) and
// the real inverse of a one-sided spectrum (IRFFT: bins k and N - k conjugate, so bins 1 .. N/2-1
// count twice and the imaginary parts of bins 0 and N/2 are ignored, as numpy's irfft does) are
// all rows and columns of that matrix. The roots of unity at multiples of a quarter turn are
// exact (a real signal's spectrum has exact zeros where it should). This costs L * K products per
// output row where an FFT needs about N log N; the transforms models take (spectral layers of
// 16-512 positions, STFT frames of 256-2048 samples) stay small, and one GEMM is what every
// backend runs fastest. Gradients come from MatMul's. The arithmetic runs in f32 (pinned: PyTorch
// runs torch.fft in fp32 under autocast), f16/bf16 signals cast to f32 and back.
//
// STFT frames the signal with one Gather of constant indices, weighs the frames by the window
// (which may be computed, and then gets a gradient) and takes the DFT of each frame.
// MelWeightMatrix and the windows (HannWindow, HammingWindow, BlackmanWindow) depend only on
// scalars known at compile time: constants made at import.
#include <cmath>
#include <numbers>
#include <numeric>

#include "compiler/onnx_lowering_internal.h"
#include "compiler/strings.h"

namespace ampc::onnx_io::lowering {
namespace {

// The largest transform matrix made at import, in bytes (f32).
constexpr int64_t kMaxMatrixBytes = int64_t{256} << 20;

// cos and sin of 2 pi m / n, exact at multiples of a quarter turn.
std::pair<double, double> root_of_unity(int64_t m, int64_t n) {
  m %= n;
  if (m < 0) m += n;
  if ((4 * m) % n == 0) {
    switch (4 * m / n) {
      case 0:
        return {1, 0};
      case 1:
        return {0, 1};
      case 2:
        return {-1, 0};
      default:
        return {0, -1};
    }
  }
  const double angle = 2 * std::numbers::pi * static_cast<double>(m) / static_cast<double>(n);
  return {std::cos(angle), std::sin(angle)};
}

struct Transform {
  int64_t axis = 0;    // the signal axis, in [0, rank - 2]
  int64_t length = 0;  // N
  bool inverse = false;
  bool onesided = false;
};

// The matrix taking the interleaved signal [L * c] to the interleaved output [K * c_out].
Tensor transform_matrix(const Transform& t, int64_t signal_length, int64_t parts, int64_t bins,
                        int64_t out_parts, DType dtype) {
  const int64_t n_total = t.length;
  const bool irfft = t.inverse && t.onesided;
  std::vector<double> m(static_cast<size_t>(signal_length * parts * bins * out_parts), 0.0);
  const auto at = [&](int64_t n, int64_t part, int64_t k, int64_t out_part) -> double& {
    return m[static_cast<size_t>(((n * parts + part) * bins + k) * out_parts + out_part)];
  };
  // Positions beyond N are dropped (truncation); those beyond L are zeros (padding): neither
  // has a row. IRFFT reads bins 0 .. N/2 only.
  const int64_t used = std::min(signal_length, irfft ? n_total / 2 + 1 : n_total);
  const double scale = t.inverse ? 1.0 / static_cast<double>(n_total) : 1.0;
  for (int64_t n = 0; n < used; ++n) {
    for (int64_t k = 0; k < bins; ++k) {
      auto [c, s] = root_of_unity(n * k, n_total);
      if (irfft) {
        // y[k] = (1/N) sum_n w_n (re_n cos - im_n sin), w_n = 2 but for bins 0 and N/2.
        const double w = (n == 0 || 2 * n == n_total) ? scale : 2 * scale;
        at(n, 0, k, 0) = w * c;
        if (parts == 2) at(n, 1, k, 0) = -w * s;
        continue;
      }
      if (!t.inverse) s = -s;  // e^(-j theta) forward, e^(+j theta) inverse
      // (a + jb)(c + js) = (ac - bs) + j(as + bc)
      at(n, 0, k, 0) = scale * c;
      at(n, 0, k, 1) = scale * s;
      if (parts == 2) {
        at(n, 1, k, 0) = -scale * s;
        at(n, 1, k, 1) = scale * c;
      }
    }
  }
  return Tensor::from_doubles(dtype, {signal_length * parts, bins * out_parts}, m);
}

// The DFT `t` of `x` ([..., c], c = 1 real or 2 complex) into `output`.
absl::StatusOr<Value*> emit_dft(Emitter& e, Value* x, const Transform& t, std::string output) {
  const Shape& shape = x->shape();
  const auto rank = static_cast<int64_t>(shape.size());
  const int64_t parts = shape.back();
  const int64_t signal_length = shape[static_cast<size_t>(t.axis)];
  const bool irfft = t.inverse && t.onesided;
  const int64_t bins = t.onesided && !t.inverse ? t.length / 2 + 1 : t.length;
  const int64_t out_parts = irfft ? 1 : 2;
  const double bytes =
      4.0 * static_cast<double>(signal_length * parts) * static_cast<double>(bins * out_parts);
  if (bytes > static_cast<double>(kMaxMatrixBytes)) {
    return absl::UnimplementedError(
        str_cat(e.label(), ": a transform of length ", t.length, " over ", signal_length,
                " positions needs a ", signal_length * parts, " x ", bins * out_parts, " matrix (",
                static_cast<int64_t>(bytes / (1 << 20)), " MiB); ampc makes them up to ",
                kMaxMatrixBytes >> 20, " MiB"));
  }
  const DType dtype = x->dtype();
  AMPC_ASSIGN_OR_RETURN(Value * signal, e.cast(x, dtype == DType::kF64 ? dtype : DType::kF32));
  // [..., L, ..., c] -> [others..., L, c] -> [others..., L * c]
  std::vector<int64_t> perm;
  for (int64_t d = 0; d < rank - 1; ++d) {
    if (d != t.axis) perm.push_back(d);
  }
  perm.push_back(t.axis);
  perm.push_back(rank - 1);
  std::vector<int64_t> identity(static_cast<size_t>(rank));
  std::iota(identity.begin(), identity.end(), int64_t{0});
  const bool moved = perm != identity;
  if (moved) {
    AMPC_ASSIGN_OR_RETURN(signal, e.transpose(signal, perm));
  }
  Shape rows(signal->shape().begin(), signal->shape().end() - 2);
  rows.push_back(signal_length * parts);
  AMPC_ASSIGN_OR_RETURN(signal, e.reshape(signal, rows));
  AMPC_ASSIGN_OR_RETURN(Value * weights, e.constant(transform_matrix(t, signal_length, parts, bins,
                                                                     out_parts, signal->dtype())));
  AMPC_ASSIGN_OR_RETURN(Value * product, e.op("MatMul", {signal, weights}));
  Shape split(rows.begin(), rows.end() - 1);
  split.push_back(bins);
  split.push_back(out_parts);
  const bool cast_back = product->dtype() != dtype;
  const bool last = !moved && !cast_back;
  AMPC_ASSIGN_OR_RETURN(Value * y, e.reshape(product, split, last ? output : ""));
  if (moved) {
    std::vector<int64_t> back(perm.size());
    for (size_t i = 0; i < perm.size(); ++i)
      back[static_cast<size_t>(perm[i])] = static_cast<int64_t>(i);
    AMPC_ASSIGN_OR_RETURN(
        y, e.op("Transpose", {y}, {{"perm", AttrValue(back)}}, cast_back ? "" : output));
  }
  if (cast_back) return e.op("Cast", {y}, {{"to", AttrValue(dtype)}}, output);
  return y;
}

absl::StatusOr<int64_t> known_scalar(const onnx::NodeProto& proto, int i, const std::string& label,
                                     ImportSink& sink, std::string_view what) {
  AMPC_ASSIGN_OR_RETURN(std::vector<double> values, known_floats(proto, i, label, sink));
  if (values.size() != 1) {
    return invalid(
        str_cat(label, ": ", what, " has ", values.size(), " values; it must be a scalar"));
  }
  return static_cast<int64_t>(values[0]);
}

absl::Status expect_signal(const std::string& label, Value* x, int64_t min_rank) {
  const Shape& shape = x->shape();
  if (!is_arithmetic_float(x->dtype()) || static_cast<int64_t>(shape.size()) < min_rank ||
      (shape.back() != 1 && shape.back() != 2)) {
    return invalid(str_cat(label, ": the signal is ", type_to_string(x->type()),
                           "; it must be float with ", min_rank,
                           " or more axes, the last 1 (real) or 2 (complex)"));
  }
  return absl::OkStatus();
}

}  // namespace

// DFT (opsets 17 and 20): axis an attribute (default 1) at 17, an input (default -2) at 20.
absl::Status lower_dft(const onnx::NodeProto& proto, const std::string& label, ImportSink& sink) {
  const bool axis_input = sink.opset() >= 20;
  std::map<std::string, onnx::AttributeProto::AttributeType, std::less<>> known = {
      {"inverse", onnx::AttributeProto::INT}, {"onesided", onnx::AttributeProto::INT}};
  if (!axis_input) known.emplace("axis", onnx::AttributeProto::INT);
  AMPC_ASSIGN_OR_RETURN(NodeAttributes attrs, read_attributes(proto, label, known));
  if (proto.output_size() > 1) {
    return invalid(str_cat(label, " has ", proto.output_size(), " outputs; DFT has one"));
  }
  AMPC_ASSIGN_OR_RETURN(Value * x, tensor_input(proto, 0, label, sink));
  AMPC_RETURN_IF_ERROR(expect_signal(label, x, 2));
  const auto rank = static_cast<int64_t>(x->shape().size());
  Transform t;
  t.inverse = attrs.i("inverse", 0) != 0;
  t.onesided = attrs.i("onesided", 0) != 0;
  int64_t given = attrs.i("axis", 1);
  if (axis_input) {
    given = -2;
    if (has_input(proto, 2)) {
      AMPC_ASSIGN_OR_RETURN(given, known_scalar(proto, 2, label, sink, "axis"));
    }
  }
  const int64_t axis = given < 0 ? given + rank : given;
  if (axis < 0 || axis > rank - 2) {
    return invalid(str_cat(label, ": axis ", given, " is out of range for a signal of rank ", rank,
                           " (its last axis holds the real and imaginary parts)"));
  }
  t.axis = axis;
  const int64_t signal_length = x->shape()[static_cast<size_t>(axis)];
  t.length = t.inverse && t.onesided ? 2 * (signal_length - 1) : signal_length;
  if (has_input(proto, 1)) {
    AMPC_ASSIGN_OR_RETURN(t.length, known_scalar(proto, 1, label, sink, "dft_length"));
  }
  if (t.length < 1) {
    return invalid(
        str_cat(label, ": the transform's length is ", t.length, "; it must be at least 1"));
  }
  Emitter e(proto, label, sink);
  if (e.output(0).empty()) return absl::OkStatus();
  e.pin_fp32(str_cat("the Fourier transform of ", label, " stays fp32"));
  return emit_dft(e, x, t, e.output(0)).status();
}

// STFT (opset 17): frames of frame_length samples every frame_step, weighed by the window, each
// transformed (one-sided by default): [batch, frames, bins, 2].
absl::Status lower_stft(const onnx::NodeProto& proto, const std::string& label, ImportSink& sink) {
  AMPC_ASSIGN_OR_RETURN(NodeAttributes attrs,
                        read_attributes(proto, label, {{"onesided", onnx::AttributeProto::INT}}));
  if (proto.output_size() > 1) {
    return invalid(str_cat(label, " has ", proto.output_size(), " outputs; STFT has one"));
  }
  AMPC_ASSIGN_OR_RETURN(Value * x, tensor_input(proto, 0, label, sink));
  AMPC_RETURN_IF_ERROR(expect_signal(label, x, 3));
  const Shape& shape = x->shape();
  if (shape.size() != 3) {
    return invalid(str_cat(label, ": the signal is ", shape_to_string(shape),
                           "; it must be [batch, length, 1 or 2]"));
  }
  AMPC_ASSIGN_OR_RETURN(int64_t step, known_scalar(proto, 1, label, sink, "frame_step"));
  Value* window = nullptr;
  std::optional<int64_t> frame_length;
  if (has_input(proto, 2)) {
    AMPC_ASSIGN_OR_RETURN(window, tensor_input(proto, 2, label, sink));
    if (window->shape().size() != 1 || window->dtype() != x->dtype()) {
      return invalid(str_cat(label, ": the window is ", type_to_string(window->type()),
                             "; it must be 1-D ", dtype_name(x->dtype())));
    }
    frame_length = window->shape()[0];
  }
  if (has_input(proto, 3)) {
    AMPC_ASSIGN_OR_RETURN(int64_t given, known_scalar(proto, 3, label, sink, "frame_length"));
    if (frame_length && *frame_length != given) {
      return invalid(str_cat(label, ": frame_length is ", given, " and the window has ",
                             *frame_length, " values; they must agree"));
    }
    frame_length = given;
  }
  const int64_t length = shape[1];
  const int64_t frame = frame_length.value_or(length);
  if (step < 1 || frame < 1 || frame > length) {
    return invalid(str_cat(label, ": frames of ", frame, " samples every ", step,
                           " do not fit a signal of ", length,
                           " (the step must be at least 1, a frame 1 to the signal's length)"));
  }
  const int64_t frames = 1 + (length - frame) / step;
  Emitter e(proto, label, sink);
  if (e.output(0).empty()) return absl::OkStatus();
  e.pin_fp32(str_cat("the Fourier transform of ", label, " stays fp32"));
  std::vector<int64_t> positions(static_cast<size_t>(frames * frame));
  for (int64_t f = 0; f < frames; ++f) {
    for (int64_t i = 0; i < frame; ++i)
      positions[static_cast<size_t>(f * frame + i)] = f * step + i;
  }
  AMPC_ASSIGN_OR_RETURN(Value * index, e.constant(Tensor::from_i64({frames, frame}, positions)));
  // [batch, frames, frame, c]
  AMPC_ASSIGN_OR_RETURN(Value * framed,
                        e.op("Gather", {x, index}, {{"axis", AttrValue(int64_t{1})}}));
  if (window != nullptr) {
    AMPC_ASSIGN_OR_RETURN(Value * spread, e.reshape(window, {1, 1, frame, 1}));
    AMPC_ASSIGN_OR_RETURN(framed, e.op("Mul", {framed, spread}));
  }
  Transform t;
  t.axis = 2;
  t.length = frame;
  t.onesided = attrs.i("onesided", 1) != 0;
  return emit_dft(e, framed, t, e.output(0)).status();
}

// MelWeightMatrix (opset 17): the [dft_length / 2 + 1, num_mel_bins] matrix of triangular filters
// between lower_edge_hertz and upper_edge_hertz on the mel scale, as ONNX's reference computes it
// (edges num_mel_bins + 2 steps apart, floored to spectrogram bins), in output_datatype.
absl::Status lower_mel_weight_matrix(const onnx::NodeProto& proto, const std::string& label,
                                     ImportSink& sink) {
  AMPC_ASSIGN_OR_RETURN(
      NodeAttributes attrs,
      read_attributes(proto, label, {{"output_datatype", onnx::AttributeProto::INT}}));
  if (proto.output_size() > 1) {
    return invalid(
        str_cat(label, " has ", proto.output_size(), " outputs; MelWeightMatrix has one"));
  }
  AMPC_ASSIGN_OR_RETURN(int64_t mel_bins, known_scalar(proto, 0, label, sink, "num_mel_bins"));
  AMPC_ASSIGN_OR_RETURN(int64_t dft_length, known_scalar(proto, 1, label, sink, "dft_length"));
  AMPC_ASSIGN_OR_RETURN(int64_t sample_rate, known_scalar(proto, 2, label, sink, "sample_rate"));
  AMPC_ASSIGN_OR_RETURN(std::vector<double> low, known_floats(proto, 3, label, sink));
  AMPC_ASSIGN_OR_RETURN(std::vector<double> high, known_floats(proto, 4, label, sink));
  if (mel_bins < 1 || dft_length < 1 || sample_rate < 1 || low.size() != 1 || high.size() != 1 ||
      !(low[0] >= 0 && low[0] < high[0])) {
    return invalid(str_cat(label, ": num_mel_bins ", mel_bins, ", dft_length ", dft_length,
                           ", sample_rate ", sample_rate,
                           " must be positive and 0 <= lower_edge_hertz < upper_edge_hertz"));
  }
  AMPC_ASSIGN_OR_RETURN(DType dtype, element_type_attr(attrs.i("output_datatype", 1),
                                                       str_cat(label, ": output_datatype")));
  const int64_t spectrogram_bins = dft_length / 2 + 1;
  const auto mel = [](double hz) { return 2595 * std::log1p(hz / 700) / std::log(10.0); };
  const double low_mel = mel(low[0]);
  const double step = (mel(high[0]) - low_mel) / static_cast<double>(mel_bins + 2);
  std::vector<int64_t> edge(static_cast<size_t>(mel_bins + 2));
  for (int64_t i = 0; i < mel_bins + 2; ++i) {
    const double hz =
        700 * std::expm1((static_cast<double>(i) * step + low_mel) / 2595 * std::log(10.0));
    edge[static_cast<size_t>(i)] = static_cast<int64_t>(
        std::floor(static_cast<double>(dft_length + 1) * hz / static_cast<double>(sample_rate)));
  }
  if (edge.back() >= spectrogram_bins) {
    return invalid(str_cat(label, ": upper_edge_hertz ", high[0], " lies beyond the spectrogram's ",
                           spectrogram_bins, " bins at sample_rate ", sample_rate));
  }
  std::vector<double> w(static_cast<size_t>(spectrogram_bins * mel_bins), 0.0);
  const auto at = [&](int64_t bin, int64_t m) -> double& {
    return w[static_cast<size_t>(bin * mel_bins + m)];
  };
  for (int64_t m = 0; m < mel_bins; ++m) {
    const int64_t left = edge[static_cast<size_t>(m)];
    const int64_t center = edge[static_cast<size_t>(m + 1)];
    const int64_t right = edge[static_cast<size_t>(m + 2)];
    if (center == left) {
      at(center, m) = 1;
    } else {
      for (int64_t j = left; j <= center; ++j) {
        at(j, m) = static_cast<double>(j - left) / static_cast<double>(center - left);
      }
    }
    for (int64_t j = center; j < right; ++j) {
      at(j, m) = static_cast<double>(right - j) / static_cast<double>(right - center);
    }
  }
  Emitter e(proto, label, sink);
  if (e.output(0).empty()) return absl::OkStatus();
  return e
      .op("Constant", {},
          {{"value", AttrValue(Tensor::from_doubles(dtype, {spectrogram_bins, mel_bins}, w))}},
          e.output(0))
      .status();
}

// HannWindow, HammingWindow and BlackmanWindow (opset 17): constants of `size` values (known at
// compile time), periodic (over size) by default or symmetric (over size - 1), computed in f64
// from ONNX's definitions (Hamming's alpha 25/46) and rounded once to output_datatype.
absl::Status lower_window(const onnx::NodeProto& proto, const std::string& label,
                          ImportSink& sink) {
  AMPC_ASSIGN_OR_RETURN(NodeAttributes attrs,
                        read_attributes(proto, label,
                                        {{"output_datatype", onnx::AttributeProto::INT},
                                         {"periodic", onnx::AttributeProto::INT}}));
  if (proto.output_size() > 1) {
    return invalid(
        str_cat(label, " has ", proto.output_size(), " outputs; ", proto.op_type(), " has one"));
  }
  AMPC_ASSIGN_OR_RETURN(int64_t size, known_scalar(proto, 0, label, sink, "size"));
  if (size < 1) return invalid(str_cat(label, ": size is ", size, "; it must be at least 1"));
  AMPC_ASSIGN_OR_RETURN(DType dtype, element_type_attr(attrs.i("output_datatype", 1),
                                                       str_cat(label, ": output_datatype")));
  const double period = static_cast<double>(attrs.i("periodic", 1) != 0 ? size : size - 1);
  std::vector<double> w(static_cast<size_t>(size));
  for (int64_t n = 0; n < size; ++n) {
    // A symmetric window of one value has period 0: its one value is the window's peak.
    const double phase = period == 0 ? 0.0 : 2 * std::numbers::pi * static_cast<double>(n) / period;
    double& v = w[static_cast<size_t>(n)];
    if (proto.op_type() == "HannWindow") {
      v = 0.5 - 0.5 * std::cos(phase);
    } else if (proto.op_type() == "HammingWindow") {
      v = 25.0 / 46.0 - 21.0 / 46.0 * std::cos(phase);
    } else {
      v = 0.42 - 0.5 * std::cos(phase) + 0.08 * std::cos(2 * phase);
    }
  }
  Emitter e(proto, label, sink);
  if (e.output(0).empty()) return absl::OkStatus();
  return e
      .op("Constant", {}, {{"value", AttrValue(Tensor::from_doubles(dtype, {size}, w))}},
          e.output(0))
      .status();
}

}  // namespace ampc::onnx_io::lowering
