"""Primitive: an op's type name and its attributes, as read from the model."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any


class Primitive:
    """An op type (``"Conv2DFusion"``) and its attributes (snake_case names, enum names as str).

    Example:
        >>> p = Primitive("Conv2DFusion", {"group": 1, "activation_type": "RELU"})
        >>> p.type, p.attrs["activation_type"]
        ('Conv2DFusion', 'RELU')
    """

    __slots__ = ("type", "attrs")

    def __init__(self, type: str, attrs: Mapping[str, Any] | None = None):
        self.type = type
        self.attrs: Mapping[str, Any] = MappingProxyType(dict(attrs or {}))

    def __repr__(self) -> str:
        return f"Primitive({self.type!r}, {dict(self.attrs)!r})"
