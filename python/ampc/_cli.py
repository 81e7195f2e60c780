"""compile() and inspect(): the `ampc` command line, with its options as keyword arguments."""
import json
import os
import shutil
import subprocess


class AmpcError(ValueError):
    """The command line refused its input (a bad model, an unsupported op, a bad option)."""


def cli_path():
    """The `ampc` program: $AMPC_BINARY, else the one built or installed beside this package
    (build/ampc for build/python/ampc/, <prefix>/bin/ampc for an installed package), else PATH.
    Raises RuntimeError when there is none, or $AMPC_BINARY names no executable file."""
    explicit = os.environ.get("AMPC_BINARY")
    if explicit:
        if not (os.path.isfile(explicit) and os.access(explicit, os.X_OK)):
            raise RuntimeError(f"AMPC_BINARY={explicit!r} is not an executable file (set it to "
                               "the path of the ampc command line, or unset it)")
        return explicit
    here = os.path.dirname(os.path.abspath(__file__))
    for candidate in (
        os.path.join(here, "..", "..", "ampc"),  # the build tree: build/python/ampc
        # <prefix>/lib/pythonX.Y/site-packages/ampc
        os.path.join(here, "..", "..", "..", "..", "bin", "ampc"),
    ):
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return os.path.normpath(candidate)
    found = shutil.which("ampc")
    if found is None:
        raise RuntimeError("the ampc command line was not found: set AMPC_BINARY to its path")
    return found


def _argument(call, name, value):
    """An argument of the command line: a NUL would end it early, so it is refused, as open()
    refuses a path holding one. Paths may be os.PathLike."""
    text = os.fspath(value) if isinstance(value, (str, bytes, os.PathLike)) else str(value)
    if ("\0" if isinstance(text, str) else b"\0") in text:
        raise ValueError(f"{call}: {name} {text!r} holds a NUL character (embedded null byte), "
                         "which no file name or option can")
    return text


def _flags(call, options):
    """Keyword arguments as command-line flags: lr=0.1 -> --lr 0.1, allow_tf32=True ->
    --allow-tf32, shape=["x:8x3"] -> --shape x:8x3 (a list repeats the flag)."""
    args = []
    for key, value in options.items():
        if value is None or value is False:
            continue
        flag = "--" + key.replace("_", "-")
        if value is True:
            args.append(flag)
        elif isinstance(value, (list, tuple)):
            for item in value:
                args += [flag, _argument(call, key, item)]
        else:
            args += [flag, _argument(call, key, value)]
    return args


def _run(args):
    done = subprocess.run([cli_path()] + args, capture_output=True, text=True)
    if done.returncode != 0:
        message = done.stderr.strip().removeprefix("ampc: error: ")
        raise AmpcError(message or f"ampc {' '.join(args)} exited with {done.returncode}")
    return done.stdout


def compile(model, output, **options):
    """Compiles the ONNX file `model` into `output`, as `ampc compile MODEL -o OUTPUT` would:
    every option of `ampc compile --help` is a keyword argument (optimizer="adamw", lr=3e-3,
    precision="bf16", accumulate=4, ...). Raises AmpcError with the command line's message."""
    _run(["compile", _argument("compile", "model", model), "-o",
          _argument("compile", "output", output)] + _flags("compile", options))


def inspect(path, precision=False, **options):
    """The `ampc inspect --format json` document of a model (docs/inspect-json.md) as Python
    objects; precision=True adds every node's precision and why (`--precision`)."""
    output_format = options.pop("format", "json")
    if output_format != "json":
        raise ValueError(f"inspect: format={output_format!r} is not one inspect() takes: it "
                         "returns the JSON document (format='json', the default); for the text, "
                         "run `ampc inspect PATH`")
    return json.loads(
        _run(["inspect", _argument("inspect", "path", path), "--format", "json"]
             + _flags("inspect", dict(options, precision=precision))))
