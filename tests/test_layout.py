"""The test suite's layout: helpers, model builders and references shared by several test modules live in
tests/support/ (fixtures shared across folders in a conftest.py), and no module imports a ``test_*.py``
module, not even inside a function, so each test module can be run, moved or renamed alone."""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parent


def imported_modules(tree: ast.AST, package: str) -> list[tuple[int, str]]:
    """(line, dotted name) of every import in ``tree``, relative ones resolved against ``package``;
    ``from a import b`` gives ``a`` and ``a.b`` (``b`` may be a module)."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            parts = package.split(".")
            base = parts[:len(parts) - node.level + 1] if node.level else []
            module = ".".join([*base, *([node.module] if node.module else [])])
            found += [(node.lineno, module), *((node.lineno, f"{module}.{alias.name}") for alias in node.names)]
    return found


def imports_of_test_modules(source: str, package: str) -> list[tuple[int, str]]:
    """The imports in ``source`` (a module of ``package``) that name a ``test_*`` module."""
    return [(line, name) for line, name in imported_modules(ast.parse(source), package)
            if any(part.startswith("test_") for part in name.split("."))]


def test_no_module_imports_a_test_module():
    offenders = []
    for path in sorted(TESTS.rglob("*.py")):
        package = ".".join(path.relative_to(TESTS.parent).parent.parts)
        offenders += [f"{path.relative_to(TESTS.parent)}:{line} imports {name}"
                      for line, name in imports_of_test_modules(path.read_text(), package)]
    assert not offenders, "move what they import to tests/support/ (or a conftest.py):\n" + "\n".join(offenders)


def test_every_form_of_import_is_seen():
    source = """
import tests.e2e.test_fuzz
from tests.kernels.test_conv import build
from tests.kernels import test_conv
from . import test_depthwise
from .test_direct import conv
from ..test_conv import onnx_reference

def helper():
    from tests.test_model import small_cnn

from tests.support.conv import build, onnx_reference
from tests.e2e import cases_families
import numpy as np
"""
    found = imports_of_test_modules(source, "tests.kernels.fast")
    assert sorted({line for line, _ in found}) == [2, 3, 4, 5, 6, 7, 10]
    assert (7, "tests.kernels.test_conv") in found and (5, "tests.kernels.fast.test_depthwise") in found
