"""PyTorch's figures for the workloads of ampc_cuda_benchmarks, on the same GPU in the same run.

    python3 tools/torch_op_bench.py        # on a GPU machine whose python3 has torch

Same shapes and data as tests/benchmarks/cuda_benchmarks.cc: n x n x n matmuls (TFLOP/s, TF32
off), and cast, add, gelu, softmax and layer_norm over 65536 x 1024 elements (GB/s counting bytes
read + written). Timed with CUDA events around 20 calls, median of 5 such groups after a warm-up.
"""
import statistics

import torch
import torch.nn.functional as F

torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False
RUNS = 20


def pattern(shape, dtype):
    # The benchmarks' data: (i % 7 - 3) / 64, nonzero, exact in every float type.
    n = 1
    for d in shape:
        n *= d
    i = torch.arange(n, device="cuda", dtype=torch.int64)
    return ((i % 7 - 3).to(torch.float32) / 64).reshape(shape).to(dtype)


def median_ms(fn):
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(5):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(RUNS):
            fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) / RUNS)
    return statistics.median(times)


def main():
    print("device:", torch.cuda.get_device_name(), "torch", torch.__version__)
    rows = []
    for name, dtype in (("f16", torch.float16), ("bf16", torch.bfloat16), ("f32", torch.float32)):
        for n in (4096, 8192):
            a, b = pattern((n, n), dtype), pattern((n, n), dtype)
            ms = median_ms(lambda: torch.matmul(a, b))
            rows.append((f"torch matmul/{name}/{n}", ms, f"{2 * n**3 / ms * 1e-9:.1f} TFLOP/s"))
    shape = (65536, 1024)
    elements = shape[0] * shape[1]
    x32 = pattern(shape, torch.float32)
    x16, z16 = pattern(shape, torch.float16), pattern(shape, torch.float16)
    xbf = pattern(shape, torch.bfloat16)
    s16, b16 = pattern((1024,), torch.float16), pattern((1024,), torch.float16)
    cases = (
        ("cast_f32_to_f16", lambda: x32.to(torch.float16), 6),
        ("add_f16", lambda: x16 + z16, 6),
        ("gelu_bf16", lambda: F.gelu(xbf), 4),
        ("softmax_f16", lambda: torch.softmax(x16, -1), 4),
        ("layer_norm_f16", lambda: F.layer_norm(x16, (1024,), s16, b16), 4),
        ("memcpy_device", lambda: z16.copy_(x16), 4),
    )
    for name, fn, bytes_per_element in cases:
        ms = median_ms(fn)
        rows.append((f"torch {name}", ms, f"{bytes_per_element * elements / ms * 1e-6:.0f} GB/s"))
    for name, ms, rate in rows:
        print(f"{name:28s} {ms:9.3f} ms  {rate}")


if __name__ == "__main__":
    main()
