#!/usr/bin/env bash
# What setup.sh builds (the target `ampc_setup`), listed from the build graph: every command
# Ninja would run to make it from nothing. It must build the CLI, both libraries and the Python
# module, and nothing from tests/ (no test, no sanitizer copy, no benchmark).
#   setup_target_test.sh BUILD_DIR PYTHON_MODULE(ON|OFF)
set -euo pipefail
build_dir=$1
commands=$(ninja -C "$build_dir" -t commands ampc_setup)
fail() {
  echo "FAIL: $*" >&2
  exit 1
}
for output in "-o ampc " "libampc_runtime.so" "libampc_compiler.so"; do
  grep -q -- "$output" <<<"$commands" || fail "ampc_setup does not build $output"
done
if [ "$2" = ON ]; then
  grep -q -- "_ampc\." <<<"$commands" || fail "ampc_setup does not build the Python module"
fi
if grep -E -- "tests/|_test\b|_asan|benchmark" <<<"$commands" | head -3 | grep -q .; then
  fail "ampc_setup builds test targets: $(grep -E -- "tests/|_test\b|_asan|benchmark" <<<"$commands" | head -3)"
fi
echo "PASS: ampc_setup runs $(wc -l <<<"$commands") commands, none for a test"
