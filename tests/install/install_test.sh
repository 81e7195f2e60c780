#!/usr/bin/env bash
# The installed package, as someone who embeds ampc uses it (issue: the runtime as a library):
#   install_test.sh SOURCE_DIR BUILD_DIR
# installs the build to a temporary prefix, then checks that
#   - the prefix holds the CLI, versioned shared libraries with their SONAME, the public headers,
#     the CMake package and the pkg-config file; the CUDA backend's library (a CUDA build) beside
#     the runtime, which loads it from there, and no CUDA library linked by the CLI or runtime;
#   - every public header compiles on its own with nothing but the prefix and abseil;
#   - examples/embed (copied out of the source tree) configures against the prefix through
#     find_package(ampc 0.2), builds with no source- or build-tree path in its compile or link
#     lines, and trains a model the installed CLI compiled;
#   - `pkg-config --cflags --libs ampc` builds the same program, which runs.
set -euo pipefail
source_dir=$(cd "$1" && pwd)
build_dir=$(cd "$2" && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/ampc_install_test.XXXXXX")
trap 'rm -rf "$work"' EXIT
prefix="$work/prefix"

fail() {
  echo "FAIL: $*" >&2
  exit 1
}

cmake --install "$build_dir" --prefix "$prefix" >"$work/install.log"

libdir=$(cd "$prefix" && ls -d lib*/cmake/ampc | sed 's|/cmake/ampc||')
[ -x "$prefix/bin/ampc" ] || fail "no bin/ampc in the prefix"
"$prefix/bin/ampc" --version | grep -q '^ampc 0\.2\.' || fail "bin/ampc --version: $("$prefix/bin/ampc" --version)"
for lib in ampc_runtime ampc_compiler; do
  soname=$(objdump -p "$prefix/$libdir/lib$lib.so" | awk '/SONAME/ {print $2}')
  [ "$soname" = "lib$lib.so.0.2" ] || fail "lib$lib.so has SONAME '$soname', expected lib$lib.so.0.2"
  [ -f "$prefix/$libdir/$soname" ] || fail "$soname is not installed"
done
# The CUDA backend (a build with CUDA): installed beside the runtime, which loads it from there
# when asked for the cuda device; neither the CLI nor the runtime links a CUDA library.
for binary in "$prefix/bin/ampc" "$prefix/$libdir/libampc_runtime.so"; do
  if objdump -p "$binary" | grep -E 'NEEDED +lib(cudart|cublas|cudnn|nvrtc|ampc_cuda)'; then
    fail "$binary links the CUDA libraries; it should load them only for the cuda device"
  fi
done
if [ -e "$build_dir/libampc_cuda.so.0.2" ]; then
  [ -f "$prefix/$libdir/libampc_cuda.so.0.2" ] || fail "libampc_cuda.so.0.2 is not installed"
  "$prefix/bin/ampc" ops --device cuda --format json >"$work/ops.json" 2>"$work/ops.err" ||
    fail "the installed ampc ops --device cuda failed: $(cat "$work/ops.err")"
  /usr/bin/python3 -c 'import json, sys
sys.exit(not any(op["kernels"].get("cuda") for op in json.load(open(sys.argv[1]))["ops"]))' \
    "$work/ops.json" || fail "the installed ampc lists no cuda kernels: $(cat "$work/ops.err")"
fi
for file in include/ampc/session.h include/ampc/version.h "$libdir/cmake/ampc/ampcConfig.cmake" \
  "$libdir/cmake/ampc/ampcConfigVersion.cmake" "$libdir/pkgconfig/ampc.pc"; do
  [ -f "$prefix/$file" ] || fail "$file is not installed"
done

# Each public header alone, against the prefix and abseil only: nothing internal leaks.
absl_flags=$(pkg-config --cflags absl_statusor)
for header in "$prefix"/include/ampc/*.h; do
  name=ampc/$(basename "$header")
  echo "#include <$name>" >"$work/header.cc"
  g++ -std=c++20 -fsyntax-only -I"$prefix/include" $absl_flags "$work/header.cc" \
    2>"$work/header.log" || fail "$name does not compile on its own: $(cat "$work/header.log")"
done

# A model, compiled by the installed CLI.
"$prefix/bin/ampc" compile "$source_dir/models/mlp.onnx" -o "$work/mlp.train.onnx" \
  --optimizer sgd --momentum 0.9 --lr 0.05 >"$work/compile.log" 2>&1 ||
  fail "the installed CLI cannot compile models/mlp.onnx: $(cat "$work/compile.log")"

# examples/embed against the prefix, from a copy outside the source tree.
cp -r "$source_dir/examples/embed" "$work/embed"
cmake -S "$work/embed" -B "$work/embed-build" -G Ninja -DCMAKE_PREFIX_PATH="$prefix" \
  -DCMAKE_EXPORT_COMPILE_COMMANDS=ON >"$work/embed-configure.log" 2>&1 ||
  fail "examples/embed does not configure: $(cat "$work/embed-configure.log")"
cmake --build "$work/embed-build" >"$work/embed-build.log" 2>&1 ||
  fail "examples/embed does not build: $(cat "$work/embed-build.log")"
for tree in "$source_dir" "$build_dir"; do
  if grep -F -q "$tree" "$work/embed-build/build.ninja" "$work/embed-build/compile_commands.json"; then
    fail "examples/embed's build lines name $tree: $(grep -F "$tree" "$work/embed-build/build.ninja" | head -3)"
  fi
done
"$work/embed-build/embed_train" "$work/mlp.train.onnx" 20 >"$work/embed.out" ||
  fail "embed_train failed: $(cat "$work/embed.out")"
tail -1 "$work/embed.out"

# The same program through pkg-config.
export PKG_CONFIG_PATH="$prefix/$libdir/pkgconfig"
flags=$(pkg-config --cflags --libs ampc) || fail "pkg-config --cflags --libs ampc failed"
case "$flags" in
  *"$source_dir"* | *"$build_dir"*) fail "pkg-config names the source or build tree: $flags" ;;
esac
# shellcheck disable=SC2086
g++ "$work/embed/train.cc" -o "$work/embed_pc" $flags 2>"$work/pc-build.log" ||
  fail "the example does not build with pkg-config's flags ($flags): $(cat "$work/pc-build.log")"
"$work/embed_pc" "$work/mlp.train.onnx" 5 >"$work/pc.out" || fail "embed_pc failed: $(cat "$work/pc.out")"
tail -1 "$work/pc.out"

# The Python package, when it was built: importable from the prefix, finding bin/ampc there.
site=$(ls -d "$prefix"/lib*/python3*/site-packages 2>/dev/null | head -1)
if [ -n "$site" ] && [ -d "$site/ampc" ]; then
  (cd "$work" && env -u AMPC_BINARY PYTHONPATH="$site" /usr/bin/python3 -c "
import ampc, numpy as np, os
assert os.path.realpath(ampc.cli_path()) == os.path.realpath('$prefix/bin/ampc'), ampc.cli_path()
ampc.compile('$source_dir/models/mlp.onnx', 'py.train.onnx', optimizer='sgd', lr=0.05)
session = ampc.TrainingSession('py.train.onnx')
batch = {name: np.zeros(shape, dtype=np.float32 if dtype == 'f32' else np.int64)
         for name, dtype, shape in session.batch_inputs}
losses = [session.step(batch)['loss'] for _ in range(3)]
assert losses[-1] < losses[0], losses
print('python: ampc', ampc.__version__, 'loss', losses[0], '->', losses[-1])
") || fail "the installed Python package does not work"
fi
echo "PASS"
