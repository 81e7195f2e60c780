// Old models through ONNX's version converter (libonnx): compiler/onnx_import.cc converts a model
// whose opset is older than the forms ampc implements for one of its ops.
#pragma once

#include <cstdint>

#include "absl/status/statusor.h"
#include "onnx/onnx_pb.h"

namespace ampc::onnx_io {

// The newest ai.onnx opset whose definitions ampc implements; a model importing a later one is
// refused rather than run with semantics ampc does not know. Opsets 24 to 28 changed, for the ops
// ampc has: types ampc does not have (float8e8m0, int2, float6) added to many ops; Cast's
// `round_mode` (float8e8m0 targets only); Attention's `nonpad_kv_seqlen` input (24) and sliding
// windows (25); Range's f16/bf16 and `stash_type` (27); SpaceToDepth's `mode` and Mod's floor
// mode for floats, which ampc already had (28); and new ops: Swish (24), TensorScatter (24),
// CumProd (26), BitCast (26), CausalConvWithState and LinearAttention (27), SwiGLU (28).
inline constexpr int kNewestOnnxOpset = 28;

// The opset models are converted to: ONNX's converter (its adapters rewrite each op's older form:
// Pad's, Clip's and Slice's attributes as inputs, Upsample as Resize, BatchNormalization's
// `spatial`, ...) brings a model to this opset, which ampc covers.
inline constexpr int kConvertedOpset = 13;
// Models below this opset are converted before import.
inline constexpr int kConvertFirstBelow = 11;

// The model's default-domain opset (0 when it imports none).
int64_t default_opset(const onnx::ModelProto& model);

// Whether the model has a Dropout with its mask output, which means training before opset 12.
bool has_training_dropout(const onnx::ModelProto& model);

// `model` converted to kConvertedOpset by ONNX's version converter; an error when ONNX's checker
// rejects it (the converter trusts its input) or the converter cannot convert it.
absl::StatusOr<onnx::ModelProto> converted_model(const onnx::ModelProto& model);

}  // namespace ampc::onnx_io
