"""ampc: a mixed-precision compiler and runtime for ONNX training graphs.

    import ampc
    ampc.compile("mlp.onnx", "mlp.train.onnx", optimizer="adamw", lr=3e-3, precision="bf16")
    session = ampc.TrainingSession("mlp.train.onnx")
    stats = session.step({"x": x, "label": y})      # {'loss': ..., 'grad_norm': ..., ...}
    session.save_checkpoint("run/checkpoint.safetensors")
    session.export("mlp.trained.onnx")

Sessions run in this process (the compiled module `ampc._ampc`); compile() and inspect() run the
`ampc` command line, whose options they take as keyword arguments. docs/python-api.md has the
whole interface.
"""
from ampc._ampc import InferenceSession, TrainingSession, __version__
from ampc._cli import AmpcError, cli_path, compile, inspect

__all__ = [
    "AmpcError",
    "BFloat16Array",
    "InferenceSession",
    "TrainingSession",
    "__version__",
    "cli_path",
    "compile",
    "inspect",
]


def __getattr__(name):
    # BFloat16Array subclasses numpy's array; imported on first use, so that `python3 -m ampc`
    # (the CLI) runs without numpy.
    if name == "BFloat16Array":
        from ampc._bfloat16 import BFloat16Array
        return BFloat16Array
    raise AttributeError(f"module 'ampc' has no attribute {name!r}")
