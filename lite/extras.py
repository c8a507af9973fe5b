"""Optional features, the packages they import and the pip extras (setup.cfg) that bring them."""

from __future__ import annotations

import importlib
import os
from types import ModuleType
from typing import Any

from lite.errors import MissingPackageError

EXTRAS = {"onnxruntime": "ort", "tvm": "tvm", "matplotlib": "plot", "cloudpickle": "tune", "psutil": "tune",
          "xgboost": "tune", "ray.data": "ray"}


def require(module: str, feature: str) -> ModuleType:
    """Imports ``module``, which ``feature`` needs.

    Raises:
        MissingPackageError: it is not installed (or fails to import); the message names the
            ``pip install "delite[extra]"`` that brings it.
    """
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise MissingPackageError(f'{feature} needs {module}, which is not installed here ({exc}): '
                                  f'pip install "delite[{EXTRAS[module]}]"') from exc


LOG_ENV = "DELITE_LOG"
VERBOSE_LOG_LEVELS = ("debug", "info", "warning")
ORT_ERRORS_ONLY = 3  # onnxruntime's log_severity_level: 0 verbose, 1 info, 2 warning, 3 error, 4 fatal


def verbose_log() -> bool:
    """Whether ``DELITE_LOG`` (debug, info or warning) asks for other libraries' warnings too."""
    return os.environ.get(LOG_ENV, "").strip().lower() in VERBOSE_LOG_LEVELS


def ort_session_options(options: Any = None, verbose: bool = False) -> Any:
    """onnxruntime ``SessionOptions`` (``options``, else new ones) that log errors only.

    onnxruntime's warnings (an initializer that is also a graph input, one it removes as unused)
    are about the source model, not about what the user ran; they stay when ``verbose`` (a tool's
    ``--verbose``) or ``DELITE_LOG`` asks for them, or when ``options`` already set a level.
    """
    ort = require("onnxruntime", "running a model in onnxruntime")
    options = ort.SessionOptions() if options is None else options
    if not (verbose or verbose_log()) and options.log_severity_level < 0:  # NOTE: -1: not set by the caller
        options.log_severity_level = ORT_ERRORS_ONLY
    return options
