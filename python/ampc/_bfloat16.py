"""bf16 arrays: numpy has no bfloat16, so ampc hands bf16 tensors out as BFloat16Array.

Without ml_dtypes a BFloat16Array holds bf16's raw bits as uint16, on which numpy would compute
as integers (-w of -0.00093 would be 4448, astype(float32) the bits' integer values) and call the
result bf16 still. So on the bits, numpy's ufuncs (arithmetic, comparisons, reductions), astype
to another dtype and numpy's functions that read values raise TypeError; slicing, views and the
functions that only move elements keep them bf16. With ml_dtypes numpy computes on the values,
and a result that is not bf16 comes as a plain array.
"""
import numpy as np

from ampc import _ampc

_REFUSED = ("a BFloat16Array of uint16 holds bf16's raw bits (as ampc gives bf16 without "
            "ml_dtypes), on which numpy would compute as integers: call .to_float32() for the "
            "values (np.asarray(array) is the bits as a plain uint16 array)")

# numpy's functions that only move elements (or make zeros, which are bf16's zero bits too):
# they mean on the bits what they mean on the values.
_MOVES_ELEMENTS = frozenset(
    getattr(np, name) for name in (
        "reshape", "ravel", "transpose", "swapaxes", "moveaxis", "squeeze", "expand_dims",
        "atleast_1d", "atleast_2d", "atleast_3d", "broadcast_to", "broadcast_arrays",
        "concatenate", "stack", "hstack", "vstack", "dstack", "column_stack", "split",
        "array_split", "hsplit", "vsplit", "dsplit", "flip", "fliplr", "flipud", "roll", "rot90",
        "tile", "repeat", "take", "diagonal", "copy", "copyto", "empty_like", "zeros_like",
        "shape", "ndim", "size", "may_share_memory", "shares_memory")
    if hasattr(np, name))


def _is_bf16(dtype):
    return dtype == np.uint16 or dtype.name == "bfloat16"


def _holds_bits(value):
    """Whether `value`, or an array in a list or tuple of them, is a BFloat16Array of bits."""
    if isinstance(value, BFloat16Array):
        return value.dtype == np.uint16
    if isinstance(value, (list, tuple)):
        return any(_holds_bits(item) for item in value)
    return False


def _plain(value):
    return value.view(np.ndarray) if isinstance(value, BFloat16Array) else value


def _as_bf16(result):
    """A result of ml_dtypes' bfloat16 as a BFloat16Array; anything else as it is."""
    if isinstance(result, tuple):
        return tuple(_as_bf16(item) for item in result)
    if isinstance(result, np.ndarray) and result.dtype.name == "bfloat16":
        return result.view(BFloat16Array)
    return result


class BFloat16Array(np.ndarray):
    """A bf16 tensor as numpy holds it: ``ml_dtypes.bfloat16`` elements when that package is
    importable, else the raw bits as ``uint16`` (on which numpy's arithmetic, ``astype`` and
    value-reading functions raise TypeError: call ``to_float32()``). Its ``__dlpack__`` says
    bfloat16 either way, so ``torch.from_dlpack(array)`` is a ``torch.bfloat16`` tensor over the
    same memory (numpy itself can export neither). ``to_float32()`` gives the values (exactly:
    bf16 is the upper half of an f32)."""

    # Above ndarray's 0, so that np.concatenate and np.stack of BFloat16Arrays make one.
    __array_priority__ = 1.0

    # numpy 1.x answers a comparison whose ufunc raised with a scalar and a warning: refused here.
    def __eq__(self, other):
        return self._compare(other, np.ndarray.__eq__)

    def __ne__(self, other):
        return self._compare(other, np.ndarray.__ne__)

    def __lt__(self, other):
        return self._compare(other, np.ndarray.__lt__)

    def __le__(self, other):
        return self._compare(other, np.ndarray.__le__)

    def __gt__(self, other):
        return self._compare(other, np.ndarray.__gt__)

    def __ge__(self, other):
        return self._compare(other, np.ndarray.__ge__)

    __hash__ = None  # as ndarray's: defining __eq__ must not make one

    def _compare(self, other, compare):
        if _holds_bits((self, other)):
            raise TypeError(f"comparison: {_REFUSED}")
        return compare(self, other)

    def __repr__(self):
        if self.dtype != np.uint16:
            return super().__repr__()
        prefix = "BFloat16Array("
        values = np.array2string(self.to_float32(), separator=", ", prefix=prefix)
        return f"{prefix}{values}, bf16 held as uint16 bits)"

    def __str__(self):
        return str(self.to_float32()) if self.dtype == np.uint16 else super().__str__()

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        out = kwargs.get("out", ())
        if _holds_bits(inputs) or _holds_bits(out):
            raise TypeError(f"numpy.{ufunc.__name__}: {_REFUSED}")
        if out:
            kwargs["out"] = tuple(_plain(x) for x in out)
        result = getattr(ufunc, method)(*(_plain(x) for x in inputs), **kwargs)
        if out:
            return out[0] if len(out) == 1 else out
        return _as_bf16(result)

    def __array_function__(self, func, types, args, kwargs):
        if func not in _MOVES_ELEMENTS and (_holds_bits(args) or
                                            _holds_bits(tuple(kwargs.values()))):
            raise TypeError(f"numpy.{func.__name__}: {_REFUSED}")
        return super().__array_function__(func, types, args, kwargs)

    def astype(self, dtype, *args, **kwargs):
        if self.dtype != np.uint16:
            return _as_bf16(self.view(np.ndarray).astype(dtype, *args, **kwargs))
        if np.dtype(dtype) != np.uint16:
            raise TypeError(f"astype: {_REFUSED}")
        return super().astype(dtype, *args, **kwargs)  # a copy of the bits, still bf16

    def _check_bf16(self, call):
        if not _is_bf16(self.dtype):
            raise TypeError(f"{call}: this BFloat16Array holds {self.dtype.name}, not bf16 "
                            "(uint16 bits or ml_dtypes.bfloat16)")

    def __dlpack__(self, stream=None, **_):
        if stream is not None and stream != -1:
            raise BufferError("a BFloat16Array is in host memory: it takes no stream")
        self._check_bf16("__dlpack__")
        return _ampc._bfloat16_dlpack(self.view(np.ndarray))

    def __dlpack_device__(self):
        return (1, 0)  # DLPack's kDLCPU

    def to_float32(self):
        """The values as a new float32 array."""
        self._check_bf16("to_float32")
        bits = np.ascontiguousarray(self.view(np.ndarray)).view(np.uint16)
        return (bits.astype(np.uint32) << 16).view(np.float32)
