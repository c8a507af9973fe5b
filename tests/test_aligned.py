"""lite.aligned: arrays whose data starts on a 64-byte boundary, empty ones and scalars included."""

from __future__ import annotations

import numpy as np
import pytest

from lite.aligned import ALIGNMENT, aligned_array, aligned_empty


@pytest.mark.parametrize("shape", [(2, 2, 0, 16), (0,), (), (3, 5), (1, 7, 9)])
@pytest.mark.parametrize("dtype", [np.float32, np.int8, np.float64])
def test_every_array_is_aligned_contiguous_and_writable(shape, dtype):
    array = aligned_array(shape, dtype)
    assert array.ctypes.data % ALIGNMENT == 0  # NOTE: an empty slice of a buffer would not be
    assert array.shape == shape and array.dtype == dtype
    assert array.flags.c_contiguous and array.flags.writeable
    array[...] = 1
    assert np.all(array == 1)


@pytest.mark.parametrize("nbytes", [0, 1, 63, 64, 1000])
def test_raw_bytes_are_aligned(nbytes):
    raw = aligned_empty(nbytes)
    assert raw.ctypes.data % ALIGNMENT == 0 and raw.shape == (nbytes,) and raw.dtype == np.uint8
