"""Bundled delegates, and loading a delegate by name for the command-line tools."""

from __future__ import annotations

import importlib
from typing import Any

from lite.arguments import booleans_from_text
from lite.delegate import Delegate
from lite.errors import InputError

BUNDLED = {
    "example_npu": "lite.delegates.example_npu:ExampleNPUDelegate",
    "tvm": "lite.delegates.tvm:TVMDelegate",
    "ort": "lite.delegates.onnxruntime:ORTDelegate",
}


def load_delegate(spec: str, options: dict[str, Any] | None = None) -> Delegate | None:
    """Creates a delegate from a name: ``native`` (None), a bundled name, or ``module:Class``.

    Args:
        spec: ``native``, one of ``BUNDLED`` or ``package.module:ClassName``.
        options: keyword arguments for the delegate's constructor. Those of its boolean parameters
            may be given as text (``--delegate-option trust_saved_code=no``): true/false, 1/0, yes/no
            or on/off, in any case.

    Raises:
        InputError: unknown name, a module/class that cannot be loaded, options it does not take,
            or a boolean option given as anything else than those words.
    """
    if spec == "native":
        return None
    target = BUNDLED.get(spec, spec)
    if ":" not in target:
        raise InputError(f"unknown delegate {spec!r}: use native, {', '.join(BUNDLED)} or module:Class")
    module_name, class_name = target.split(":", 1)
    try:
        cls = getattr(importlib.import_module(module_name), class_name)
    except (ImportError, AttributeError) as exc:
        raise InputError(f"cannot load delegate {spec!r} ({target}): {exc}") from exc
    options = booleans_from_text(cls, options or {}, f"delegate {spec!r}")
    try:
        return cls(**options)
    except TypeError as exc:
        raise InputError(f"delegate {spec!r} does not take options {options}: {exc}") from exc


def available_delegates() -> list[str]:
    """The bundled delegates that load and accept this machine (their ``init()`` does not decline),
    as ``onnxruntime.get_available_providers()`` lists execution providers.

    Loading a delegate imports its framework (TVM takes seconds); a delegate whose package is
    missing, or whose device is absent, is left out.

    Example:
        >>> import lite
        >>> "example_npu" in lite.available_delegates()
        True
    """
    names = []
    for name in BUNDLED:
        try:
            delegate = load_delegate(name)
            delegate.init()
        except Exception:  # NOTE: any failure means "not available here"
            continue
        names.append(name)
    return names


def parse_options(pairs: list[str]) -> dict[str, Any]:
    """``["target=cuda", "threads=2"]`` -> ``{"target": "cuda", "threads": 2}`` (ints/floats/true/false
    parsed; ``load_delegate`` reads the delegate's boolean options strictly, yes/no and on/off too)."""
    options: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise InputError(f"delegate option {pair!r} must look like key=value")
        options[key] = _parse_value(value)
    return options


def _parse_value(text: str) -> Any:
    lowered = text.lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    for convert in (int, float):
        try:
            return convert(text)
        except ValueError:
            pass
    return text
