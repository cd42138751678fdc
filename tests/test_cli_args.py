"""Command-line parsing: unknown flags refused, and ``bench copy`` passing its flags to the script."""

from __future__ import annotations

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
