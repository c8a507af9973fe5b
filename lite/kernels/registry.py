"""The native kernel registry: (primitive type, dtype) -> kernel class."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

import numpy as np

from lite.kernels.base import NativeKernel
from lite.ops.dtypes import FLOATS

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


_QUANTIZED = "quantized "


def register_quantized(op_type: str, dtypes: Iterable) -> Callable[[type[NativeKernel]], type[NativeKernel]]:
    """Class decorator: ``cls`` runs quantized ``op_type`` (its first input and output carry
    QuantParams) when its first present input has one of ``dtypes``."""
    return register(_QUANTIZED + op_type, dtypes)


def find_quantized_kernel(op_type: str, dtype: np.dtype) -> type[NativeKernel] | None:
    """The kernel class registered for quantized ``op_type`` on ``dtype`` inputs, or None."""
    return find_kernel(_QUANTIZED + op_type, dtype)


_quantized_fallback: list[Callable[[str, np.dtype], type[NativeKernel] | None]] = []


def set_quantized_fallback(choose: Callable[[str, np.dtype], type[NativeKernel] | None]) -> None:
    """``choose(op_type, dtype)`` picks the kernel of a quantized op (``lite.kernels.quantized``:
    registered ones first, else the op's float kernel between dequantize and quantize)."""
    _quantized_fallback[:] = [choose]


def quantized_kernel(op_type: str, dtype: np.dtype) -> type[NativeKernel] | None:
    """The kernel class that runs quantized ``op_type`` on ``dtype`` inputs, or None."""
    if not _quantized_fallback:
        return find_quantized_kernel(op_type, dtype)
    return _quantized_fallback[0](op_type, dtype)


def find_kernel(op_type: str, dtype: np.dtype) -> type[NativeKernel] | None:
    """The kernel class for ``op_type`` on inputs of ``dtype``, or None."""
    return _REGISTRY.get((op_type, np.dtype(dtype)))


def supported_dtypes(op_type: str) -> list[np.dtype]:
    """The dtypes ``op_type`` has kernels for (empty if none)."""
    return [dtype for (op, dtype) in _REGISTRY if op == op_type]


# ---- custom ops: kernels users register for the Custom primitive ---------------------------


def kernel_key(op_type: str, attrs: Mapping[str, Any]) -> str:
    """The registry key of a node: its op type, or ``Custom:<op name>`` for a custom op."""
    return f"Custom:{attrs['type']}" if op_type == "Custom" else op_type


def register_custom_kernel(op_name: str,
                           dtypes: Iterable = FLOATS) -> Callable[[type[NativeKernel]], type[NativeKernel]]:
    """Class decorator: ``cls`` runs the custom op ``op_name`` on inputs of ``dtypes``.

    A custom op is a ``Custom`` node whose ``type`` attribute is ``op_name`` (the converter makes
    one from each node of a domain passed in ``custom_domains``). The kernel reads the op's
    attributes from ``self.attrs["attrs"]`` and implements ``infer_shapes`` (and ``output_dtypes``
    when they differ from the first input's) even where a delegate runs the op, since the runtime
    infers every shape with native kernels; ``execute`` is what runs when no delegate takes it.

    Example:
        >>> @lite.register_custom_kernel("ScaledTanh", dtypes=[np.float32])  # doctest: +SKIP
        ... class ScaledTanh(lite.NativeKernel):
        ...     def infer_shapes(self):
        ...         return [self.inputs[0].shape]
        ...     def execute(self):
        ...         a = self.attrs["attrs"]
        ...         self.outputs[0].data[...] = a["alpha"] * np.tanh(a["beta"] * self.inputs[0].data)

    Raises:
        TypeError: the decorated class is not a ``lite.NativeKernel`` subclass.
        ValueError: ``op_name`` is empty, or it already has a kernel for one of ``dtypes``
            (``unregister_custom_kernel`` removes that one).
    """
    if not isinstance(op_name, str) or not op_name:
        raise ValueError(f"a custom op name is a non-empty str, got {op_name!r}")
    key = kernel_key("Custom", {"type": op_name})
    dtypes = [np.dtype(d) for d in dtypes]

    def decorate(cls: type[NativeKernel]) -> type[NativeKernel]:
        if not (isinstance(cls, type) and issubclass(cls, NativeKernel)):
            raise TypeError(f"register_custom_kernel({op_name!r}) decorates a lite.NativeKernel subclass, not {cls!r}")
        taken = sorted({d.name for d in dtypes} & {d.name for d in supported_dtypes(key)})
        if taken:
            raise ValueError(f"custom op {op_name!r} already has a kernel for {', '.join(taken)}; "
                             f"call lite.unregister_custom_kernel({op_name!r}) first")
        return register(key, dtypes)(cls)

    return decorate


def unregister_custom_kernel(op_name: str) -> None:
    """Removes every kernel registered for the custom op ``op_name``.

    Raises:
        ValueError: no kernel is registered for it.
    """
    key = kernel_key("Custom", {"type": op_name})
    dtypes = supported_dtypes(key)
    if not dtypes:
        raise ValueError(f"no kernel is registered for custom op {op_name!r}")
    for dtype in dtypes:
        del _REGISTRY[key, dtype]
