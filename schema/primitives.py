"""Primitive attributes <-> flatbuffers op tables, driven by the generated code.

Attributes are plain Python values keyed by the snake_case field names of ops.fbs:
ints, floats, bools, tuples for vectors, and the enum's name for enum fields.
"""

from __future__ import annotations

import importlib
import re
from typing import Any

import numpy as np

from lite.schema.fb.ActivationType import ActivationType
from lite.schema.fb.CoordinateTransformMode import CoordinateTransformMode
from lite.schema.fb.DataType import DataType
from lite.schema.fb.NearestMode import NearestMode
from lite.schema.fb.PaddingMode import PaddingMode
from lite.schema.fb.PadMode import PadMode
from lite.schema.fb.Primitive import Primitive, PrimitiveCreator
from lite.schema.fb.ReduceMode import ReduceMode
from lite.schema.fb.ResizeMethod import ResizeMethod
from lite.schema.fb.RoundMode import RoundMode


def enum_names(enum_class: type) -> dict[int, str]:
    """Value -> name of a generated flatbuffers enum class."""
    return {v: k for k, v in vars(enum_class).items() if not k.startswith("_")}


# Every enum-typed attribute field, by name (names are unique across ops.fbs).
ENUM_FIELDS: dict[str, type] = {
    "activation_type": ActivationType,
    "pad_mode": PadMode,
    "round_mode": RoundMode,
    "padding_mode": PaddingMode,
    "reduce_mode": ReduceMode,
    "method": ResizeMethod,
    "coordinate_transform_mode": CoordinateTransformMode,
    "nearest_mode": NearestMode,
    "to": DataType,
    "data_type": DataType,
}
_ENUM_NAMES = {field: enum_names(cls) for field, cls in ENUM_FIELDS.items()}

# Primitive type name -> union tag.
PRIMITIVE_TYPES: dict[str, int] = {
    name: tag for tag, name in enum_names(Primitive).items() if name != "NONE"
}
PRIMITIVE_NAMES: dict[int, str] = {tag: name for name, tag in PRIMITIVE_TYPES.items()}


def _snake(camel: str) -> str:
    return re.sub(r"(?<!^)([A-Z])", r"_\1", camel).lower()


def _camel(snake: str) -> str:
    head, *rest = snake.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


def _object_class(op_type: str) -> type:
    return getattr(importlib.import_module(f"lite.schema.fb.{op_type}"), f"{op_type}T")


def default_attrs(op_type: str) -> dict[str, Any]:
    """Every attribute of ``op_type`` with its schema default."""
    obj = _object_class(op_type)()
    return {_snake(k): _decode_value(_snake(k), v) for k, v in vars(obj).items()}


def _decode_value(field: str, value: Any) -> Any:
    if field in _ENUM_NAMES:
        names = _ENUM_NAMES[field]
        if value not in names:
            raise ValueError(f"attribute {field!r} has unknown enum value {value}")
        return names[value]
    if value is None:
        return ()
    if isinstance(value, (np.ndarray, list, tuple)):
        return tuple(v.item() if isinstance(v, np.generic) else v for v in value)
    if isinstance(value, np.generic):
        return value.item()
    return value


def decode_attrs(op_type: str, table: Any) -> dict[str, Any]:
    """Reads every attribute of an op table (a flatbuffers Table from the union)."""
    obj = PrimitiveCreator(PRIMITIVE_TYPES[op_type], table)
    return {_snake(k): _decode_value(_snake(k), v) for k, v in vars(obj).items()}


def encode_attrs(op_type: str, attrs: dict[str, Any]) -> Any:
    """Builds the object-API table for ``op_type`` from an attribute dict."""
    if op_type not in PRIMITIVE_TYPES:
        raise ValueError(f"unknown primitive type {op_type!r}")
    obj = _object_class(op_type)()
    known = vars(obj)
    for field, value in attrs.items():
        key = _camel(field)
        if key not in known:
            raise ValueError(f"{op_type} has no attribute {field!r}; it has {sorted(map(_snake, known))}")
        setattr(obj, key, _encode_value(field, value))
    return obj


def _encode_value(field: str, value: Any) -> Any:
    if field in ENUM_FIELDS:
        return getattr(ENUM_FIELDS[field], value)
    if isinstance(value, (list, tuple, np.ndarray)):
        return [v.item() if isinstance(v, np.generic) else v for v in value]
    return value.item() if isinstance(value, np.generic) else value
