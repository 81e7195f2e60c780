"""The PyTorch bridge: export a model with its loss as the one ONNX graph ampc compiles.

    import ampc, ampc.torch
    ampc.torch.export_training(model, (x, labels), torch.nn.functional.cross_entropy,
                               "model.onnx")
    ampc.compile("model.onnx", "model.train.onnx", optimizer="adamw", lr=3e-3)

Importing this module imports torch; nothing else in ampc needs it.
"""
import copy
import inspect
import os
import types
import warnings

import torch

from ampc._cli import inspect as ampc_inspect


def export_training(model, example_inputs, loss_fn, path, *, targets=1, input_names=None,
                    opset=18, exporter="auto"):
    """Writes `model` followed by `loss_fn` to `path` as an ONNX training export.

    example_inputs: a tuple of tensors: the model's inputs, then the `targets` last ones, which
        go to the loss (labels): loss = loss_fn(model(*inputs), *targets).
    input_names: names of the graph inputs, in the same order (default x0, x1, ..., then
        label, or label0, label1, ...).
    exporter: "dynamo", "torchscript", or "auto" (dynamo, then TorchScript if it fails).

    What a training export needs and a plain export gets wrong: the model in training mode
    (Dropout, batch statistics), the loss as the graph's output `loss`, parameters kept as
    initializers (no constant folding), and the initializers holding the model's weights as they
    were before the export (tracing runs forward, which moves BatchNorm's running statistics).
    Each initializer of the model's state is declared in its doc_string as ampc reads it: a
    parameter, a frozen parameter (requires_grad=False) or a buffer, so that ampc trains what
    PyTorch trains with either exporter (neither records requires_grad, and TorchScript does not
    tell a buffer from a parameter). An export whose graph lacks a trainable parameter counts as
    failed. The model passed in is not changed. Returns the exporter used.
    """
    example_inputs = tuple(example_inputs)
    path = _path(path)
    if isinstance(targets, bool) or not isinstance(targets, int):
        raise ValueError(f"targets={targets!r}: expected the number (an int) of example_inputs "
                         "that go to the loss")
    if not 0 <= targets < len(example_inputs):
        raise ValueError(f"targets={targets}, but example_inputs holds {len(example_inputs)} "
                         "tensors: the model takes the first, the loss the last `targets` "
                         f"(0 to {len(example_inputs) - 1})")
    _check_loss_arguments(loss_fn, targets)
    inputs = len(example_inputs) - targets
    if input_names is None:
        labels = ["label"] if targets == 1 else [f"label{i}" for i in range(targets)]
        input_names = [f"x{i}" if inputs > 1 else "x" for i in range(inputs)] + labels
    if len(input_names) != len(example_inputs):
        raise ValueError(f"{len(input_names)} input_names for {len(example_inputs)} inputs")
    if exporter not in ("auto", "dynamo", "torchscript"):
        raise ValueError(f"exporter={exporter!r}: expected 'auto', 'dynamo' or 'torchscript'")

    state = {k: v.detach().clone() for k, v in model.state_dict().items()}
    roles = _roles(model)
    # A copy whose forward ends in the loss: its parameter names are the model's own.
    wrapped = copy.deepcopy(model)
    forward = wrapped.forward

    def with_loss(self, *args):
        return loss_fn(forward(*args[:inputs]), *args[inputs:])

    wrapped.forward = types.MethodType(with_loss, wrapped)
    wrapped.train()

    tried = ["dynamo", "torchscript"] if exporter == "auto" else [exporter]
    errors = []
    for name in tried:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                if name == "dynamo":
                    # optimize=False: the exporter's graph optimizer folds what it takes for
                    # constants, a training-mode BatchNorm included.
                    torch.onnx.export(wrapped, example_inputs, path, dynamo=True, optimize=False,
                                      opset_version=opset, input_names=input_names,
                                      output_names=["loss"], external_data=False)
                else:
                    torch.onnx.export(wrapped, example_inputs, path, dynamo=False,
                                      opset_version=opset,
                                      training=torch.onnx.TrainingMode.TRAINING,
                                      do_constant_folding=False, input_names=input_names,
                                      output_names=["loss"])
            _check_export(path, wrapped)
            _write_state(path, state, roles)
            return name
        except Exception as e:  # the next exporter may succeed where this one failed
            errors.append(f"{name}: {type(e).__name__}: {e}")
            if os.path.exists(path):
                os.remove(path)
    raise RuntimeError("the model could not be exported:\n  " + "\n  ".join(errors))


def _path(path):
    """`path` as str or bytes (os.PathLike too); a NUL, which would cut it short, is refused."""
    path = os.fspath(path)
    if ("\0" if isinstance(path, str) else b"\0") in path:
        raise ValueError(f"export_training: path {path!r} holds a NUL character (embedded null "
                         "byte), which no file name can")
    return path


def _check_loss_arguments(loss_fn, targets):
    """Refuses, before any export, a loss_fn that cannot take the model's output and `targets`
    tensors (cross_entropy with targets=0), where its signature says so."""
    try:
        signature = inspect.signature(loss_fn).replace(return_annotation=inspect.Signature.empty)
    except (TypeError, ValueError):  # a builtin without one: the export will tell
        return
    try:
        signature.bind(None, *([None] * targets))
    except TypeError as e:
        raise ValueError(f"targets={targets}: loss_fn{signature} cannot be called with the "
                         f"model's output and {targets} target tensor(s): {e}") from None


def _check_export(path, model):
    """What a training export must hold: every trainable parameter as an initializer (or ampc
    would not train it), and BatchNormalization in training mode (batch statistics) where the
    model has a BatchNorm layer in training mode, as ampc imports the file (PyTorch 2.15's dynamo
    exporter writes training_mode=0 and records the training call in the node's metadata, which
    ampc reads)."""
    import onnx

    graph = onnx.load(path, load_external_data=False).graph
    names = {init.name for init in graph.initializer}
    missing = [n for n, p in model.named_parameters() if p.requires_grad and n not in names]
    if missing:
        raise RuntimeError(f"the exported graph lacks the parameters {', '.join(missing)} (folded"
                           " into constants or dropped)")
    if any(isinstance(m, torch.nn.modules.batchnorm._BatchNorm) and m.training
           for m in model.modules()):
        for node in ampc_inspect(path)["nodes"]:
            if (node["op"] == "BatchNormalization"
                    and node["attributes"].get("training_mode") != 1):
                raise RuntimeError(f"the exporter wrote BatchNormalization '{node['name']}' in "
                                   "inference mode (training_mode=0): it would normalize with "
                                   "the running statistics instead of the batch's")


# How ampc reads an initializer's doc_string (compiler/onnx_common.h): what the module declared it.
_PARAMETER, _FROZEN_PARAMETER, _BUFFER = "ampc: parameter", "ampc: frozen parameter", "ampc: buffer"


def _roles(model):
    """The doc_string ampc reads for each of the model's state names, tied aliases included:
    a parameter, a frozen parameter (requires_grad=False) or a buffer."""
    roles = {name: _BUFFER for name, _ in model.named_buffers(remove_duplicate=False)}
    for name, p in model.named_parameters(remove_duplicate=False):
        roles[name] = _PARAMETER if p.requires_grad else _FROZEN_PARAMETER
    return roles


def _write_state(path, state, roles):
    """Writes the pre-export values of the model's state over the initializers of that name, each
    declared in its doc_string as `roles` says."""
    import onnx
    from onnx import numpy_helper

    model = onnx.load(path)
    for init in model.graph.initializer:
        if init.name in state:
            value = state[init.name].cpu().numpy()
            if tuple(init.dims) != value.shape:
                raise RuntimeError(f"{path}: initializer {init.name} has shape {tuple(init.dims)}"
                                   f", the model's {value.shape}")
            init.CopyFrom(numpy_helper.from_array(value, init.name))
        if init.name in roles:
            init.doc_string = roles[init.name]
    onnx.save(model, path)
