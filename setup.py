"""Packaging: the four source folders form ONE import package, ``lite`` (see docs/architecture.md).

Metadata lives in setup.cfg. The package list is derived here from the folders, so a new
subpackage (a folder with an ``__init__.py``) can never be left out of the wheel.
"""

from pathlib import Path

from setuptools import setup

ROOTS = {"lite": "lite", "lite.delegates": "delegates", "lite.schema": "schema", "lite.tools": "tools"}


def packages() -> list[str]:
    """Every folder with an ``__init__.py`` under the roots, as a dotted ``lite...`` name."""
    found = []
    for prefix, folder in ROOTS.items():
        for init in sorted(Path(folder).rglob("__init__.py")):
            parts = init.parent.relative_to(folder).parts
            found.append(".".join((prefix, *parts)))
    return found


setup(packages=packages(), package_dir=ROOTS)
