"""bf16 arrays: numpy has no bfloat16, so ampc hands bf16 tensors out as BFloat16Array."""
import numpy as np

from ampc import _ampc


class BFloat16Array(np.ndarray):
    """A bf16 tensor as numpy holds it: ``ml_dtypes.bfloat16`` elements when that package is
    importable, else the raw bits as ``uint16``. Its ``__dlpack__`` says bfloat16 either way, so
    ``torch.from_dlpack(array)`` is a ``torch.bfloat16`` tensor over the same memory (numpy
    itself can export neither). ``to_float32()`` gives the values (exactly: bf16 is the upper half
    of an f32)."""

    def __dlpack__(self, stream=None, **_):
        if stream is not None and stream != -1:
            raise BufferError("a BFloat16Array is in host memory: it takes no stream")
        return _ampc._bfloat16_dlpack(self.view(np.ndarray))

    def __dlpack_device__(self):
        return (1, 0)  # DLPack's kDLCPU

    def to_float32(self):
        """The values as a new float32 array."""
        bits = np.ascontiguousarray(self.view(np.ndarray)).view(np.uint16)
        return (bits.astype(np.uint32) << 16).view(np.float32)
