"""Optional packages: a missing one raises a LiteError that names the pip extra to install."""

import sys

import pytest

import lite
from lite.extras import EXTRAS, require


def test_an_installed_package_is_returned():
    assert require("json", "a test") is sys.modules["json"]


@pytest.mark.parametrize("module", sorted(EXTRAS))
def test_a_missing_package_names_its_extra(module, monkeypatch):
    monkeypatch.setitem(sys.modules, module, None)  # import now raises ImportError
    with pytest.raises(lite.MissingPackageError, match=rf'the feature needs {module}, which is not installed'
                                                       rf'.*pip install "delite\[{EXTRAS[module]}\]"') as caught:
        require(module, "the feature")
    assert isinstance(caught.value, lite.NotSupportedError)  # a delegate's init() declines with it


def test_every_extra_named_is_declared_in_setup_cfg():
    from configparser import ConfigParser
    from pathlib import Path

    config = ConfigParser()
    config.read(Path(__file__).parents[1] / "setup.cfg")
    declared = set(config["options.extras_require"])
    assert set(EXTRAS.values()) <= declared
