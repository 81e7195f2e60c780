// CudnnAttention (cudnn_attention.h) on cuDNN's C++ frontend: one graph holding one SDPA node,
// forward or backward, validated, lowered and planned at load, then executed with the run's
// pointers. The frontend is header-only; CMake fetches its pinned release (README.md) and
// defines AMPC_HAVE_CUDNN_FRONTEND when it has the headers.
#include "runtime/cuda/cudnn_attention.h"

#include <exception>
#include <map>
#include <mutex>
#include <unordered_map>
#include <utility>

#include "compiler/strings.h"

#ifdef AMPC_HAVE_CUDNN_FRONTEND
#include <cudnn_frontend.h>
#endif

namespace ampc::runtime::cuda {

#ifdef AMPC_HAVE_CUDNN_FRONTEND
namespace fe = cudnn_frontend;

namespace {

// The graph's tensor ids.
enum Uid : int64_t { kQ = 1, kK, kV, kBias, kO, kStats, kDo, kDq, kDk, kDv };

std::vector<int64_t> dense_strides(const std::vector<int64_t>& dims) {
  std::vector<int64_t> strides(dims.size(), 1);
  for (size_t k = dims.size() - 1; k > 0; --k) strides[k - 1] = strides[k] * dims[k];
  return strides;
}

std::shared_ptr<fe::graph::Tensor_attributes> input(fe::graph::Graph& graph, const char* name,
                                                    Uid uid, std::vector<int64_t> dims,
                                                    std::vector<int64_t> strides = {}) {
  if (strides.empty()) strides = dense_strides(dims);
  return graph.tensor(fe::graph::Tensor_attributes()
                          .set_name(name)
                          .set_uid(uid)
                          .set_dim(std::move(dims))
                          .set_stride(std::move(strides)));
}

void output(const std::shared_ptr<fe::graph::Tensor_attributes>& tensor, Uid uid,
            std::vector<int64_t> dims) {
  std::vector<int64_t> strides = dense_strides(dims);
  tensor->set_output(true).set_uid(uid).set_dim(std::move(dims)).set_stride(std::move(strides));
}

absl::Status fe_status(fe::error_t error, std::string_view step, const std::string& what) {
  if (error.is_good()) return absl::OkStatus();
  return absl::UnimplementedError(
      str_cat("cuDNN's fused attention takes no ", what, " (", step, "): ", error.get_message()));
}

}  // namespace

struct CudnnAttention::Graph {
  fe::graph::Graph graph;
  int64_t workspace = 0;
};

CudnnAttention::CudnnAttention(const CudnnAttentionProblem& problem) : problem_(problem) {}
CudnnAttention::~CudnnAttention() = default;

namespace {

absl::Status check_dtype(const CudnnAttentionProblem& p, const std::string& what) {
  if (p.dtype == DType::kF16 || p.dtype == DType::kBF16) return absl::OkStatus();
  return absl::UnimplementedError(
      str_cat("cuDNN's fused attention takes no ", what, " (it reads f16 or bf16 operands only)"));
}

// `p`'s SDPA node, its operands and results, in `g`.
void add_sdpa_node(const CudnnAttentionProblem& p, fe::graph::Graph& g) {
  g.set_io_data_type(p.dtype == DType::kF16 ? fe::DataType_t::HALF : fe::DataType_t::BFLOAT16)
      .set_intermediate_data_type(fe::DataType_t::FLOAT)
      .set_compute_data_type(fe::DataType_t::FLOAT);
  auto q = input(g, "Q", kQ, {p.b, p.h, p.t, p.d});
  auto k = input(g, "K", kK, {p.b, p.h, p.s, p.d});
  auto v = input(g, "V", kV, {p.b, p.h, p.s, p.dv});
  std::shared_ptr<fe::graph::Tensor_attributes> bias;
  if (p.bias_b > 0) {
    const int64_t pitch = cudnn_bias_pitch(p.s);
    bias = input(g, "bias", kBias, {p.bias_b, p.bias_h, p.t, p.s},
                 {p.bias_h * p.t * pitch, p.t * pitch, pitch, 1});
  }
  const std::vector<int64_t> rows = {p.b, p.h, p.t, p.dv};
  if (!p.backward) {
    auto options = fe::graph::SDPA_attributes()
                       .set_name("attention")
                       .set_generate_stats(p.stats)
                       .set_attn_scale(p.scale);
    if (bias != nullptr) options.set_bias(bias);
    if (p.causal) options.set_causal_mask(true);
    auto [o, stats] = g.sdpa(q, k, v, options);
    output(o, kO, rows);
    if (p.stats) {
      output(stats, kStats, {p.b, p.h, p.t, 1});
      stats->set_data_type(fe::DataType_t::FLOAT);
    }
    return;
  }
  auto o = input(g, "O", kO, rows);
  auto d_o = input(g, "dO", kDo, rows);
  auto stats = input(g, "Stats", kStats, {p.b, p.h, p.t, 1});
  stats->set_data_type(fe::DataType_t::FLOAT);
  auto options = fe::graph::SDPA_backward_attributes()
                     .set_name("attention_grad")
                     .set_attn_scale(p.scale)
                     .set_deterministic_algorithm(true);
  if (bias != nullptr) options.set_bias(bias);
  if (p.causal) options.set_causal_mask(true);
  auto [dq, dk, dv] = g.sdpa_backward(q, k, v, o, d_o, stats, options);
  output(dq, kDq, {p.b, p.h, p.t, p.d});
  output(dk, kDk, {p.b, p.h, p.s, p.d});
  output(dv, kDv, {p.b, p.h, p.s, p.dv});
}

}  // namespace

absl::StatusOr<std::shared_ptr<const CudnnAttention>> CudnnAttention::make(
    const CudnnAttentionProblem& p, cudnnHandle_t handle) {
  std::shared_ptr<CudnnAttention> attention(new CudnnAttention(p));
  const std::string what = attention->describe();
  AMPC_RETURN_IF_ERROR(check_dtype(p, what));
  attention->graph_ = std::make_unique<Graph>();
  fe::graph::Graph& g = attention->graph_->graph;
  // The frontend reports most refusals as error codes, but throws where it finds no
  // implementation for a node: either way the node takes another path.
  try {
    add_sdpa_node(p, g);
    AMPC_RETURN_IF_ERROR(fe_status(g.validate(), "validate", what));
    AMPC_RETURN_IF_ERROR(fe_status(g.build_operation_graph(handle), "operation graph", what));
    AMPC_RETURN_IF_ERROR(
        fe_status(g.create_execution_plans({fe::HeurMode_t::A, fe::HeurMode_t::FALLBACK}),
                  "execution plans", what));
    AMPC_RETURN_IF_ERROR(fe_status(g.check_support(handle), "support", what));
    AMPC_RETURN_IF_ERROR(fe_status(g.build_plans(handle), "plans", what));
    AMPC_RETURN_IF_ERROR(
        fe_status(g.get_workspace_size(attention->graph_->workspace), "workspace", what));
  } catch (const std::exception& error) {
    return absl::UnimplementedError(
        str_cat("cuDNN's fused attention takes no ", what, ": ", error.what()));
  }
  return attention;
}

int64_t CudnnAttention::workspace_bytes() const { return graph_->workspace; }

absl::Status CudnnAttention::run(cudnnHandle_t handle, const CudnnAttentionArgs& a,
                                 void* workspace) const {
  const CudnnAttentionProblem& p = problem_;
  std::unordered_map<int64_t, void*> pointers = {
      {kQ, const_cast<void*>(a.q)}, {kK, const_cast<void*>(a.k)}, {kV, const_cast<void*>(a.v)}};
  if (p.bias_b > 0) pointers[kBias] = const_cast<void*>(a.bias);
  if (!p.backward) {
    pointers[kO] = a.o;
    if (p.stats) pointers[kStats] = a.stats;
  } else {
    pointers[kO] = const_cast<void*>(a.o_in);
    pointers[kDo] = const_cast<void*>(a.d_o);
    pointers[kStats] = const_cast<float*>(a.stats_in);  // read only: the variant pack is void*
    pointers[kDq] = a.dq;
    pointers[kDk] = a.dk;
    pointers[kDv] = a.dv;
  }
  fe::error_t error = graph_->graph.execute(handle, pointers, workspace);
  if (error.is_good()) return absl::OkStatus();
  return absl::InternalError(
      str_cat("cuDNN's fused attention (", describe(), ") failed: ", error.get_message()));
}

#else  // !AMPC_HAVE_CUDNN_FRONTEND

struct CudnnAttention::Graph {};

CudnnAttention::CudnnAttention(const CudnnAttentionProblem& problem) : problem_(problem) {}
CudnnAttention::~CudnnAttention() = default;

absl::StatusOr<std::shared_ptr<const CudnnAttention>> CudnnAttention::make(
    const CudnnAttentionProblem& p, cudnnHandle_t /*handle*/) {
  const CudnnAttention attention(p);
  return absl::UnimplementedError(str_cat("cuDNN's fused attention takes no ", attention.describe(),
                                          " (this build has no cuDNN frontend: CMake's "
                                          "AMPC_CUDNN_FRONTEND)"));
}

int64_t CudnnAttention::workspace_bytes() const { return 0; }

absl::Status CudnnAttention::run(cudnnHandle_t /*handle*/, const CudnnAttentionArgs& /*args*/,
                                 void* /*workspace*/) const {
  return absl::InternalError("this build has no cuDNN frontend");
}

#endif  // AMPC_HAVE_CUDNN_FRONTEND

absl::StatusOr<std::shared_ptr<const CudnnAttention>> CudnnAttention::create(
    const CudnnAttentionProblem& p, cudnnHandle_t handle) {
  using Key = std::pair<cudnnHandle_t, decltype(key(p))>;
  static std::mutex mutex;
  static auto* built = new std::map<Key, std::weak_ptr<const CudnnAttention>>();
  // Why a problem has no graph, so that a GPT's layers of one shape ask cuDNN's heuristics and
  // support checks once, not once a node (a refusal sends the node to another path, whatever
  // its cause).
  static auto* refused = new std::map<Key, absl::Status>();
  const std::lock_guard lock(mutex);
  const Key k(handle, key(p));
  if (auto it = built->find(k); it != built->end()) {
    if (std::shared_ptr<const CudnnAttention> shared = it->second.lock()) return shared;
  }
  if (auto it = refused->find(k); it != refused->end()) return it->second;
  absl::StatusOr<std::shared_ptr<const CudnnAttention>> made = make(p, handle);
  if (!made.ok()) return refused->emplace(k, made.status()).first->second;
  std::shared_ptr<const CudnnAttention> attention = *std::move(made);
  std::erase_if(*built, [](const auto& entry) { return entry.second.expired(); });
  (*built)[k] = attention;
  return attention;
}

std::string CudnnAttention::describe() const {
  const CudnnAttentionProblem& p = problem_;
  std::string text = str_cat(p.backward ? "backward " : "forward ", dtype_name(p.dtype), " b ", p.b,
                             " h ", p.h, " T ", p.t, " S ", p.s, " D ", p.d, " Dv ", p.dv);
  if (p.bias_b > 0) text += str_cat(", bias [", p.bias_b, ", ", p.bias_h, "]");
  if (p.causal) text += ", causal";
  return text;
}

}  // namespace ampc::runtime::cuda
