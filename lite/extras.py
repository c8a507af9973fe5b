"""Optional features, the packages they import and the pip extras (setup.cfg) that bring them."""

from __future__ import annotations

import importlib
from types import ModuleType

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
