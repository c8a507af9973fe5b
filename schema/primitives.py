"""Primitive attributes <-> flatbuffers op tables, driven by the generated code.

Attributes are plain Python values keyed by the snake_case field names of ops.fbs:
ints, floats, bools, tuples for vectors, and the enum's name for enum fields.

``Custom`` (a vendor op) has its own codec: its attributes are ``{"type": op name,
"domain": ONNX domain, "attrs": read-only mapping name -> value}``, where a value is an
int, a float, a str, a tuple of ints, of floats or of strs, or a numpy array (a tensor).
Its decoder reads the untrusted buffer with bounds; every problem is a ValueError, which
the reader reports as ModelFormatError.
"""

from __future__ import annotations

import importlib
import math
import numbers
import re
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any

import numpy as np
from flatbuffers.table import Table

from lite.schema.fb.ActivationType import ActivationType
from lite.schema.fb.AttributeKind import AttributeKind
from lite.schema.fb.CoordinateTransformMode import CoordinateTransformMode
from lite.schema.fb.Custom import Custom, CustomT
from lite.schema.fb.CustomAttribute import CustomAttribute, CustomAttributeT
from lite.schema.fb.DataType import DataType
from lite.schema.fb.NearestMode import NearestMode
from lite.schema.fb.PaddingMode import PaddingMode
from lite.schema.fb.PadMode import PadMode
from lite.schema.fb.Primitive import Primitive, PrimitiveCreator
from lite.schema.fb.ReduceMode import ReduceMode
from lite.schema.fb.ResizeMethod import ResizeMethod
from lite.schema.fb.RoundMode import RoundMode
from lite.schema.fb.ScatterReduction import ScatterReduction
from lite.schema.graph import DTYPE_NAMES, DTYPES
from lite.schema.packed import pack, storage_nbytes, unpack


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
    "output_type": DataType,
    "kind": AttributeKind,
    "reduction": ScatterReduction,
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
    if op_type == "Custom":
        return {"type": "", "domain": "", "attrs": MappingProxyType({})}
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
    if isinstance(value, bytes):
        return value.decode("utf-8")
    if isinstance(value, (np.ndarray, list, tuple)):
        return tuple(v.item() if isinstance(v, np.generic) else v for v in value)
    if isinstance(value, np.generic):
        return value.item()
    return value


def decode_attrs(op_type: str, table: Any) -> dict[str, Any]:
    """Reads every attribute of an op table (a flatbuffers Table from the union)."""
    if op_type == "Custom":
        return _decode_custom(table)
    obj = PrimitiveCreator(PRIMITIVE_TYPES[op_type], table)
    return {_snake(k): _decode_value(_snake(k), v) for k, v in vars(obj).items()}


def encode_attrs(op_type: str, attrs: dict[str, Any]) -> Any:
    """Builds the object-API table for ``op_type`` from an attribute dict."""
    if op_type not in PRIMITIVE_TYPES:
        raise ValueError(f"unknown primitive type {op_type!r}")
    if op_type == "Custom":
        return _encode_custom(attrs)
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


# ---- Custom: a vendor op's name, domain and typed attributes -----------------------------

MAX_NAME = 256  # bytes in a custom op's type, domain or attribute name
MAX_STRING = 1 << 16  # bytes in a string attribute value
MAX_ATTRS = 1024  # attributes of one custom op
MAX_ITEMS = 1 << 16  # items in a list attribute
MAX_RANK = 32  # dims of a tensor attribute
_CUSTOM_FIELDS = ("type", "domain", "attrs")


def _attribute_kind(name: str, value: Any) -> str:
    """The AttributeKind name that custom attribute ``name`` is stored as (an empty list is INTS).

    Raises:
        ValueError: the value is none of int, float, str, a list of one of them, or an ndarray.
    """
    kind = _kind(value)
    if kind is None:
        raise ValueError(f"custom attribute {name!r} cannot hold {type(value).__name__}; it holds an int, "
                         "a float, a str, a list of one of them, or a numpy array")
    return kind


def _kind(value: Any) -> str | None:
    if isinstance(value, np.ndarray):
        return "TENSOR"
    if isinstance(value, str):
        return "STRING"
    if isinstance(value, numbers.Integral):
        return "INT"
    if isinstance(value, numbers.Real):
        return "FLOAT"
    if isinstance(value, (list, tuple)):
        kinds = {_kind(v) for v in value}
        for scalars, kind in (({"INT"}, "INTS"), ({"INT", "FLOAT"}, "FLOATS"), ({"STRING"}, "STRINGS")):
            if kinds <= scalars:
                return kind
    return None


def _check_text(text: str, limit: int, what: str) -> str:
    if len(text.encode("utf-8")) > limit:
        raise ValueError(f"{what} {text[:40]!r}... is longer than {limit} bytes")
    return text


def _name(text: str, what: str) -> str:
    """A custom op's type or an attribute's name: non-empty, at most MAX_NAME bytes."""
    if not text:
        raise ValueError(f"a {what} is empty")
    return _check_text(text, MAX_NAME, what)


def _bounded(count: int, limit: int, what: str) -> int:
    if count > limit:
        raise ValueError(f"{what} count {count} exceeds the limit of {limit}")
    return count


def _encode_custom(attrs: Mapping[str, Any]) -> CustomT:
    unknown = set(attrs) - set(_CUSTOM_FIELDS)
    if unknown:
        raise ValueError(f"Custom has no attribute(s) {sorted(unknown)}; it has {list(_CUSTOM_FIELDS)}")
    obj = CustomT()
    obj.type = _name(attrs.get("type", ""), "custom op type")
    obj.domain = _check_text(attrs.get("domain", ""), MAX_NAME, "custom op domain")
    values = attrs.get("attrs") or {}
    _bounded(len(values), MAX_ATTRS, "custom op attribute")
    obj.attrs = [_encode_attribute(name, value) for name, value in values.items()]
    return obj


def _encode_attribute(name: str, value: Any) -> CustomAttributeT:
    obj = CustomAttributeT()
    obj.name = _name(name, "custom attribute name")
    kind = _attribute_kind(name, value)
    obj.kind = getattr(AttributeKind, kind)
    _ENCODERS[kind](obj, value)
    return obj


def _encode_tensor(obj: CustomAttributeT, value: np.ndarray) -> None:
    if value.dtype not in DTYPE_NAMES:
        raise ValueError(f"a custom tensor attribute cannot be {value.dtype}; it can be {', '.join(DTYPES)}")
    obj.dataType = getattr(DataType, DTYPE_NAMES[value.dtype])
    _bounded(value.ndim, MAX_RANK, "tensor attribute dim")
    obj.dims = list(value.shape)
    obj.data = pack(value)


def _encode_list(field: str, item: type) -> Callable[[CustomAttributeT, Any], None]:
    def encode(obj: CustomAttributeT, value: Any) -> None:
        _bounded(len(value), MAX_ITEMS, "list attribute item")
        setattr(obj, field, [item(v) for v in value])

    return encode


_ENCODERS: dict[str, Callable[[CustomAttributeT, Any], None]] = {
    "INT": lambda obj, value: setattr(obj, "i", int(value)),
    "FLOAT": lambda obj, value: setattr(obj, "f", float(value)),
    "STRING": lambda obj, value: setattr(obj, "s", _check_text(value, MAX_STRING, "string attribute")),
    "INTS": _encode_list("ints", int),
    "FLOATS": _encode_list("floats", float),
    "STRINGS": _encode_list("strings", lambda v: _check_text(v, MAX_STRING, "string attribute")),
    "TENSOR": _encode_tensor,
}


def _decode_custom(table: Table) -> dict[str, Any]:
    custom = Custom()
    custom.Init(table.Bytes, table.Pos)
    op = _name(_text(custom.Type(), MAX_NAME, "custom op type"), "custom op type")
    attrs: dict[str, Any] = {}
    for j in range(_bounded(custom.AttrsLength(), MAX_ATTRS, "custom op attribute")):
        name, value = _decode_attribute(custom.Attrs(j))
        if name in attrs:
            raise ValueError(f"custom op {op!r} has attribute {name!r} twice")
        attrs[name] = value
    domain = _text(custom.Domain(), MAX_NAME, "custom op domain")
    return {"type": op, "domain": domain, "attrs": MappingProxyType(attrs)}


def _text(raw: bytes | None, limit: int, what: str) -> str:
    return _check_text(raw.decode("utf-8") if raw else "", limit, what)


def _decode_attribute(attr: CustomAttribute) -> tuple[str, Any]:
    name = _name(_text(attr.Name(), MAX_NAME, "custom attribute name"), "custom attribute name")
    return name, _DECODERS[_decode_value("kind", attr.Kind())](attr)


def _numbers(count: int, read: Callable[[], np.ndarray], limit: int = MAX_ITEMS,
             what: str = "list attribute item") -> tuple:
    return tuple(read().tolist()) if _bounded(count, limit, what) else ()


def _decode_tensor(attr: CustomAttribute) -> np.ndarray:
    dtype = DTYPES.get(_decode_value("data_type", attr.DataType()))
    if dtype is None:
        raise ValueError("a custom tensor attribute has no data type")
    dims = _numbers(attr.DimsLength(), attr.DimsAsNumpy, MAX_RANK, "tensor attribute dim")
    if any(d < 0 for d in dims):
        raise ValueError(f"a custom tensor attribute has invalid dims {dims}")
    nbytes = storage_nbytes(dtype, math.prod(dims))
    if attr.DataLength() != nbytes:
        raise ValueError(f"a custom tensor attribute has {attr.DataLength()} bytes of data, but dims {dims} "
                         f"of {dtype.name} need {nbytes}")
    raw = attr.DataAsNumpy().tobytes() if nbytes else b""
    array = unpack(np.frombuffer(raw, np.uint8), dtype, dims)
    array.flags.writeable = False
    return array


def _decode_strings(attr: CustomAttribute) -> tuple[str, ...]:
    count = _bounded(attr.StringsLength(), MAX_ITEMS, "list attribute item")
    return tuple(_text(attr.Strings(k), MAX_STRING, "string attribute") for k in range(count))


_DECODERS: dict[str, Callable[[CustomAttribute], Any]] = {
    "INT": lambda attr: int(attr.I()),
    "FLOAT": lambda attr: float(attr.F()),
    "STRING": lambda attr: _text(attr.S(), MAX_STRING, "string attribute"),
    "INTS": lambda attr: _numbers(attr.IntsLength(), attr.IntsAsNumpy),
    "FLOATS": lambda attr: _numbers(attr.FloatsLength(), attr.FloatsAsNumpy),
    "STRINGS": _decode_strings,
    "TENSOR": _decode_tensor,
}
