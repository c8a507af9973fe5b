"""The emitter registry: primitive type -> the function that writes it back as ONNX nodes.

Emitters are the converter's mappers run backwards (``tools/converter/mappers``), declared
the same way::

    @emitter("Conv2DFusion")
    def conv(ctx: NodeContext) -> None:
        ...

``dtypes`` lists the dtypes of the first present input onnxruntime runs the op for, usually
a group of ``lite.ops.dtypes`` (onnxruntime's CPU kernels lack float16 and the narrow integers
for most math: the ``*_32_64`` groups); a kernel on another dtype stays native. Registering a
primitive type twice raises.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from lite.ops.dtypes import FLOAT32

if TYPE_CHECKING:
    from lite.delegates.onnxruntime.context import NodeContext

Emitter = Callable[["NodeContext"], None]


@dataclass(frozen=True)
class Entry:
    """A registered emitter and the input dtypes it is used for."""

    fn: Emitter
    dtypes: frozenset[np.dtype]


class EmitterRegistry:
    """One emitter per primitive type."""

    def __init__(self) -> None:
        self._entries: dict[str, Entry] = {}

    def emitter(self, primitive_type: str, dtypes: Iterable = FLOAT32) -> Callable[[Emitter], Emitter]:
        """Decorator registering ``fn`` as the emitter of ``primitive_type``.

        Raises:
            ValueError: ``primitive_type`` already has an emitter.
        """

        def register(fn: Emitter) -> Emitter:
            if primitive_type in self._entries:
                first = self._entries[primitive_type].fn.__qualname__
                raise ValueError(f"{primitive_type} already has an emitter ({first}); "
                                 f"cannot register {fn.__qualname__}")
            self._entries[primitive_type] = Entry(fn, frozenset(np.dtype(d) for d in dtypes))
            return fn

        return register

    def find(self, primitive_type: str) -> Entry | None:
        """The entry of ``primitive_type``, or None."""
        return self._entries.get(primitive_type)

    def supported_types(self) -> list[str]:
        """Every primitive type with an emitter, sorted."""
        return sorted(self._entries)


REGISTRY = EmitterRegistry()
emitter = REGISTRY.emitter
