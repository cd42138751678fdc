"""Command-line parsing: unknown flags refused, and ``bench copy`` passing its flags to the benchmark."""

from __future__ import annotations

import sys

import pytest

from metashift.cli import main


def test_an_unknown_flag_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit:
        main(["verify", "--source", "zk://127.0.0.1:1", "--target", "etcd://127.0.0.1:1", "--bogus"])
    assert exit.value.code == 2
    assert "unrecognized arguments: --bogus" in capsys.readouterr().err


def test_bench_copy_passes_its_flags_to_the_benchmark(capsys: pytest.CaptureFixture[str]) -> None:
    # a bad value is refused by the benchmark's own parser: the flag got there, nothing ran
    with pytest.raises(SystemExit) as exit:
        main(["bench", "copy", "--topics", "many"])
    assert exit.value.code == 2
    assert "--topics: invalid int value: 'many'" in capsys.readouterr().err


def test_bench_copy_without_kazoo_says_what_to_install(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "kazoo", None)  # import kazoo fails, as when it is not installed
    assert main(["bench", "copy", "--topics", "1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["metashift: error: the copy benchmark's baseline needs kazoo: pip install 'metashift[bench]'"]
