"""The native kernel registry: (primitive type, dtype) -> kernel class."""

from __future__ import annotations

from collections.abc import Callable, Iterable

import numpy as np

from lite.kernels.base import NativeKernel

FLOATS = (np.float32, np.float64, np.float16)
INTS = (np.int64, np.int32, np.int16, np.int8, np.uint8)
NUMBERS = FLOATS + INTS
ALL = NUMBERS + (np.bool_,)

_REGISTRY: dict[tuple[str, np.dtype], type[NativeKernel]] = {}


def register(op_type: str, dtypes: Iterable = FLOATS) -> Callable[[type[NativeKernel]], type[NativeKernel]]:
    """Class decorator: ``cls`` runs ``op_type`` when its first present input has one of ``dtypes``."""

    def decorate(cls: type[NativeKernel]) -> type[NativeKernel]:
        for dtype in dtypes:
            key = (op_type, np.dtype(dtype))
            if key in _REGISTRY:
                raise ValueError(f"a kernel for {op_type} on {key[1].name} is already registered")
            _REGISTRY[key] = cls
        return cls

    return decorate


def find_kernel(op_type: str, dtype: np.dtype) -> type[NativeKernel] | None:
    """The kernel class for ``op_type`` on inputs of ``dtype``, or None."""
    return _REGISTRY.get((op_type, np.dtype(dtype)))


def supported_dtypes(op_type: str) -> list[np.dtype]:
    """The dtypes ``op_type`` has kernels for (empty if none)."""
    return [dtype for (op, dtype) in _REGISTRY if op == op_type]
