// Training data as `ampc train` reads it: an .npz with one array per model input, named after
// the input and shaped [num_batches, ...the input's shape]; batch i is every array's slice i. An
// array shaped like its input itself is one batch.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "ampc/status.h"
#include "ampc/tensor.h"
#include "runtime/session.h"

namespace ampc::runtime {

class BatchData {
 public:
  // Reads `path` and checks it against `inputs`: an array per input (no more), each of the
  // input's dtype and shaped [N, ...input shape] with one N for all (an array of the input's own
  // shape counts as N = 1). Messages name the file, the
  // array and what the model expects.
  static absl::StatusOr<BatchData> load(const std::string& path,
                                        const std::vector<TensorInfo>& inputs);
  // The same for arrays already in memory; `source` names them in messages.
  static absl::StatusOr<BatchData> from_arrays(std::map<std::string, Tensor> arrays,
                                               const std::vector<TensorInfo>& inputs,
                                               std::string_view source);

  int64_t num_batches() const { return num_batches_; }
  // Batch `index % num_batches()`, by input name.
  std::map<std::string, Tensor> batch(int64_t index) const;

 private:
  std::map<std::string, Tensor> arrays_;
  int64_t num_batches_ = 0;
};

}  // namespace ampc::runtime
