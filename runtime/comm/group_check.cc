// The data-parallel start-up check; runtime/comm/group_check.h.
#include "runtime/comm/group_check.h"

#include <span>
#include <string>
#include <vector>

#include "compiler/strings.h"
#include "compiler/text_ir.h"
#include "runtime/checksum.h"

namespace ampc::runtime::comm {

absl::Status check_same_step(const Graph& step, Communicator& group) {
  const std::string text = print_graph(step, PrintOptions{.max_constant_elements = 16});
  const int64_t mine = crc32_of(text);
  std::vector<int64_t> all(group.size());
  AMPC_RETURN_IF_ERROR(group.all_gather(&mine, all.data(), 1, DType::kI64)->wait());
  std::vector<int> differ;
  for (int rank = 1; rank < group.size(); ++rank) {
    if (all[rank] != all[0]) differ.push_back(rank);
  }
  if (differ.empty()) return absl::OkStatus();
  return absl::FailedPreconditionError(
      str_cat(differ.size() == 1 ? "rank " : "ranks ", str_join(differ, ", "),
              differ.size() == 1 ? " loads" : " load",
              " a training step that differs from rank 0's (another model, precision, optimizer or "
              "batch size): every rank must load the same compiled model"));
}

}  // namespace ampc::runtime::comm
