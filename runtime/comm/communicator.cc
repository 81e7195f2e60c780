// What every communicator shares; runtime/comm/communicator.h.
#include "runtime/comm/communicator.h"

namespace ampc::runtime::comm {

std::string_view reduce_op_name(ReduceOp op) { return op == ReduceOp::kSum ? "sum" : "max"; }

}  // namespace ampc::runtime::comm
