#include "compiler/onnx_detach.h"

#include <set>
#include <vector>

#include "compiler/onnx_metadata.h"
#include "compiler/strings.h"

namespace ampc::onnx_io {
namespace {

// The positions of the node's inputs that `detached` (per tensor argument of the call `names`,
// the detach's name or empty) took.
std::vector<int> detached_positions(const onnx::NodeProto& proto,
                                    const std::vector<std::string>& names,
                                    const std::vector<std::string>& detached, size_t call,
                                    const std::unordered_map<std::string, size_t>& made_by_call,
                                    ImportSink& sink) {
  const auto value_of = [&](const std::string& name) {
    return name.empty() ? nullptr : sink.tensor(name);
  };
  const auto constant = [&](const std::string& name) {
    const Value* value = value_of(name);
    return name.empty() || (value != nullptr && sink.known_value(value) != nullptr);
  };
  const auto initializer = [&](const std::string& name) {
    const Value* value = value_of(name);
    return value != nullptr && value->kind() == Value::Kind::kInitializer;
  };
  const int args = static_cast<int>(detached.size());
  bool in_order = args <= proto.input_size();
  for (int i = 0; in_order && i < proto.input_size(); ++i) {
    if (i >= args) {
      in_order = constant(proto.input(i));
    } else if (detached[i].empty()) {
      in_order = proto.input(i) == names[i] || initializer(proto.input(i));
    }
  }
  std::vector<int> positions;
  if (in_order) {
    for (int i = 0; i < args; ++i) {
      if (!detached[i].empty()) positions.push_back(i);
    }
    return positions;
  }
  std::set<std::string, std::less<>> listed;
  for (int i = 0; i < args; ++i) {
    if (detached[i].empty()) listed.insert(names[i]);
  }
  for (int i = 0; i < proto.input_size(); ++i) {
    const std::string& name = proto.input(i);
    const auto made = made_by_call.find(name);
    if (value_of(name) == nullptr || initializer(name) || listed.contains(name) || constant(name) ||
        (made != made_by_call.end() && made->second == call)) {
      continue;
    }
    positions.push_back(i);
  }
  return positions;
}

}  // namespace

absl::StatusOr<std::optional<onnx::NodeProto>> DetachedInputs::read(const onnx::NodeProto& proto,
                                                                    ImportSink& sink) {
  const std::optional<std::string> fx = torch_fx_node(proto);
  if (!fx) return std::nullopt;
  const size_t call = std::hash<std::string>{}(*fx);
  std::vector<std::string> detached = torch_detached_tensor_args(*fx);
  // A detach() the file still holds (an unoptimized export) is a node of its own.
  bool any = false;
  for (std::string& name : detached) {
    if (!name.empty() && sink.tensor(name) != nullptr) name.clear();
    any |= !name.empty();
  }
  std::vector<int> positions;
  if (any) {
    positions =
        detached_positions(proto, torch_tensor_args(*fx), detached, call, made_by_call_, sink);
  }
  for (const std::string& output : proto.output()) made_by_call_[output] = call;
  if (positions.empty()) return std::nullopt;
  onnx::NodeProto rewired = proto;
  for (const int i : positions) {
    Value* value = sink.tensor(proto.input(i));
    if (value == nullptr || !is_arithmetic_float(value->dtype())) continue;
    const std::string name = sink.fresh_name(str_cat(proto.input(i), "/detached"));
    AMPC_ASSIGN_OR_RETURN(std::vector<Value*> outputs,
                          sink.emit("Identity", {value}, {{"stop_gradient", AttrValue(int64_t{1})}},
                                    {name}, str_cat(proto.name(), "/detach_", i)));
    rewired.set_input(i, outputs[0]->name());
  }
  return rewired;
}

}  // namespace ampc::onnx_io
