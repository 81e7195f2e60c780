// ONNX import of a model: the file's bytes, the checks that it is a model, the conversion of old
// opsets by ONNX's version converter, the model's metadata and its training_info; each graph is
// imported node by node by compiler/onnx_graph_import.h.
//
// The importer trusts nothing in the file: every malformed piece (bad protobuf, unknown op or
// attribute, wrong data size, dangling name, dynamic dim) becomes a Status that names the file
// and the node or value, never a check failure.
#include <climits>
#include <filesystem>
#include <optional>
#include <string_view>
#include <unordered_set>
#include <utility>

#include "compiler/file_util.h"
#include "compiler/onnx_common.h"
#include "compiler/onnx_graph_import.h"
#include "compiler/onnx_io.h"
#include "compiler/onnx_opset_conversion.h"
#include "compiler/strings.h"
#include "compiler/verifier.h"
#include "google/protobuf/arena.h"

namespace ampc {
namespace {

using onnx_io::invalid;

absl::Status not_a_model(std::string_view source, std::string_view why) {
  return invalid(str_cat(source, " is not an ONNX model (", why, ")"));
}

// training_info[0].algorithm becomes `eval`'s training step; update_binding its state updates.
absl::Status import_training_info(const onnx::ModelProto& model,
                                  const std::filesystem::path& base_dir, Graph& eval) {
  if (model.training_info_size() == 0) return absl::OkStatus();
  if (model.training_info_size() > 1) {
    return absl::UnimplementedError(str_cat("the model has ", model.training_info_size(),
                                            " training_info entries; ampc runs one step graph"));
  }
  const onnx::TrainingInfoProto& training = model.training_info(0);
  if (training.has_initialization() || training.initialization_binding_size() > 0) {
    return absl::UnimplementedError(
        "training_info has an initialization graph, which ampc does not run (it trains from the "
        "initializers as stored)");
  }
  if (!training.has_algorithm()) return invalid("training_info has no algorithm graph");
  absl::StatusOr<std::unique_ptr<Graph>> step =
      onnx_io::import_graph(model, training.algorithm(), ImportOptions{}, base_dir.string(), &eval);
  if (!step.ok()) {
    return absl::Status(step.status().code(), str_cat("training step: ", step.status().message()));
  }
  // Named once, not searched per binding: a step can bind tens of thousands of state tensors.
  const auto names_of = [](const std::vector<Value*>& values) {
    std::unordered_set<std::string_view> names;
    for (const Value* value : values) names.insert(value->name());
    return names;
  };
  const std::unordered_set<std::string_view> initializer_names = names_of((*step)->initializers());
  const std::unordered_set<std::string_view> output_names = names_of((*step)->outputs());
  std::unordered_set<std::string> bound;
  for (const onnx::StringStringEntryProto& binding : training.update_binding()) {
    const std::string what =
        str_cat("training_info update_binding '", binding.key(), "' <- '", binding.value(), "'");
    // An initializer the step never reads is still state (e.g. a parameter only the eval graph
    // uses would not be bound), so only the step's own names count.
    if (!initializer_names.contains(binding.key())) {
      return invalid(str_cat(what, ": the step reads no initializer '", binding.key(), "'"));
    }
    if (!output_names.contains(binding.value())) {
      return invalid(str_cat(what, ": the step has no output '", binding.value(), "'"));
    }
    if (!bound.insert(binding.key()).second) {
      return invalid(str_cat(what, ": '", binding.key(), "' is bound twice"));
    }
    (*step)->add_state_update(binding.key(), binding.value());
  }
  AMPC_RETURN_IF_ERROR(verify(**step));
  eval.set_training_step(*std::move(step));
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Graph>> import_model(const onnx::ModelProto& model,
                                                    const ImportOptions& options,
                                                    const std::filesystem::path& base_dir) {
  absl::StatusOr<std::unique_ptr<Graph>> graph =
      onnx_io::import_graph(model, model.graph(), options, base_dir.string());
  if (!graph.ok()) return graph;
  for (const onnx::StringStringEntryProto& entry : model.metadata_props()) {
    (*graph)->set_metadata(entry.key(), entry.value());
  }
  AMPC_RETURN_IF_ERROR(import_training_info(model, base_dir, **graph));
  return graph;
}

absl::StatusOr<std::unique_ptr<Graph>> import_bytes(std::string_view bytes, std::string_view source,
                                                    const ImportOptions& options,
                                                    const std::filesystem::path& base_dir) {
  // On an arena, as in export: allocated in blocks, freed at once.
  google::protobuf::Arena arena;
  onnx::ModelProto& model = *google::protobuf::Arena::CreateMessage<onnx::ModelProto>(&arena);
  if (bytes.size() > static_cast<size_t>(INT_MAX)) {
    return not_a_model(source, "larger than the 2 GiB protobuf limit; use external data");
  }
  if (!model.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) {
    return not_a_model(source, "protobuf parse failed");
  }
  if (model.ir_version() <= 0)
    return not_a_model(source, str_cat("ir_version ", model.ir_version()));

  if (!model.has_graph()) return not_a_model(source, "no graph");
  if (model.opset_import_size() == 0) return not_a_model(source, "no opset_import");
  // Below opset 11 ops had the forms ampc's gradient rules and kernels do not emit (Equal of
  // floats, Pad, Clip and Slice with attributes, ...): such a model is converted to
  // kConvertedOpset first, and imported as it is only where ONNX's converter cannot
  // convert it, and never where it would lose what the file means: a Dropout with its mask output
  // is PyTorch's training mode before opset 12 (compiler/onnx_legacy_ops.cc), which the converter
  // makes an inference Dropout.
  // From 11, a model is converted only when it fails for an op ampc implements only in a newer
  // form (else the first error stands). A converted graph holds the newer forms, and its
  // metadata says which opset the file had.
  const int64_t opset = onnx_io::default_opset(model);
  const bool training_dropout = opset < 12 && onnx_io::has_training_dropout(model);
  const bool convertible = opset > 0 && opset < onnx_io::kConvertedOpset &&
                           model.training_info_size() == 0 && !training_dropout;
  std::optional<absl::StatusOr<onnx::ModelProto>> newer;
  std::optional<absl::Status> converted_failure;
  const auto import_converted = [&]() -> absl::StatusOr<std::unique_ptr<Graph>> {
    if (!newer.has_value()) newer = onnx_io::converted_model(model);
    if (!newer->ok()) return newer->status();
    AMPC_ASSIGN_OR_RETURN(std::unique_ptr<Graph> converted,
                          import_model(**newer, options, base_dir));
    converted->set_metadata("ampc.converted_from_opset", std::to_string(opset));
    return converted;
  };
  if (convertible && opset < onnx_io::kConvertFirstBelow) {
    absl::StatusOr<std::unique_ptr<Graph>> converted = import_converted();
    if (converted.ok()) return converted;
    converted_failure = converted.status();
  }
  absl::StatusOr<std::unique_ptr<Graph>> graph = import_model(model, options, base_dir);
  if (!graph.ok() && graph.status().code() == absl::StatusCode::kUnimplemented &&
      training_dropout) {
    graph = absl::Status(
        graph.status().code(),
        str_cat(graph.status().message(), " (ampc does not convert the model to opset ",
                onnx_io::kConvertedOpset,
                " with ONNX's version converter: its Dropout with a mask output, PyTorch's "
                "training mode before opset 12, would become an inference Dropout; export the "
                "model at opset 12 or later)"));
  }
  if (!graph.ok() && graph.status().code() == absl::StatusCode::kUnimplemented && convertible) {
    absl::StatusOr<std::unique_ptr<Graph>> retry =
        converted_failure.has_value() ? *converted_failure : import_converted();
    if (retry.ok()) {
      graph = std::move(retry);
    } else {
      graph = absl::Status(
          graph.status().code(),
          str_cat(graph.status().message(), " (converted to opset ", onnx_io::kConvertedOpset,
                  " by ONNX's version converter, the model ",
                  newer->ok() ? "still fails: " : "does not convert: ", retry.status().message(),
                  ")"));
    }
  }
  if (!graph.ok()) {
    return absl::Status(graph.status().code(), str_cat(source, ": ", graph.status().message()));
  }
  return graph;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Graph>> import_onnx_file(const std::string& path,
                                                        const ImportOptions& options) {
  AMPC_ASSIGN_OR_RETURN(std::string bytes, read_regular_file(path));
  // External data is found relative to the model's folder.
  const std::filesystem::path dir = std::filesystem::path(path).parent_path();
  return import_bytes(bytes, path, options, dir.empty() ? std::filesystem::path(".") : dir);
}

absl::StatusOr<std::unique_ptr<Graph>> import_onnx_bytes(std::string_view bytes,
                                                         std::string_view source,
                                                         const ImportOptions& options) {
  return import_bytes(bytes, source, options, "");
}

}  // namespace ampc
