"""Checks of what users pass to the public API: each failure is an InputError (DelegateError for
delegate objects) saying what was expected and what was given."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from lite.errors import DelegateError, InputError

MAX_THREADS = 1024


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
    from lite.delegate import Delegate

    delegates = list(sequence_of(value, "delegates", "Context"))
    for delegate in delegates:
        if isinstance(delegate, type):
            name = delegate.__name__
            raise DelegateError(f"delegates holds the class {name}; pass an instance: {name}()")
        if not isinstance(delegate, Delegate):
            raise DelegateError(f"delegates must be lite.Delegate instances, got {type(delegate).__name__}")
    return delegates
