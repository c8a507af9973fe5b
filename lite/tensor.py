"""Tensor: a named, typed n-d array slot of a model."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from lite.aligned import aligned_array
from lite.errors import InputError
from lite.schema.graph import Format, QuantParams, TensorDef


class Tensor:
    """A model tensor: name, shape, dtype, layout format and (once known) its data.

    Graph inputs are filled with ``set_data_from_numpy``; outputs are read with
    ``get_data_to_numpy``. Kernels read ``inputs[i].data`` and write ``outputs[j].data``
    (preallocated by the runtime) or call ``set_data_from_numpy``.

    Attributes:
        name: tensor name from the model.
        shape: current shape (a tuple; -1 for a dynamic dim not yet known).
        dtype: numpy dtype.
        format: ``lite.Format.NCHW`` or ``NHWC``.
        is_const: True for weights and other constants from the model file.
        data: the numpy array, or None when not allocated.
        value_known: True for constants and for values the runtime computed from shapes
            alone (e.g. a Shape op's output), which are fixed until the next resize.
        quant_params: ``lite.QuantParams`` (scale, zero_point, axis, bits, block_size) of a
            quantized integer tensor, as the model file gives them; None for other tensors.
    """

    __slots__ = ("name", "shape", "dtype", "format", "is_const", "data", "declared_shape", "value_known",
                 "quant_params", "_on_reshape")

    def __init__(self, name: str, dtype: np.dtype | type, shape: tuple[int, ...] | list[int],
                 format: Format = Format.NCHW, data: np.ndarray | None = None, is_const: bool = False,
                 quant_params: QuantParams | None = None):
        self.name = name
        self.dtype = np.dtype(dtype)
        self.shape = tuple(int(d) for d in shape)
        self.declared_shape = self.shape  # as the model declares it; -1 dims are free
        self.format = Format(format)
        self.is_const = is_const
        self.data = data
        self.value_known = is_const
        self.quant_params = quant_params
        self._on_reshape: Callable[[Tensor], None] | None = None

    def __repr__(self) -> str:
        kind = "const " if self.is_const else ""
        return f"Tensor({kind}{self.name!r}, {self.dtype.name}, {self.shape})"

    @property
    def size(self) -> int:
        """Number of elements (-1 while a dim is unknown)."""
        return -1 if -1 in self.shape else int(np.prod(self.shape, dtype=np.int64))

    def set_data_from_numpy(self, array: np.ndarray) -> None:
        """Copies ``array`` into this tensor.

        The dtype must equal the tensor's; the shape must agree with every static dim the
        model declares. A new shape on a graph input resizes the model on the next predict.

        Raises:
            InputError: wrong type, dtype or shape; the tensor is left unchanged.
        """
        array = self._checked(array)
        if array.shape != self.shape or self.data is None or not self.data.flags.writeable:
            self._replace(array)
        else:
            np.copyto(self.data, array)

    def borrow(self, array: np.ndarray) -> bool:
        """Holds a read-only view of ``array`` instead of a copy, when ``array`` has this tensor's dtype
        and shape and is C-contiguous; returns whether it did (if not, nothing changed).

        The caller's array then is the tensor's data until the next one is set: the runtime reads it
        (a later ``predict(None)`` sees its current values) and never writes it.

        Raises:
            InputError: ``array`` is not a numpy array or does not fit the tensor (as ``set_data_from_numpy``).
        """
        array = self._checked(array)
        if array.shape != self.shape or not array.flags.c_contiguous:
            return False
        view = array.view()
        view.flags.writeable = False
        self.data = view
        return True

    @classmethod
    def from_def(cls, tensor: TensorDef) -> Tensor:
        """The runtime tensor of a model file's tensor (constants keep viewing the file's data)."""
        return cls(tensor.name, tensor.dtype, tensor.shape, tensor.format, data=tensor.data, is_const=tensor.is_const,
                   quant_params=tensor.quant)

    @classmethod
    def of(cls, name: str, array: np.ndarray) -> Tensor:
        """A Tensor named ``name`` holding ``array`` (not copied), with its dtype and shape."""
        return cls(name, array.dtype, array.shape, data=array)

    def snapshot(self) -> Tensor:
        """A new Tensor with the same name, dtype, shape and format and a copy of the data."""
        data = None if self.data is None else np.array(self.data, copy=True)
        return Tensor(self.name, self.dtype, self.shape, self.format, data=data, is_const=self.is_const,
                      quant_params=self.quant_params)

    def get_data_to_numpy(self) -> np.ndarray | None:
        """Returns a copy of the tensor's data (None when it has none)."""
        return None if self.data is None else np.array(self.data, copy=True)

    def _checked(self, array: np.ndarray) -> np.ndarray:
        if not isinstance(array, np.ndarray):
            raise InputError(f"tensor {self.name!r}: expected a numpy array, got {type(array).__name__}")
        if array.dtype != self.dtype:
            got = array.dtype.name if array.dtype.name != self.dtype.name else f"{array.dtype.str} (another byte order)"
            raise InputError(f"tensor {self.name!r}: expected dtype {self.dtype.name} ({self.dtype.str}), got {got}")
        if self.is_const:
            raise InputError(f"tensor {self.name!r} is a constant of the model and cannot be set")
        declared = self.declared_shape
        if len(array.shape) != len(declared) or any(
                d != -1 and d != a for d, a in zip(declared, array.shape, strict=True)):
            raise InputError(
                f"tensor {self.name!r}: shape {array.shape} does not fit the model's {declared} "
                "(-1 marks a free dim); use Model.resize for other static dims")
        return array

    def _replace(self, array: np.ndarray) -> None:
        reshaped = array.shape != self.shape
        self.data = aligned_array(array.shape, array.dtype)
        np.copyto(self.data, array)
        self.shape = array.shape
        if reshaped and self._on_reshape is not None:
            self._on_reshape(self)
