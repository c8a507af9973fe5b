"""Where the tools' models come from: a zoo name or a path, as ``.lite`` bytes (and the ONNX model).

Shared by ``lite-benchmark``, ``lite-inspect``, ``lite-tune`` and the benchmarks; a module of its own
so that the benchmark and the inspector, which use each other's helpers, do not import each other.
"""

from __future__ import annotations

import time
from typing import Any

from lite.errors import InputError


def load_source(spec: str) -> tuple[bytes, Any, float]:
    """(.lite bytes, the ONNX ModelProto if there is one, seconds spent converting).

    ``spec`` is ``zoo:NAME`` or a path; paths load through ``lite.loader`` (external data
    resolves against the model's folder).
    """
    from lite.conversion import load_lite_bytes
    from lite.loader import ModelType, load_onnx, model_type_of

    if spec.startswith("zoo:"):
        onnx_model = zoo_model(spec[4:])
    elif model_type_of(spec) is ModelType.ONNX:
        onnx_model = load_onnx(spec)
    else:
        return load_lite_bytes(spec), None, 0.0
    start = time.perf_counter()
    data = load_lite_bytes(onnx_model)
    return data, onnx_model, time.perf_counter() - start


def zoo_model(name: str) -> Any:
    """The zoo's ONNX model ``name``; an InputError lists the names."""
    from lite.tools import zoo

    builder = zoo.MODELS.get(name)
    if builder is None:
        raise InputError(f"unknown zoo model {name!r}; the zoo has {', '.join(sorted(zoo.MODELS))}")
    return builder()
