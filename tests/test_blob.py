"""lite.blob: a delegate blob's JSON header and named arrays, read back as checked read-only views."""

from __future__ import annotations

import contextlib
import json
import struct

import numpy as np
import pytest

from lite.blob import MAGIC, MAX_DEPTH, pack, unpack
from lite.errors import ModelFormatError


def arrays(rng: np.random.Generator) -> dict[str, np.ndarray]:
    return {"w": rng.standard_normal((3, 5)).astype(np.float16), "ids": rng.integers(-9, 9, 7),
            "empty": np.zeros((0, 4), np.float32), "mask": rng.random(11) < 0.5}


def test_round_trip_gives_aligned_read_only_views():
    rng = np.random.default_rng(0)
    given = arrays(rng)
    blob = np.frombuffer(pack({"target": "x", "n": [1, 2]}, given), np.uint8)
    header, back = unpack(blob)
    assert header == {"target": "x", "n": [1, 2]} and back.keys() == given.keys()
    for name, array in given.items():
        np.testing.assert_array_equal(back[name], array)
        assert back[name].dtype == array.dtype and not back[name].flags.writeable
        assert np.shares_memory(back[name], blob) or back[name].size == 0


def test_strided_and_big_endian_arrays_are_stored_as_plain_copies():
    wide = np.arange(24, dtype=">i4").reshape(4, 6)[:, ::2]
    _, back = unpack(pack({}, {"a": wide}))
    np.testing.assert_array_equal(back["a"], wide)


def test_object_arrays_cannot_be_stored():
    with pytest.raises(ValueError, match="has dtype object"):
        pack({}, {"a": np.array([None])})


def forged(entries, header_text: bytes | None = None, payload: bytes = b"\0" * 128) -> bytes:
    text = header_text if header_text is not None else json.dumps({"header": {}, "arrays": entries}).encode()
    head = MAGIC + struct.pack("<Q", len(text)) + text
    return head + b"\0" * (-len(head) % 64) + payload


@pytest.mark.parametrize("blob, message", [
    (b"NOTABLOB" + bytes(64), "bad magic"),
    (MAGIC + struct.pack("<Q", 1 << 40), "does not fit"),
    (forged(None, b"{not json"), "malformed header"),
    (forged(None, b'{"header": [], "arrays": []}'), "header must be an object"),
    (forged([["a", "float64", [10**6], 0]]), "runs past the blob"),
    (forged([["a", "object", [1], 0]]), "bad name or dtype"),
    (forged([["a", "float32", [-1], 0]]), "bad shape"),
    (forged([["a", "float32", [2], 3]]), "bad offset"),
    (forged([["a", "float32", [2]]]), "malformed header"),
    (forged([["a", "float32", [2**62, 2**62], 0]]), "runs past the blob"),
    (forged(None, b"[" * 100000), "nests deeper than"),
    (forged(None, b'{"header": {"a": ' + b"[" * 100 + b"]" * 100 + b'}, "arrays": []}'), "nests deeper than"),
], ids=["magic", "header size", "json", "header type", "extent", "dtype", "shape", "offset", "entry", "overflow",
        "recursion", "nesting"])
def test_hostile_blobs_are_model_format_errors(blob, message):
    with pytest.raises(ModelFormatError, match=message):
        unpack(blob)


def test_a_header_nested_as_deep_as_allowed_reads_back():
    nested: list = []  # one level
    for _ in range(MAX_DEPTH - 3):  # the blob's own object and the delegate's header are two more
        nested = [nested]
    header, _ = unpack(pack({"n": nested}, {}))
    assert header == {"n": nested}


def test_mutated_blobs_raise_only_model_format_errors():
    rng = np.random.default_rng(1)
    blob = bytearray(pack({"target": "t"}, arrays(rng)))
    for _ in range(2000):
        mutated = bytearray(blob)
        for position in rng.integers(0, len(mutated), rng.integers(1, 4)):
            mutated[position] = rng.integers(0, 256)
        cut = len(mutated) if rng.random() < 0.8 else rng.integers(0, len(mutated))
        with contextlib.suppress(ModelFormatError):
            unpack(bytes(mutated[:cut]))
