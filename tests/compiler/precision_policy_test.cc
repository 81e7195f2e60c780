// The precision policy's own checks (compiler/precision_policy.h): op entries from flags and
// policy files, conflicts that name both sources, and the precision and level names.
#include "compiler/precision_policy.h"

#include <fstream>
#include <string>
#include <string_view>
#include <utility>

#include "gtest/gtest.h"
#include "tests/temp_dir.h"

namespace ampc {
namespace {

TEST(PrecisionPolicy, EntriesAreCheckedAndConflictsNameBoth) {
  PrecisionPolicy policy;
  absl::Status unknown =
      add_op_entry(policy, "Softmaxx", AutocastCategory::kAllow, "--allow Softmaxx");
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(std::string(unknown.message()).find("no op 'Softmaxx'"), std::string::npos) << unknown;
  ASSERT_TRUE(add_op_entry(policy, "Softmax", AutocastCategory::kAllow, "--allow Softmax").ok());
  ASSERT_TRUE(add_op_entry(policy, "Softmax", AutocastCategory::kAllow, "p.json: allow").ok());
  absl::Status conflict =
      add_op_entry(policy, "Softmax", AutocastCategory::kDeny, "--deny Softmax");
  ASSERT_FALSE(conflict.ok());
  EXPECT_NE(std::string(conflict.message()).find("--allow Softmax and --deny Softmax"),
            std::string::npos)
      << conflict;

  EXPECT_EQ(*parse_precision("bf16"), DType::kBF16);
  absl::StatusOr<DType> fp8 = parse_precision("fp8");
  ASSERT_FALSE(fp8.ok());
  EXPECT_EQ(fp8.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_NE(std::string(fp8.status().message()).find("not supported yet"), std::string::npos);
  EXPECT_FALSE(parse_precision("fp64").ok());
  EXPECT_EQ(*parse_opt_level("O2"), OptLevel::kO2);
  EXPECT_FALSE(parse_opt_level("O4").ok());
}

TEST(PrecisionPolicy, PolicyFiles) {
  const testing::ScopedTempDir folder("ampc_policy_");
  const std::string path = (folder.path / "policy.json").string();
  auto read = [&](std::string_view json, PrecisionPolicy policy = {}) {
    std::ofstream(path) << json;
    absl::Status status = read_policy_file(path, policy);
    return std::make_pair(status, policy);
  };
  auto [ok, policy] = read(R"({"precision": "bf16", "opt_level": "O2", "allow": ["Softmax"],
                               "deny": ["Gelu"], "fp32_nodes": ["^head/"]})");
  ASSERT_TRUE(ok.ok()) << ok;
  EXPECT_EQ(policy.low, DType::kBF16);
  EXPECT_EQ(policy.level, OptLevel::kO2);
  EXPECT_EQ(policy.ops.at("Softmax").category, AutocastCategory::kAllow);
  EXPECT_EQ(policy.ops.at("Gelu").category, AutocastCategory::kDeny);
  ASSERT_EQ(policy.fp32_nodes.size(), 1u);
  EXPECT_EQ(policy.fp32_nodes[0].regex, "^head/");

  const struct {
    std::string_view json;
    std::string_view needle;
  } bad[] = {
      {R"({"alow": ["Softmax"]})", "unknown key \"alow\""},
      {R"({"allow": "Softmax"})", "must be a list of strings"},
      {R"({"allow": ["Softmax"], "deny": ["Softmax"]})", "allow Softmax and "},
      {R"({"allow": ["NoSuchOp"]})", "no op 'NoSuchOp'"},
      {R"({"precision": "fp8"})", "not supported yet"},
      {R"([1, 2])", "not a JSON object"},
      // Where the JSON breaks, as its parser says; a key given twice.
      {"{\"allow\": [\"Gelu\"],\n}", "not valid JSON: parse error at line 2, column 1"},
      {R"({"deny": ["Mul"], "deny": ["Add"]})", "\"deny\" is given twice"},
  };
  for (const auto& c : bad) {
    auto [status, unused] = read(c.json);
    ASSERT_FALSE(status.ok()) << c.json;
    EXPECT_NE(std::string(status.message()).find(c.needle), std::string::npos) << status;
  }
  // A file's entry that contradicts a flag names both.
  PrecisionPolicy flags;
  ASSERT_TRUE(add_op_entry(flags, "Gelu", AutocastCategory::kAllow, "--allow Gelu").ok());
  auto [conflict, merged] = read(R"({"deny": ["Gelu"]})", flags);
  ASSERT_FALSE(conflict.ok());
  EXPECT_NE(std::string(conflict.message()).find("--allow Gelu"), std::string::npos) << conflict;
}

}  // namespace
}  // namespace ampc
