// A folder of the running test's own under the system temp folder.
#pragma once

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>
#include <system_error>

#include "gtest/gtest.h"

namespace ampc::testing {

// The path `prefix` + process id + "_" + the running test's name, under the system temp folder.
// A parameterized test's name ("Case/3") has its '/' replaced by '_', so that the folder is one
// level deep and removing it leaves nothing behind. Not created.
inline std::filesystem::path test_temp_path(std::string_view prefix) {
  std::string name = ::testing::UnitTest::GetInstance()->current_test_info()->name();
  std::replace(name.begin(), name.end(), '/', '_');
  return std::filesystem::temp_directory_path() /
         (std::string(prefix) + std::to_string(::getpid()) + "_" + name);
}

// A folder of the running test's own (test_temp_path(prefix)), created empty and removed with
// what it holds when the object goes out of scope, however the test ends.
struct ScopedTempDir {
  explicit ScopedTempDir(std::string_view prefix) : path(test_temp_path(prefix)) {
    std::filesystem::remove_all(path);
    std::filesystem::create_directories(path);
  }
  ~ScopedTempDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path, ignored);
  }
  ScopedTempDir(const ScopedTempDir&) = delete;
  ScopedTempDir& operator=(const ScopedTempDir&) = delete;

  const std::filesystem::path path;
};

// A fixture with an empty folder of its own (a ScopedTempDir named after `prefix`), removed after
// the test.
class TempDirTest : public ::testing::Test {
 protected:
  explicit TempDirTest(std::string_view prefix) : temp_(prefix), dir_(temp_.path) {}

  // `name` in the test's folder.
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  // Writes `bytes` to `name` in the test's folder.
  void write(const std::string& name, const std::string& bytes) const {
    std::ofstream(path(name), std::ios::binary) << bytes;
  }

 private:
  ScopedTempDir temp_;  // before dir_, its path

 protected:
  std::filesystem::path dir_;
};

}  // namespace ampc::testing
