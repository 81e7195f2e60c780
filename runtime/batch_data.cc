#include "runtime/batch_data.h"

#include "compiler/strings.h"
#include "runtime/npy.h"

namespace ampc::runtime {
namespace {

std::string describe(const std::vector<TensorInfo>& inputs) {
  std::vector<std::string> parts;
  for (const TensorInfo& info : inputs) {
    parts.push_back(str_cat(info.name, ": ", type_to_string(info.type)));
  }
  return inputs.empty() ? "none" : str_join(parts, ", ");
}

std::string batches(int64_t n) { return str_cat(n, n == 1 ? " batch" : " batches"); }

}  // namespace

absl::StatusOr<BatchData> BatchData::load(const std::string& path,
                                          const std::vector<TensorInfo>& inputs) {
  const bool any_bf16 = std::any_of(inputs.begin(), inputs.end(), [](const TensorInfo& info) {
    return info.type.dtype == DType::kBF16;
  });
  AMPC_ASSIGN_OR_RETURN(auto arrays, read_npz(path, {.void2_as_bf16 = any_bf16}));
  return from_arrays(std::move(arrays), inputs, path);
}

absl::StatusOr<BatchData> BatchData::from_arrays(std::map<std::string, Tensor> arrays,
                                                 const std::vector<TensorInfo>& inputs,
                                                 std::string_view source) {
  const std::string expected = str_cat("the model's inputs are ", describe(inputs),
                                       ", each stored as [num_batches, ...its shape] (or as its "
                                       "shape, for one batch)");
  for (const auto& entry : arrays) {
    const std::string& name = entry.first;
    const bool known = std::any_of(inputs.begin(), inputs.end(),
                                   [&](const TensorInfo& info) { return info.name == name; });
    if (!known) {
      return absl::InvalidArgumentError(
          str_cat(source, ": array '", name, "' is not an input of the model; ", expected));
    }
  }
  BatchData data;
  std::string first;                   // the array that fixed num_batches
  std::vector<std::string> unbatched;  // arrays shaped like their inputs, each read as one batch
  for (const TensorInfo& info : inputs) {
    auto it = arrays.find(info.name);
    if (it == arrays.end()) {
      return absl::InvalidArgumentError(
          str_cat(source, " has no array '", info.name, "'; ", expected));
    }
    Tensor& array = it->second;
    if (array.dtype() == info.type.dtype && array.shape() == info.type.shape) {
      // Shaped like the input itself: one batch (the example inputs a model was exported with).
      Shape one = info.type.shape;
      one.insert(one.begin(), 1);
      array = Tensor(TensorType{array.dtype(), std::move(one)},
                     std::vector<uint8_t>(array.bytes().begin(), array.bytes().end()));
      unbatched.push_back(str_cat("'", info.name, "' (", type_to_string(info.type), ")"));
    }
    const Shape& shape = array.shape();
    Shape want = info.type.shape;
    want.insert(want.begin(), shape.empty() ? 0 : shape[0]);
    if (array.dtype() != info.type.dtype || shape.empty() || shape != want || shape[0] < 1) {
      return absl::InvalidArgumentError(
          str_cat(source, ": array '", info.name, "' is ", type_to_string(array.type()),
                  "; the input is ", type_to_string(info.type), ", so the array must be ",
                  dtype_name(info.type.dtype), "[N,", str_join(info.type.shape, ","),
                  "] with N >= 1 batches (or ", type_to_string(info.type), " for one batch)"));
    }
    if (first.empty()) {
      first = info.name;
      data.num_batches_ = shape[0];
    } else if (shape[0] != data.num_batches_) {
      const std::string why =
          unbatched.empty()
              ? ""
              : str_cat(
                    "; an array shaped like its input is one batch: ", str_join(unbatched, ", "),
                    " (arrays of several batches are [num_batches, ...the input's shape])");
      return absl::InvalidArgumentError(str_cat(source, ": array '", info.name, "' holds ",
                                                batches(shape[0]), " but '", first, "' holds ",
                                                batches(data.num_batches_), why));
    }
  }
  if (inputs.empty()) {
    return absl::InvalidArgumentError(str_cat(source, ": the model has no inputs to feed"));
  }
  data.arrays_ = std::move(arrays);
  return data;
}

std::map<std::string, Tensor> BatchData::batch(int64_t index) const {
  const int64_t i = index % num_batches_;
  std::map<std::string, Tensor> batch;
  for (const auto& [name, array] : arrays_) {
    TensorType type{array.dtype(), Shape(array.shape().begin() + 1, array.shape().end())};
    const int64_t bytes = type.byte_size();
    const auto begin = array.bytes().begin() + i * bytes;
    batch.emplace(name, Tensor(type, std::vector<uint8_t>(begin, begin + bytes)));
  }
  return batch;
}

}  // namespace ampc::runtime
