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
    "InferenceSession",
    "TrainingSession",
    "__version__",
    "cli_path",
    "compile",
    "inspect",
]
