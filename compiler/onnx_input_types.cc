// The types of an ONNX graph's inputs: static shapes, with dynamic dims fixed by --shape.
#include "compiler/onnx_input_types.h"

#include <optional>
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

std::string dims_to_string(const std::vector<InputDim>& dims) {
  std::vector<std::string> parts;
  for (const InputDim& dim : dims) {
    parts.push_back(dim.size ? str_cat(*dim.size) : dim.param.empty() ? "?" : dim.param);
  }
  return str_cat("[", str_join(parts, ","), "]");
}

// The `--shape` text that would fix `dims`, with N for each dynamic dim.
std::string shape_flag_hint(const std::string& name, const std::vector<InputDim>& dims) {
  std::vector<std::string> parts;
  for (const InputDim& dim : dims) parts.push_back(dim.size ? str_cat(*dim.size) : "N");
  return str_cat("--shape ", name, ":", str_join(parts, "x"));
}

absl::StatusOr<Shape> fix_input_shape(const std::string& name, const std::vector<InputDim>& dims,
                                      const Shape& fixed) {
  if (fixed.size() != dims.size()) {
    return invalid(str_cat("--shape ", name, " gives ", shape_to_string(fixed), " (rank ",
                           fixed.size(), "), but input '", name, "' has rank ", dims.size(), " ",
                           dims_to_string(dims)));
  }
  for (size_t i = 0; i < dims.size(); ++i) {
    if (dims[i].size && *dims[i].size != fixed[i]) {
      return invalid(str_cat("--shape ", name, " gives ", shape_to_string(fixed), ", but input '",
                             name, "' has dim ", i, " = ", *dims[i].size, " ",
                             dims_to_string(dims)));
    }
  }
  return fixed;
}

// The input's static shape: its dims, with dynamic ones fixed by `fixed` (from --shape).
absl::StatusOr<Shape> input_shape(const std::string& name, const onnx::TypeProto::Tensor& tensor,
                                  const Shape* fixed) {
  if (fixed != nullptr && !onnx_io::checked_num_elements(*fixed)) {
    return invalid(str_cat("--shape ", name, " gives ", shape_to_string(*fixed),
                           ", which is not a valid shape"));
  }
  if (!tensor.has_shape()) {
    if (fixed != nullptr) return *fixed;
    return invalid(str_cat("graph input '", name, "' has no shape (unknown rank); fix it with ",
                           "--shape ", name, ":DIMS, e.g. ", name, ":8x3x32x32"));
  }
  std::vector<InputDim> dims;
  for (const onnx::TensorShapeProto::Dimension& dim : tensor.shape().dim()) {
    if (dim.has_dim_value()) {
      dims.push_back({dim.dim_value(), ""});
    } else {
      dims.push_back({std::nullopt, dim.has_dim_param() ? dim.dim_param() : ""});
    }
  }
  if (fixed != nullptr) return fix_input_shape(name, dims, *fixed);
  Shape shape;
  for (int i = 0; i < static_cast<int>(dims.size()); ++i) {
    if (!dims[i].size) {
      const std::string param = dims[i].param.empty() ? "" : str_cat(" ('", dims[i].param, "')");
      return invalid(str_cat("input '", name, "' has a dynamic dim ", i, param, " in ",
                             dims_to_string(dims), "; fix it with ", shape_flag_hint(name, dims)));
    }
    shape.push_back(*dims[i].size);
  }
  if (!onnx_io::checked_num_elements(shape)) {
    return invalid(str_cat("graph input '", name, "' has invalid shape ", shape_to_string(shape)));
  }
  return shape;
}

}  // namespace

absl::StatusOr<TensorType> graph_input_type(const onnx::ValueInfoProto& info, const Shape* fixed) {
  const std::string& name = info.name();
  if (!info.has_type() || !info.type().has_tensor_type()) {
    return absl::UnimplementedError(
        str_cat("graph input '", name, "' is not a tensor (ampc supports tensor inputs only)"));
  }
  const onnx::TypeProto::Tensor& tensor = info.type().tensor_type();
  absl::StatusOr<DType> dtype = from_onnx_dtype(tensor.elem_type());
  if (!dtype.ok()) {
    return absl::Status(dtype.status().code(),
                        str_cat("graph input '", name, "': ", dtype.status().message()));
  }
  AMPC_ASSIGN_OR_RETURN(Shape shape, input_shape(name, tensor, fixed));
  return TensorType{*dtype, std::move(shape)};
}

}  // namespace ampc::onnx_io
