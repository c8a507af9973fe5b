"""lite.ops.dtypes: the named groups, and what sets them apart."""

from __future__ import annotations

import numpy as np

from lite.ops import dtypes
from lite.schema.graph import DTYPES

GROUPS = ["FLOAT32", "FLOATS", "INTS", "NUMBERS", "ALL", "FLOATS_32_64", "INTS_32_64", "NUMBERS_32_64"]


def test_groups_hold_distinct_storable_dtypes():
    storable = set(DTYPES.values())
    for name in GROUPS:
        group = getattr(dtypes, name)
        assert all(isinstance(d, np.dtype) for d in group) and len(set(group)) == len(group), name
        assert set(group) <= storable, name


def test_groups_nest():
    storage_only = {dtypes.BFLOAT16, *dtypes.NARROW_INTS, *dtypes.NARROW_FLOATS}
    assert set(dtypes.ALL) == set(dtypes.NUMBERS) | {np.dtype(np.bool_)} == set(DTYPES.values()) - storage_only
    assert set(dtypes.NUMBERS) == set(dtypes.FLOATS) | set(dtypes.INTS)
    assert set(dtypes.INTS) == set(dtypes.SIGNED_INTS) | set(dtypes.UNSIGNED_INTS)
    assert set(dtypes.SIGNED) == set(dtypes.FLOATS) | set(dtypes.SIGNED_INTS)
    assert set(dtypes.FLOAT32) < set(dtypes.FLOATS_32_64) < set(dtypes.FLOATS)
    assert set(dtypes.INTS_32_64) < set(dtypes.INTS)
    assert set(dtypes.NUMBERS_32_64) == set(dtypes.FLOATS_32_64) | set(dtypes.INTS_32_64)


def test_only_the_full_groups_hold_float16_and_narrow_integers():
    narrow = {np.dtype(t) for t in (np.float16, np.int8, np.uint8, np.int16)}
    assert narrow <= set(dtypes.NUMBERS) and not narrow & set(dtypes.NUMBERS_32_64)
    assert all(d.kind == "f" for d in dtypes.FLOATS) and all(d.kind in "iu" for d in dtypes.INTS)
