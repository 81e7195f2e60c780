// What PyTorch's dynamo exporter's optimizer (torch.onnx.export's default optimize=True) folds
// that a training model needs undone or reported (internal to compiler/onnx_*.cc):
// - it keeps one initializer of several equal ones (every norm's weight starts as ones, its bias
//   as zeros), so those parameters would train as one. Each node's FX node names the parameter
//   it read (%p_w, by its FX name in the graph signature), so a node whose parameter the file
//   does not hold is given, by the importer, a copy of what it reads under that parameter's name,
//   and a norm whose call reads no parameter (layer_norm(x, shape, None, None), whose constant
//   of ones the optimizer merged into an equal weight) a constant copy that does not train;
// - it folds a training-mode batch norm into the convolution before it, running statistics and
//   all: the convolution carries the batch norm's FX node and no BatchNormalization does. The
//   importer records such nodes (kFoldedBatchNormsKey) for the training-step pass to report.
#pragma once

#include <map>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "compiler/onnx_lowering.h"
#include "onnx/onnx_pb.h"

namespace ampc::onnx_io {

class OptimizerFolds {
 public:
  // Reads `graph`'s signature and, from its nodes' FX nodes, which initializers some node reads
  // as the parameter it names. Before the graph's nodes are imported; without a signature
  // (TorchScript exports, subgraphs) the rest does nothing.
  void read_graph(const onnx::GraphProto& graph);

  // For each node, in order, before it is imported: the inputs that read a parameter the
  // optimizer merged into another, as (input position, the parameter's name). The importer makes
  // the parameter a copy of the input's initializer where `sink` has no value of that name yet;
  // an empty name asks for a constant copy (a norm's default weight or bias merged into a
  // parameter: a normalization node whose aten norm reads no parameter, reading a uniform one).
  // Matched in order: the node's declared initializer inputs against the call's parameter and
  // buffer arguments, when there are as many of each; else (a node of the call's decomposition,
  // linear's bias Add) by the last part of their names. Only an initializer some node's FX node
  // names as itself can be the one a merge kept (a node the optimizer fused may carry another
  // call's FX node), and a parameter the file holds is never replaced.
  std::vector<std::pair<int, std::string>> read(const onnx::NodeProto& proto, ImportSink& sink);

  // The nodes that carry the FX node of a training-mode batch norm that no BatchNormalization
  // carries, sorted; after every node was read.
  std::vector<std::string> folded_batch_norms() const;

 private:
  // The parameters and buffers the call of `fx` reads, by name.
  std::vector<std::string> parameters_read(const std::string& fx) const;

  std::unordered_map<std::string, std::string> name_of_fx_name_;  // p_w -> w
  std::unordered_set<std::string> read_as_itself_;
  std::unordered_set<std::string> copied_;  // the parameters read() asked the importer to copy
  // FX nodes of training-mode batch norms: on BatchNormalization nodes, and on others with the
  // first such node's name.
  std::unordered_set<std::string> batch_norms_kept_;
  std::map<std::string, std::string> batch_norms_elsewhere_;
};

}  // namespace ampc::onnx_io
