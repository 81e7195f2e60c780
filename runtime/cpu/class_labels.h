// What the loss kernels and their gradient kernels share: the [N, C, D] view of class scores and
// the checking of class-index labels (read them with index_values, runtime/cpu/slicing.h).
#pragma once

#include <cstdint>
#include <optional>
#include <variant>
#include <vector>

#include "compiler/strings.h"
#include "runtime/kernel.h"

namespace ampc::runtime::cpu {

// The [N, C, D] view of scores [N, C, d1, ..., dk], D = d1 * ... * dk; sample s = n * D + d.
struct ClassLayout {
  int64_t classes = 1, spatial = 1, samples = 0;
};

inline ClassLayout class_layout(const Shape& scores) {
  ClassLayout layout;
  layout.classes = scores[1];
  for (size_t d = 2; d < scores.size(); ++d) layout.spatial *= scores[d];
  layout.samples = scores[0] * layout.spatial;
  return layout;
}

inline std::optional<int64_t> ignore_index(const Node& node) {
  const AttrValue* value = node.find_attr("ignore_index");
  if (value == nullptr) return std::nullopt;
  return std::get<int64_t>(*value);
}

// Fails on the first label outside [0, classes) that is not ignored, naming its index in
// `label_shape`.
inline absl::Status check_labels(const std::vector<int64_t>& labels, const Shape& label_shape,
                                 int64_t classes, std::optional<int64_t> ignored) {
  for (size_t s = 0; s < labels.size(); ++s) {
    const int64_t label = labels[s];
    if (label == ignored || (label >= 0 && label < classes)) continue;
    std::vector<int64_t> index(label_shape.size());
    int64_t rest = static_cast<int64_t>(s);
    for (size_t d = label_shape.size(); d-- > 0;) {
      index[d] = rest % label_shape[d];
      rest /= label_shape[d];
    }
    return absl::InvalidArgumentError(str_cat(
        "label ", label, " at index [", str_join(index, ", "), "] is out of range [0, ", classes,
        ")", ignored ? str_cat(" and is not ignore_index ", *ignored) : std::string()));
  }
  return absl::OkStatus();
}

}  // namespace ampc::runtime::cpu
