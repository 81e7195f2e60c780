// Running one ONNX node test case through an InferenceSession on a device and comparing its
// outputs with the case's: the CPU conformance test (tests/onnx_execution_test.cc) and its CUDA
// twin (tests/gpu/onnx_execution_cuda_test.cc) share it. Floats: |got - want| <= atol + rtol *
// |want| per element (f32 and f64: 1e-5 and 1e-4; f16 and bf16: one unit in the last place of
// the format, as the reference rounds differently), NaN where NaN is expected; integers and bool
// exactly.
#pragma once

#include <cmath>
#include <map>

#include "compiler/onnx_common.h"
#include "runtime/session.h"
#include "tests/onnx_test_cases.h"

namespace ampc::testing {

struct Tolerance {
  double atol;
  double rtol;
};

inline Tolerance tolerance_for(DType dtype) {
  switch (dtype) {
    case DType::kF16:
      return {1e-3, 1e-3};
    case DType::kBF16:
      return {1e-2, 8e-3};
    default:
      return {1e-5, 1e-4};
  }
}

inline absl::Status compare(const Tensor& got, const Tensor& want, std::string_view what) {
  if (got.type() != want.type()) {
    return absl::InternalError(str_cat(what, " is ", type_to_string(got.type()), ", expected ",
                                       type_to_string(want.type())));
  }
  const bool exact = !is_float(want.dtype());
  const Tolerance tol = tolerance_for(want.dtype());
  for (int64_t i = 0; i < want.num_elements(); ++i) {
    const double g = got.element_as_double(i);
    const double w = want.element_as_double(i);
    bool ok;
    if (exact) {
      ok = got.element_as_i64(i) == want.element_as_i64(i);
    } else if (std::isnan(w)) {
      ok = std::isnan(g);
    } else if (std::isinf(w)) {
      ok = g == w;
    } else {
      ok = std::abs(g - w) <= tol.atol + tol.rtol * std::abs(w);
    }
    if (!ok) {
      return absl::InternalError(str_cat(what, " element ", i, " is ", g, ", expected ", w));
    }
  }
  return absl::OkStatus();
}

inline absl::StatusOr<Tensor> read_tensor(const fs::path& path, DType declared) {
  std::optional<std::string> bytes = read_bytes(path);
  onnx::TensorProto proto;
  if (!bytes || !proto.ParseFromString(*bytes)) {
    return absl::NotFoundError(str_cat("cannot read ", path.filename().string()));
  }
  // ONNX 1.12's test data stores bf16 tensors as their UINT16 bit patterns.
  if (declared == DType::kBF16 && proto.data_type() == onnx::TensorProto::UINT16) {
    proto.set_data_type(onnx::TensorProto::BFLOAT16);
  }
  return onnx_io::tensor_from_proto(proto, path.filename().string(), "");
}

// Runs the case in `dir` on `device` and compares every output with output_N.pb.
inline absl::Status run_case(const fs::path& dir, const onnx::ModelProto& model,
                             runtime::Device device = runtime::Device::kCpu) {
  const fs::path data_set = dir / "test_data_set_0";
  AMPC_ASSIGN_OR_RETURN(ImportOptions options, options_from_inputs(model, data_set));
  bool bound = false;
  AMPC_ASSIGN_OR_RETURN(std::unique_ptr<Graph> graph, import_case(dir, model, options, &bound));
  std::map<std::string, Tensor> inputs;
  if (!bound) {
    const std::vector<const onnx::ValueInfoProto*> data = data_inputs(model.graph());
    for (size_t i = 0; i < data.size(); ++i) {
      const Value* input = nullptr;
      for (const Value* v : graph->inputs()) {
        if (v->name() == data[i]->name()) input = v;
      }
      if (input == nullptr) continue;  // an input the graph does not read
      AMPC_ASSIGN_OR_RETURN(inputs[input->name()],
                            read_tensor(data_set / str_cat("input_", i, ".pb"), input->dtype()));
    }
  }
  std::vector<DType> output_dtypes;
  for (const Value* output : graph->outputs()) output_dtypes.push_back(output->dtype());
  AMPC_ASSIGN_OR_RETURN(std::unique_ptr<runtime::InferenceSession> session,
                        runtime::InferenceSession::create(
                            std::move(graph), runtime::SessionOptions{.device = device}));
  AMPC_ASSIGN_OR_RETURN(auto outputs, session->run(inputs));
  const onnx::GraphProto& proto = model.graph();
  for (int i = 0; i < proto.output_size(); ++i) {
    AMPC_ASSIGN_OR_RETURN(
        Tensor want, read_tensor(data_set / str_cat("output_", i, ".pb"), output_dtypes.at(i)));
    auto got = outputs.find(proto.output(i).name());
    if (got == outputs.end()) {
      return absl::InternalError(str_cat("no output '", proto.output(i).name(), "'"));
    }
    AMPC_RETURN_IF_ERROR(compare(got->second, want, str_cat("output '", got->first, "'")));
  }
  return absl::OkStatus();
}

}  // namespace ampc::testing
