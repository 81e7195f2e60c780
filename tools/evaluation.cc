// --eval-data's report; tools/evaluation.h.
#include "tools/evaluation.h"

#include <cmath>
#include <iostream>
#include <map>
#include <string>
#include <vector>

#include "compiler/strings.h"
#include "fmt/format.h"
#include "runtime/batch_data.h"
#include "runtime/comm/communicator.h"

namespace ampc {
namespace {

// The class-index inputs a float output of shape [N, C, d...] can be scored against: integer
// inputs shaped [N, d...] (the labels of a classifier), by output name.
std::map<std::string, std::string> accuracy_pairs(const std::vector<runtime::TensorInfo>& inputs,
                                                  const std::vector<runtime::TensorInfo>& outputs) {
  std::map<std::string, std::string> pairs;
  for (const runtime::TensorInfo& output : outputs) {
    if (!is_float(output.type.dtype) || output.type.shape.size() < 2) continue;
    Shape without_classes = output.type.shape;
    without_classes.erase(without_classes.begin() + 1);
    for (const runtime::TensorInfo& input : inputs) {
      const bool integer = input.type.dtype == DType::kI64 || input.type.dtype == DType::kI32;
      if (integer && input.type.shape == without_classes) pairs.emplace(output.name, input.name);
    }
  }
  return pairs;
}

// How many positions of `scores` [N, C, d...] have their largest score at `labels`' class.
int64_t correct(const Tensor& scores, const Tensor& labels) {
  const int64_t n = scores.shape()[0];
  const int64_t classes = scores.shape()[1];
  const int64_t inner = scores.num_elements() / std::max<int64_t>(n * classes, 1);
  int64_t hits = 0;
  for (int64_t b = 0; b < n; ++b) {
    for (int64_t k = 0; k < inner; ++k) {
      int64_t best = 0;
      for (int64_t c = 1; c < classes; ++c) {
        if (scores.element_as_double((b * classes + c) * inner + k) >
            scores.element_as_double((b * classes + best) * inner + k)) {
          best = c;
        }
      }
      hits += labels.element_as_i64(b * inner + k) == best;
    }
  }
  return hits;
}

}  // namespace

absl::Status report_evaluation(runtime::TrainingSession& session, const runtime::BatchData& data,
                               const std::string& path, runtime::comm::Communicator* group) {
  const int rank = group != nullptr ? group->rank() : 0;
  const int ranks = group != nullptr ? group->size() : 1;
  // One sum per scalar output, then (correct, total) per classifier output, in an order every
  // rank derives from the eval graph alone.
  std::vector<std::string> scalars;
  for (const runtime::TensorInfo& output : session.eval_outputs()) {
    if (num_elements(output.type.shape) == 1) scalars.push_back(output.name);
  }
  const std::map<std::string, std::string> pairs =
      accuracy_pairs(session.eval_inputs(), session.eval_outputs());
  // The sums, then the number of batches whose scalar outputs are not all finite.
  std::vector<double> sums(scalars.size() + 2 * pairs.size() + 1);
  std::string first_non_finite;  // on this rank: "batch I: OUTPUT is nan"
  for (int64_t i = rank; i < data.num_batches(); i += ranks) {
    const std::map<std::string, Tensor> batch = data.batch(i);
    absl::StatusOr<std::map<std::string, Tensor>> evaluated = session.evaluate(batch);
    if (!evaluated.ok()) {
      return absl::Status(evaluated.status().code(),
                          str_cat("--eval-data '", path, "' batch ", i, ": ",
                                  evaluated.status().message(), " (after training)"));
    }
    const std::map<std::string, Tensor>& outputs = *evaluated;
    bool finite = true;
    for (size_t k = 0; k < scalars.size(); ++k) {
      const double value = outputs.at(scalars[k]).element_as_double(0);
      sums[k] += value;
      if (!std::isfinite(value) && finite) {
        finite = false;
        if (first_non_finite.empty()) {
          first_non_finite = fmt::format("batch {}: {} is {}", i, scalars[k],
                                         std::isnan(value) ? "NaN" : fmt::format("{}", value));
        }
      }
    }
    sums.back() += finite ? 0 : 1;
    size_t k = scalars.size();
    for (const auto& [output, label] : pairs) {
      const Tensor& labels = batch.at(label);
      sums[k++] += static_cast<double>(correct(outputs.at(output), labels));
      sums[k++] += static_cast<double>(labels.num_elements());
    }
  }
  if (ranks > 1) {
    AMPC_RETURN_IF_ERROR(group->all_reduce_now(sums.data(), static_cast<int64_t>(sums.size()),
                                               DType::kF64, runtime::comm::ReduceOp::kSum));
  }
  // Every rank fails alike, so none waits for the others.
  if (const double bad = sums.back(); bad > 0) {
    return absl::InvalidArgumentError(
        str_cat("--eval-data '", path, "': ", static_cast<int64_t>(bad), " of its ",
                data.num_batches(), " batches give a non-finite output (",
                first_non_finite.empty() ? "on another rank" : first_non_finite,
                "): NaN or inf in the data, or a diverged model (after training)"));
  }
  if (rank != 0) return absl::OkStatus();
  for (size_t k = 0; k < scalars.size(); ++k) {
    std::cerr << fmt::format("ampc: eval {} {:.6g} (mean over {} batches of {})\n", scalars[k],
                             sums[k] / static_cast<double>(data.num_batches()), data.num_batches(),
                             path);
  }
  size_t k = scalars.size();
  for (const auto& [name, label] : pairs) {
    const double hits = sums[k++], total = sums[k++];
    std::cerr << fmt::format("ampc: eval accuracy of {} {:.4f} ({} of {})\n", name, hits / total,
                             static_cast<int64_t>(hits), static_cast<int64_t>(total));
  }
  return absl::OkStatus();
}

}  // namespace ampc
