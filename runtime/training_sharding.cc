// The sharded optimizer's state in a TrainingSession (ZeRO stage 1; passes/data_parallel.h):
// each rank's blocks, and the low-precision copies read instead of sharded master weights.
#include <map>
#include <string_view>
#include <utility>

#include "runtime/comm/communicator.h"
#include "runtime/comm/sharding.h"
#include "runtime/training_session.h"

namespace ampc::runtime {

absl::Status TrainingSession::install_shards(std::vector<ShardedState> sharded) {
  std::map<std::string_view, const Tensor*> whole;
  for (ShardedState& state : sharded) {
    if (!state.initial.has_value()) continue;  // a moment: its blocks start at zero
    Tensor& value = *state.initial;
    if (ranks() > 1) {  // rank 0's values, as broadcast_state gives every other piece of state
      const std::span<uint8_t> bytes = value.mutable_bytes();
      AMPC_RETURN_IF_ERROR(step_->backend().context().communicator->broadcast_now(
          bytes.data(), static_cast<int64_t>(bytes.size()), DType::kU8, 0));
    }
    AMPC_ASSIGN_OR_RETURN(Tensor block, step_->initializer(state.name));
    const TensorType flat{value.dtype(), {value.num_elements()}};
    const TensorType block_type = block.type();
    comm::shard_on_host(TensorArg{&flat, value.mutable_bytes().data()},
                        TensorArg{&block_type, block.mutable_bytes().data()}, rank());
    AMPC_RETURN_IF_ERROR(step_->set_initializer(state.name, block));
    whole[state.name] = &value;
  }
  for (const LowPrecisionCopy& copy : copies_) {
    AMPC_RETURN_IF_ERROR(
        step_->set_initializer(copy.copy, narrowed(*whole.at(copy.parameter), copy.dtype)));
  }
  return absl::OkStatus();
}

void TrainingSession::read_eval_through_copies(Graph& eval) const {
  std::map<std::string, Value*, std::less<>> parameters;
  for (Value* init : eval.initializers()) parameters[init->name()] = init;
  for (const LowPrecisionCopy& copy : copies_) {
    const auto it = parameters.find(copy.parameter);
    if (it == parameters.end()) continue;  // the eval graph does not read it
    // The copy's value here does not matter: the eval graph reads the step's.
    Value* parameter = it->second;
    read_through_copy(eval, *parameter, copy, *parameter->initializer());
    eval.erase_graph_value(parameter);
  }
}

}  // namespace ampc::runtime
