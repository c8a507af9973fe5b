"""lite-tune's command line without its optional packages (tuning itself: tests/delegates/test_tvm.py)."""

import sys

import pytest

from lite.tools.tune import main


@pytest.mark.parametrize("module, extra", [("tvm", "tvm"), ("psutil", "tune")])
def test_a_missing_package_is_named_with_its_extra(module, extra, tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, module, None)
    assert main(["zoo:add_chain", "--db", str(tmp_path / "db"), "--trials", "1"]) == 1
    err = capsys.readouterr().err
    assert f"tuning needs {module}" in err and f'pip install "delite[{extra}]"' in err
    assert not (tmp_path / "db").exists()
