"""What lite-benchmark's modes share: reading input shapes and arrays, random inputs, the compiled-kernel
cache, and building the model as the options say (``lite.tools.benchmark`` and its ``--cold`` and
``--generate`` modes)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
from tqdm import tqdm

import lite
from lite.tools import placement_options


def parse_input_shapes(text: str | None) -> dict[str, list[int]]:
    """``"x:1,3,224,224;y:1,10"`` -> ``{"x": [1, 3, 224, 224], "y": [1, 10]}``."""
    shapes: dict[str, list[int]] = {}
    for item in filter(None, (text or "").split(";")):
        name, sep, dims = item.rpartition(":")
        try:
            shapes[name] = [int(d) for d in dims.split(",")]
        except ValueError:
            sep = ""
        if not sep or not name:
            raise lite.InputError(f"--input-shapes entry {item!r} must look like name:1,3,224,224")
    return shapes


def random_inputs(tensors: list[lite.Tensor], seed: int = 0) -> dict[str, np.ndarray]:
    """Seeded random data of the right dtype and shape for every input."""
    rng = np.random.default_rng(seed)
    arrays = {}
    for tensor in tensors:
        if -1 in tensor.shape:
            raise lite.InputError(f"input {tensor.name!r} has a dynamic shape {tensor.shape}: give --input-shapes")
        if tensor.dtype.kind == "f":
            arrays[tensor.name] = rng.standard_normal(tensor.shape).astype(tensor.dtype)
        elif tensor.dtype.kind == "b":
            arrays[tensor.name] = rng.random(tensor.shape) < 0.5
        else:
            arrays[tensor.name] = rng.integers(0, 10, tensor.shape).astype(tensor.dtype)
    return arrays


def load_npz(path: str, names: list[str]) -> dict[str, np.ndarray]:
    """Arrays by name from an .npz (arrays saved positionally as arr_0, ... map in order)."""
    with np.load(path) as npz:
        stored = dict(npz.items())
    if all(n in stored for n in names):
        return {n: stored[n] for n in names}
    if len(stored) == len(names):
        return dict(zip(names, stored.values(), strict=True))
    raise lite.InputError(f"{path}: holds {sorted(stored)}, expected arrays named {names}")


def compile_cache() -> Path | None:
    """The folder compiled (numba) kernels are cached in; None where compiled kernels are off."""
    from lite.kernels import fast

    return Path(fast.numba_module().config.CACHE_DIR) if fast.enabled() else None


def bundled_files() -> int:
    """Cache files this process copied from the ahead-of-time kernel bundle (0: none, or compiled kernels off)."""
    from lite.kernels import fast

    return fast.seeded_files() if fast.enabled() else 0


def cached_kernels(folder: Path | None) -> int:
    """How many compiled kernels ``folder`` caches (numba's ``.nbc`` files)."""
    return sum(1 for _ in folder.rglob("*.nbc")) if folder is not None and folder.is_dir() else 0


def build_model(data: bytes, args: argparse.Namespace, delegates: list) -> lite.Model:
    model = lite.Model()
    with tqdm(total=1, desc="build", disable=None, leave=False, file=sys.stderr) as bar:
        model.build(data, lite.ModelType.LITE, lite.Context(thread_num=args.thread_num, delegates=delegates,
                                                            **placement_options(args)))
        bar.update()
    return model
