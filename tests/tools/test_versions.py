"""Every command-line tool answers --version with Delite's version (lite.tools.add_version)."""

from __future__ import annotations

import pytest

import lite
from lite.tools import benchmark, inspector, tune
from lite.tools.converter import cli


@pytest.mark.parametrize("main, prog", [(cli.main, "lite-convert"), (inspector.main, "lite-inspect"),
                                        (benchmark.main, "lite-benchmark"), (tune.main, "lite-tune")])
def test_version(main, prog, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["--version"])
    assert exit_info.value.code == 0
    assert capsys.readouterr().out.strip() == f"{prog} (delite) {lite.__version__}"
