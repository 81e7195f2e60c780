#include "tests/test_util.h"

#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "compiler/op_def.h"
#include "compiler/shape_inference.h"
#include "compiler/strings.h"
#include "runtime/backend.h"

namespace ampc::testing {

std::string source_path(std::string_view relative) {
  return (std::filesystem::path(AMPC_SOURCE_DIR) / relative).string();
}

std::string onnx_test_data_path(std::string_view relative) {
  // A machine without Debian's libonnx-testdata (the GPU machines) points here at a copy.
  const char* dir = std::getenv("AMPC_ONNX_TEST_DATA_DIR");
  return (std::filesystem::path(dir != nullptr && *dir != 0 ? dir : AMPC_ONNX_TEST_DATA_DIR) /
          relative)
      .string();
}

bool cuda_device_present() {
  static const bool present = runtime::create_backend(runtime::Device::kCuda).ok();
  return present;
}

::testing::AssertionResult same_lines(std::string_view actual, std::string_view expected) {
  auto next_line = [](std::string_view& text) {
    const size_t end = text.find('\n');
    std::string_view line = text.substr(0, end);
    text = end == std::string_view::npos ? std::string_view() : text.substr(end + 1);
    return line;
  };
  for (int line = 1; !actual.empty() || !expected.empty(); ++line) {
    const std::string_view a = next_line(actual);
    const std::string_view e = next_line(expected);
    if (a != e) {
      return ::testing::AssertionFailure()
             << "line " << line << " differs:\n  actual:   " << a.substr(0, 400)
             << "\n  expected: " << e.substr(0, 400);
    }
  }
  return ::testing::AssertionSuccess();
}

absl::StatusOr<std::vector<TensorType>> infer_op(const OpCase& op_case) {
  Graph graph("op_case");
  graph.set_opset("", op_case.domain.empty() ? op_case.opset : kDefaultOnnxOpset);
  if (!op_case.domain.empty()) graph.set_opset(op_case.domain, op_case.opset);
  std::vector<Value*> operands;
  for (int i = 0; i < static_cast<int>(op_case.input_types.size()); ++i) {
    const std::optional<TensorType>& type = op_case.input_types[i];
    Value* value = nullptr;
    for (const auto& [index, tensor] : op_case.constant_inputs) {
      if (index == i) value = graph.add_initializer(str_cat("c", i), tensor);
    }
    if (value == nullptr && type) value = graph.add_input(str_cat("x", i), *type);
    operands.push_back(value);
  }
  const OpDef* def = OpRegistry::global().find(op_case.domain, op_case.op_type, op_case.opset);
  if (def == nullptr) {
    return absl::NotFoundError(str_cat("no op ", op_case.op_type, " at opset ", op_case.opset));
  }
  const int num_outputs = op_case.num_outputs >= 0 ? op_case.num_outputs : def->min_outputs();
  std::vector<std::optional<TensorType>> placeholders(num_outputs, TensorType{});
  Node* node =
      graph.create_node(op_case.domain, op_case.op_type, operands, placeholders, op_case.attrs);
  TypePropagator propagator;
  AMPC_ASSIGN_OR_RETURN(std::vector<std::optional<TensorType>> types, propagator.visit(*node));
  std::vector<TensorType> out;
  for (const auto& type : types) out.push_back(type.value_or(TensorType{}));
  return out;
}

int run_command(const std::string& command, std::string* out, std::string* err) {
  const std::filesystem::path dir = std::filesystem::temp_directory_path();
  const std::string stem = std::to_string(::getpid()) + "_" + std::to_string(std::rand());
  const std::filesystem::path out_path = dir / ("ampc_test_out_" + stem);
  const std::filesystem::path err_path = dir / ("ampc_test_err_" + stem);
  const std::string full =
      command + " >" + out_path.string() + " 2>" + err_path.string() + " </dev/null";
  const int raw = std::system(full.c_str());
  auto slurp = [](const std::filesystem::path& p) {
    std::ifstream in(p);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  };
  if (out) *out = slurp(out_path);
  if (err) *err = slurp(err_path);
  std::filesystem::remove(out_path);
  std::filesystem::remove(err_path);
  return WIFEXITED(raw) ? WEXITSTATUS(raw) : 128 + WTERMSIG(raw);
}

}  // namespace ampc::testing
