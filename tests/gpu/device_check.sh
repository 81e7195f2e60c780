#!/usr/bin/env bash
# Every GPU check of a lent device session, in one call (docs/device-runs/README.md):
#   here:           ../shared/tools/device-bundle.sh && tests/gpu/device_check.sh --pack
#   on the GPU:     tests/gpu/device_check.sh          (device tool: carry [".device"])
# On the GPU it runs, each phase under its own time limit so one slow phase cannot eat the rest:
# the gpu-labelled tests (each binary under its own limit), training steps beside PyTorch's
# (tools/gpu_step_bench.py: GPT-2-124M, ResNet-18, an MLP, each under its own limit), the CUDA
# benchmarks and PyTorch's figures for the same workloads, `ampc bench` on the example models'
# training steps (fused and not; each fused body compiles
# with NVRTC when the session loads, before the timed steps, and is kept in $AMPC_KERNEL_CACHE),
# Nsight Compute on the bandwidth benchmarks' kernels, compute-sanitizer memcheck over
# every gpu test binary, and racecheck over the kernels that use shared memory. Logs go to
# $OUT (at most 8 files: the device tool returns no more); the last lines printed are a summary.
#   AMPC_CHECK_PHASES="tests anchors bench torch steps profile memcheck racecheck"   the phases
#                                       (default: all)
#   AMPC_ANCHORS="gpt2 mlp resnet18"   the workloads of the anchors phase
#   AMPC_ANCHORS_ATTENTION=cudnn       AMPC_CUDA_ATTENTION for the anchors (default cudnn)
#   AMPC_MEMCHECK_TESTS="cuda_forward_test ..."   the binaries memcheck runs (default: every one)
#   AMPC_RACECHECK_OPS="Softmax,..."   the ops racecheck runs (default: those with shared memory;
#                                       empty: every op)
set -uo pipefail
cd "$(dirname "$0")/../.."

if [ "${1:-}" = --pack ]; then
  # The GPU machine has no Debian packages: carry ONNX's node test data for the conformance test.
  tar -C /usr/include/onnx/backend/test/data -czf .device/onnx-node.tgz node simple
  du -sh .device
  exit 0
fi

export OUT=${OUT:-/tmp/ampc-device-check}
out=$OUT
mkdir -p "$out"
export PATH="/usr/local/cuda/bin:$PATH"  # compute-sanitizer
phases=${AMPC_CHECK_PHASES:-tests anchors bench torch steps profile memcheck racecheck}
summary=()
note() { summary+=("$1"); }
want() { [[ " $phases " == *" $1 "* ]]; }
# Runs a phase under `timeout`; 124 means it ran out of time (what it logged still comes back).
phase() {
  local name=$1 limit=$2
  shift 2
  local start=$SECONDS
  timeout --kill-after=5 "$limit" "$@"
  local rc=$?
  note "$name: exit $rc in $((SECONDS - start)) s$([ $rc = 124 ] && echo ' (time limit)')"
}

mkdir -p /tmp/onnx && tar -C /tmp/onnx -xzf .device/onnx-node.tgz
# The tests that run the CLI find it where the build put it (AMPC_BINARY, in build-device/).
[ -d .device/bin ] || tar -C .device -xzf .device/payload.tgz
mkdir -p build-device && ln -sf "$PWD/.device/bin/ampc" build-device/ampc
export AMPC_ONNX_TEST_DATA_DIR=/tmp/onnx
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv

if want tests; then
  # Each test binary under its own limit (AMPC_TEST_S), so one that hangs leaves the others their
  # time; one log and one archive of gtest XML, as `.device/run.sh gpu-tests` writes.
  xml=$(mktemp -d)
  phase gpu-tests "${AMPC_TESTS_S:-240}" bash -c '
    for t in $(cat .device/gpu-tests.txt); do
      echo "== $t"
      timeout --kill-after=5 "${AMPC_TEST_S:-120}" .device/run.sh bin/$t \
        --gtest_output="xml:'"$xml"'/$t.xml" || echo "== $t FAILED (exit $?)"
    done' >"$out/gpu-tests.log" 2>&1
  # The attention kernels' GEMM and cuDNN paths (AMPC_CUDA_ATTENTION=gemm or cudnn, not yet the
  # default) too; cudnn falls back to gemm where cuDNN does not apply.
  for path in gemm cudnn; do
    phase "gpu-tests attention=$path" "${AMPC_TEST_S:-120}" env AMPC_CUDA_ATTENTION=$path \
      AMPC_PARITY_OPS=Attention,AttentionGrad bash -c '
      for t in attention_cuda_test fused_cuda_test backend_parity_test; do
        echo "== $t (AMPC_CUDA_ATTENTION=$AMPC_CUDA_ATTENTION)"
        .device/run.sh bin/$t || echo "== $t (AMPC_CUDA_ATTENTION=$AMPC_CUDA_ATTENTION) FAILED"
      done' >>"$out/gpu-tests.log" 2>&1
  done
  tar -C "$xml" -cf "$out/gpu-tests-xml.tar" . 2>/dev/null
  note "$(grep -cE '^\[       OK \]' "$out/gpu-tests.log") ok, $(grep -cE '^\[  FAILED  \]' "$out/gpu-tests.log") failed lines, $(grep -cE '^\[  SKIPPED \]' "$out/gpu-tests.log") skipped"
fi
if want anchors; then  # training steps beside PyTorch on GPT-2-124M, ResNet-18 and an MLP
  for w in ${AMPC_ANCHORS:-gpt2 mlp resnet18}; do
    phase "anchors $w" "${AMPC_ANCHORS_S:-150}" env PYTHONUNBUFFERED=1 \
      AMPC_CUDA_ATTENTION="${AMPC_ANCHORS_ATTENTION:-cudnn}" python3 \
      tools/gpu_step_bench.py --ampc ".device/run.sh bin/ampc" --only "$w" \
      --out "/tmp/anchors-$w.json" >>"$out/anchors.txt" 2>&1
  done
  cat /tmp/anchors-*.json >"$out/anchors.json" 2>/dev/null  # one JSON document per workload
  # Where GPT-2's bf16 step goes (AMPC_PROFILE), with each attention path.
  timeout 60 python3 tools/gpu_step_bench.py --export-only /tmp/anchor-models --only gpt2 \
    >/dev/null 2>&1
  for path in rows gemm cudnn; do
    phase "profile gpt2 attention=$path" 60 env AMPC_PROFILE=1 AMPC_CUDA_ATTENTION=$path \
      .device/run.sh bin/ampc bench /tmp/anchor-models/gpt2-124m.onnx \
      --data /tmp/anchor-models/gpt2-124m.npz --device cuda --precision bf16 --optimizer adamw \
      --steps 2 --warmup 1 >>"$out/anchors.txt" 2>&1
  done
fi
if want bench; then
  phase benchmarks "${AMPC_BENCH_S:-120}" .device/run.sh bin/ampc_cuda_benchmarks \
    --benchmark_min_time=0.2 --benchmark_repetitions=3 --benchmark_report_aggregates_only=true \
    >"$out/benchmarks.txt" 2>&1
fi
if want torch; then  # PyTorch on the same workloads, for side-by-side figures
  phase torch "${AMPC_TORCH_S:-60}" python3 tools/torch_op_bench.py >"$out/torch.txt" 2>&1
fi
if want steps; then  # training steps through `ampc bench`: as built, without fusion, without graphs
  export AMPC_KERNEL_CACHE=/tmp/ampc-kernels
  for m in mlp cnn tiny_gpt; do
    for p in fp32 bf16 fp16; do
      # --comm nccl: a data-parallel group of one through NCCL, whose step beside the plain one
      # is what the bucketed all-reduce costs when the backward does not hide it (issue 17).
      for variant in "" --no-fuse "--cuda-graph off" "--comm nccl"; do
        phase "bench $m $p ${variant:-fused}" "${AMPC_STEPS_S:-60}" .device/run.sh bin/ampc bench \
          models/$m.onnx --data models/$m.train.npz --device cuda --precision $p --steps 200 \
          $variant >>"$out/steps.txt" 2>&1
      done
    done
  done
fi
if want profile; then  # Nsight Compute on one launch of each bandwidth benchmark's kernel
  for b in cast_f32_to_f16 add_f16 gelu_bf16 softmax_f16 layer_norm_f16; do
    phase "profile $b" "${AMPC_PROFILE_S:-40}" .device/run.sh ncu --clock-control none \
      --launch-skip 4 --launch-count 1 --section SpeedOfLight --section Occupancy \
      --section WarpStateStats --section SchedulerStats \
      --section LaunchStats .device/bin/ampc_cuda_benchmarks --benchmark_filter="^$b" \
      --benchmark_min_time=0.01 --benchmark_repetitions=1 >>"$out/profile.txt" 2>&1
  done
fi
if want memcheck; then  # every gpu test binary (AMPC_MEMCHECK_TESTS picks some)
  for t in ${AMPC_MEMCHECK_TESTS:-$(cat .device/gpu-tests.txt)}; do
    phase "memcheck $t" "${AMPC_MEMCHECK_S:-120}" .device/run.sh compute-sanitizer --tool memcheck \
      --error-exitcode 1 --print-limit 20 .device/bin/$t >>"$out/memcheck.log" 2>&1
  done
fi
if want racecheck; then
  AMPC_PARITY_OPS=${AMPC_RACECHECK_OPS-ReduceSum,ReduceMean,ReduceMax,ReduceL2,ArgMax,CumSum,Softmax,LogSoftmax,LayerNormalization,BatchNormalization,GlobalAveragePool,SoftmaxCrossEntropyLoss,Transpose} \
    phase racecheck "${AMPC_RACECHECK_S:-90}" .device/run.sh compute-sanitizer --tool racecheck \
    --error-exitcode 1 --print-limit 20 .device/bin/backend_parity_test \
    --gtest_filter='BackendParity.EveryOp*' >"$out/racecheck.log" 2>&1
fi

echo "==== failures"
grep -hE '^\[  FAILED  \]|FAILED$|ERROR SUMMARY: [1-9]|RACECHECK SUMMARY: [1-9]' "$out"/*.log 2>/dev/null | head -40
echo "==== benchmarks"
grep -E '_median|^-|^Benchmark' "$out/benchmarks.txt" 2>/dev/null
cat "$out/torch.txt" 2>/dev/null
echo "==== training steps beside PyTorch (tools/gpu_step_bench.py)"
grep -E '^\||error|Error|^ampc profile|ampc\.Attention|step time' "$out/anchors.txt" 2>/dev/null |
  cut -c1-300
echo "==== training steps (ampc bench)"
grep -E '^ampc bench|step time|MFU|memory|error' "$out/steps.txt" 2>/dev/null
echo "==== profiles"
grep -E '^  void |Duration|DRAM Throughput|Compute \(SM\) Throughput|Registers Per Thread|Achieved Occupancy|Warp Cycles Per Issued|No Eligible' \
  "$out/profile.txt" 2>/dev/null | sed 's/(int, [^)]*)//' | cut -c1-110
echo "==== summary"
printf '%s\n' "${summary[@]}"
