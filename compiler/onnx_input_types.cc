// The types of an ONNX graph's inputs: static shapes, with dynamic dims fixed by --shape, --dim
// or the data.
#include "compiler/onnx_input_types.h"

#include <algorithm>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "compiler/onnx_common.h"
#include "compiler/strings.h"

namespace ampc::onnx_io {
namespace {

// A dim of a graph input: its size, or nullopt when symbolic or unknown (with its name, if any).
struct InputDim {
  std::optional<int64_t> size;
  std::string param;
};

// A graph input as the file declares it.
struct DeclaredInput {
  std::string name;
  DType dtype = DType::kF32;
  bool has_shape = false;
  std::vector<InputDim> dims;
};

std::string dims_to_string(const std::vector<InputDim>& dims) {
  std::vector<std::string> parts;
  for (const InputDim& dim : dims) {
    parts.push_back(dim.size ? str_cat(*dim.size) : dim.param.empty() ? "?" : dim.param);
  }
  return str_cat("[", str_join(parts, ","), "]");
}

// The flags that would fix `input`'s dim `i`: --dim for a named one, and --shape with N for each
// dynamic dim.
std::string fix_hint(const DeclaredInput& input, size_t i) {
  std::vector<std::string> parts;
  for (const InputDim& dim : input.dims) parts.push_back(dim.size ? str_cat(*dim.size) : "N");
  const std::string shape = str_cat("--shape ", input.name, ":", str_join(parts, "x"));
  const std::string& param = input.dims[i].param;
  if (param.empty()) return shape;
  return str_cat("--dim ", param, "=N (every input dim named '", param, "') or ", shape);
}

absl::StatusOr<DeclaredInput> read_declaration(const onnx::ValueInfoProto& info) {
  DeclaredInput input;
  input.name = info.name();
  if (!info.has_type() || !info.type().has_tensor_type()) {
    return absl::UnimplementedError(str_cat(
        "graph input '", input.name, "' is not a tensor (ampc supports tensor inputs only)"));
  }
  const onnx::TypeProto::Tensor& tensor = info.type().tensor_type();
  absl::StatusOr<DType> dtype = from_onnx_dtype(tensor.elem_type());
  if (!dtype.ok()) {
    return absl::Status(dtype.status().code(),
                        str_cat("graph input '", input.name, "': ", dtype.status().message()));
  }
  input.dtype = *dtype;
  input.has_shape = tensor.has_shape();
  for (const onnx::TensorShapeProto::Dimension& dim : tensor.shape().dim()) {
    if (dim.has_dim_value()) {
      input.dims.push_back({dim.dim_value(), ""});
    } else {
      input.dims.push_back({std::nullopt, dim.has_dim_param() ? dim.dim_param() : ""});
    }
  }
  return input;
}

// `fixed` (from --shape) as `input`'s shape: its rank, and every static dim it keeps.
absl::Status check_fixed_shape(const DeclaredInput& input, const Shape& fixed) {
  const std::string& name = input.name;
  if (!checked_num_elements(fixed)) {
    return invalid(str_cat("--shape ", name, " gives ", shape_to_string(fixed),
                           ", which is not a valid shape"));
  }
  if (!input.has_shape) return absl::OkStatus();
  if (fixed.size() != input.dims.size()) {
    return invalid(str_cat("--shape ", name, " gives ", shape_to_string(fixed), " (rank ",
                           fixed.size(), "), but input '", name, "' has rank ", input.dims.size(),
                           " ", dims_to_string(input.dims)));
  }
  for (size_t i = 0; i < input.dims.size(); ++i) {
    if (input.dims[i].size && *input.dims[i].size != fixed[i]) {
      return invalid(str_cat("--shape ", name, " gives ", shape_to_string(fixed), ", but input '",
                             name, "' has dim ", i, " = ", *input.dims[i].size, " ",
                             dims_to_string(input.dims)));
    }
  }
  return absl::OkStatus();
}

// The sizes of named dims, each with what set it (for messages).
class NamedDims {
 public:
  absl::Status bind(const std::string& name, int64_t size, std::string source) {
    auto [it, added] = sizes_.try_emplace(name, size, source);
    if (!added && it->second.first != size) {
      return invalid(str_cat("dim '", name, "' is ", it->second.first, " by ", it->second.second,
                             " but ", size, " by ", source,
                             "; inputs whose dims share a name share the size"));
    }
    return absl::OkStatus();
  }
  const int64_t* find(const std::string& name) const {
    auto it = sizes_.find(name);
    return it == sizes_.end() ? nullptr : &it->second.first;
  }

 private:
  std::map<std::string, std::pair<int64_t, std::string>> sizes_;
};

}  // namespace

absl::StatusOr<std::vector<TensorType>> graph_input_types(
    const std::vector<const onnx::ValueInfoProto*>& inputs, const ImportOptions& options) {
  std::vector<DeclaredInput> declared;
  std::vector<std::string> names;
  std::set<std::string> params;
  for (const onnx::ValueInfoProto* info : inputs) {
    AMPC_ASSIGN_OR_RETURN(DeclaredInput input, read_declaration(*info));
    for (const InputDim& dim : input.dims) {
      if (!dim.param.empty()) params.insert(dim.param);
    }
    names.push_back(input.name);
    declared.push_back(std::move(input));
  }
  for (const auto& [name, shape] : options.input_shapes) {
    if (std::find(names.begin(), names.end(), name) == names.end()) {
      return invalid(str_cat("--shape names '", name, "', which is not a graph input (inputs: ",
                             names.empty() ? "none" : str_join(names, ", "), ")"));
    }
  }
  // Named dims: --dim first, then the names of dims a --shape fixes.
  NamedDims named;
  for (const auto& [name, size] : options.dims) {
    if (!params.contains(name)) {
      return invalid(str_cat("--dim names '", name, "', which no graph input's dim is named (",
                             params.empty() ? "no input has a named dim"
                                            : str_cat("named dims: ", str_join(params, ", ")),
                             ")"));
    }
    if (size < 0) return invalid(str_cat("--dim ", name, "=", size, " is not a size"));
    AMPC_RETURN_IF_ERROR(named.bind(name, size, str_cat("--dim ", name, "=", size)));
  }
  for (const DeclaredInput& input : declared) {
    auto fixed = options.input_shapes.find(input.name);
    if (fixed == options.input_shapes.end()) continue;
    AMPC_RETURN_IF_ERROR(check_fixed_shape(input, fixed->second));
    for (size_t i = 0; i < input.dims.size(); ++i) {
      if (input.dims[i].param.empty()) continue;
      AMPC_RETURN_IF_ERROR(
          named.bind(input.dims[i].param, fixed->second[i], str_cat("--shape ", input.name)));
    }
  }
  std::vector<TensorType> types;
  for (DeclaredInput& input : declared) {
    const std::string& name = input.name;
    if (auto fixed = options.input_shapes.find(name); fixed != options.input_shapes.end()) {
      types.push_back({input.dtype, fixed->second});
      continue;
    }
    if (!input.has_shape) {
      return invalid(str_cat("graph input '", name, "' has no shape (unknown rank); fix it with ",
                             "--shape ", name, ":DIMS, e.g. ", name, ":8x3x32x32"));
    }
    auto data = options.data_shapes.find(name);
    const Shape* data_shape = data == options.data_shapes.end() ? nullptr : &data->second;
    if (auto whole = options.data_array_shapes.find(name);
        whole != options.data_array_shapes.end() && whole->second.size() == input.dims.size() &&
        (data_shape == nullptr || data_shape->size() != input.dims.size())) {
      data_shape = &whole->second;  // one batch, shaped like the input
    }
    Shape shape;
    for (size_t i = 0; i < input.dims.size(); ++i) {
      const InputDim& dim = input.dims[i];
      const int64_t* size = dim.size ? &*dim.size : named.find(dim.param);
      if (size == nullptr && data_shape != nullptr && data_shape->size() == input.dims.size()) {
        size = &(*data_shape)[i];
        if (!dim.param.empty()) {
          AMPC_RETURN_IF_ERROR(named.bind(dim.param, *size,
                                          str_cat("the data of input '", name, "' (dim ", i, ")")));
        }
      }
      if (size == nullptr) {
        const std::string param = dim.param.empty() ? "" : str_cat(" ('", dim.param, "')");
        const std::string data_rank =
            data_shape == nullptr
                ? ""
                : str_cat(" (the array given for it, ", shape_to_string(*data_shape), ", has rank ",
                          data_shape->size(), ")");
        return invalid(str_cat("input '", name, "' has a dynamic dim ", i, param, " in ",
                               dims_to_string(input.dims), data_rank, "; fix it with ",
                               fix_hint(input, i)));
      }
      shape.push_back(*size);
    }
    if (!checked_num_elements(shape)) {
      return invalid(
          str_cat("graph input '", name, "' has invalid shape ", shape_to_string(shape)));
    }
    types.push_back({input.dtype, std::move(shape)});
  }
  return types;
}

}  // namespace ampc::onnx_io
