"""Hand-made ``.npz`` files for the tests of calibration loading: ones numpy itself would not write."""

from __future__ import annotations

import io
import zipfile
from pathlib import Path

import numpy as np


def npz_with_header(path: Path, key: str, shape: tuple[int, ...], dtype: str = "<f4", data: bytes = b"") -> Path:
    """An ``.npz`` whose member ``key`` has a header claiming ``shape`` and ``dtype``, followed by only ``data``."""
    member = io.BytesIO()
    np.lib.format.write_array_header_1_0(member, {"descr": dtype, "fortran_order": False, "shape": shape})
    member.write(data)
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr(f"{key}.npy", member.getvalue())
    return path
