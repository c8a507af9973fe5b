"""Checks of what users pass to the public API: each failure is an InputError (DelegateError for
delegate objects) saying what was expected and what was given."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from lite.errors import DelegateError, InputError

MAX_THREADS = 1024
# What a delegate is: ``lite.delegate`` adds ``Delegate`` when it loads (this core module may not import
# it; before it loads, no object can be a delegate).
DELEGATE_TYPES: list[type] = []
TRUE_TEXTS = ("true", "1", "yes", "on")
FALSE_TEXTS = ("false", "0", "no", "off")
BOOL_ANNOTATIONS = ("bool", "bool | None", "None | bool", "Optional[bool]", bool, bool | None)


def sequence_of(value: Any, what: str, call: str) -> Sequence:
    """``value`` as a list or tuple; anything else (a generator, a number, None) is refused."""
    if not isinstance(value, (list, tuple)):
        raise InputError(f"{call} takes {what} as a list or tuple, got {type(value).__name__}")
    return value


def positive_int(value: Any, what: str, most: int | None = None) -> int:
    """``value`` as an int >= 1 (not a bool, not a float), at most ``most``."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise InputError(f"{what} must be a positive int, got {value!r}")
    if most is not None and value > most:
        raise InputError(f"{what} must be at most {most}, got {value}")
    return int(value)


def dims_of(value: Any, what: str) -> tuple[int, ...]:
    """A shape: a list or tuple of ints (not bools, not floats)."""
    dims = sequence_of(value, f"{what} (a list of ints)", "resize")
    if not all(isinstance(d, (int, np.integer)) and not isinstance(d, bool) for d in dims):
        raise InputError(f"{what} must be ints, got {list(dims)!r}")
    return tuple(int(d) for d in dims)


def model_bytes(value: Any) -> None:
    """Model bytes: bytes, bytearray, memoryview or a uint8 numpy array."""
    if isinstance(value, np.ndarray) and value.dtype == np.uint8 and value.ndim == 1:
        return
    if not isinstance(value, (bytes, bytearray, memoryview)):
        hint = " (for a file, use build_from_file)" if isinstance(value, str) else ""
        raise InputError(f"build takes the model as bytes, got {type(value).__name__}{hint}")


def delegate_list(value: Any) -> list:
    """A list of delegate instances; a delegate class (not an instance) is refused."""
    delegates = list(sequence_of(value, "delegates", "Context"))
    for delegate in delegates:
        if isinstance(delegate, type):
            name = delegate.__name__
            raise DelegateError(f"delegates holds the class {name}; pass an instance: {name}()")
        if not isinstance(delegate, tuple(DELEGATE_TYPES)):
            raise DelegateError(f"delegates must be lite.Delegate instances, got {type(delegate).__name__}")
    return delegates


def strict_bool(value: Any, what: str) -> bool:
    """``value`` if it is a bool (or a numpy bool); anything else, ``"false"`` and 1 included, is refused."""
    if not isinstance(value, (bool, np.bool_)):
        raise InputError(f"{what} must be True or False, got {type(value).__name__} {value!r}")
    return bool(value)


def bool_from_text(value: Any, what: str) -> bool:
    """A boolean given as text (a command line, a JSON or Ray description): true/false, 1/0, yes/no,
    on/off in any case, the ints 1 and 0, or a bool. Anything else is refused, naming ``what``."""
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, (int, np.integer)) and value in (0, 1):
        return bool(value)
    text = value.strip().lower() if isinstance(value, str) else None
    if text in TRUE_TEXTS or text in FALSE_TEXTS:
        return text in TRUE_TEXTS
    raise InputError(f"{what} is a boolean: give one of {'/'.join(TRUE_TEXTS)} or {'/'.join(FALSE_TEXTS)}, "
                     f"got {value!r}")


def boolean_parameters(call: Callable) -> set[str]:
    """The keyword parameters of ``call`` (a class: its constructor) that take a bool: annotated
    ``bool`` (or ``bool | None``), or with a bool default."""
    try:
        parameters = inspect.signature(call).parameters.values()
    except (TypeError, ValueError):
        return set()
    return {p.name for p in parameters
            if isinstance(p.default, bool) or p.annotation is bool or p.annotation in BOOL_ANNOTATIONS}


def booleans_from_text(call: Callable, options: Mapping[str, Any], what: str) -> dict[str, Any]:
    """``options`` for ``call`` with the values of its boolean parameters parsed by ``bool_from_text``
    (None kept where the parameter is ``bool | None``); the others unchanged."""
    flags = boolean_parameters(call)
    return {key: value if key not in flags or value is None else bool_from_text(value, f"{what} option {key!r}")
            for key, value in options.items()}
