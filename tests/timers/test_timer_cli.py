"""The timer command line: ``python -m celery_cronstore.timers``."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from celery_cronstore.timers.__main__ import main

ROOT = Path(__file__).resolve().parents[2]


def test_prints_kind_form_description_and_fire_times(capsys: pytest.CaptureFixture[str]) -> None:
    status = main(
        ["30 9 * * MON-FRI", "--tz", "Europe/Berlin", "-n", "3", "--after", "2026-03-27T12:00Z"]
    )
    out = capsys.readouterr().out
    assert status == 0
    lines = out.splitlines()
    assert lines[0] == "kind:        cron"
    assert lines[1] == "canonical:   30 9 * * mon-fri"
    assert lines[2] == "zone:        Europe/Berlin"
    assert lines[3] == "description: at 09:30 on Monday-Friday (Europe/Berlin)"
    assert lines[4] == "next 3 fire times after 2026-03-27T12:00:00Z:"
    # Friday 09:30 CET, then Monday and Tuesday 09:30 CEST (DST began on the 29th).
    assert "2026-03-30 09:30:00 CEST +0200" in lines[5]
    assert lines[5].endswith("2026-03-30T07:30:00Z")
    assert lines[6].endswith("2026-03-31T07:30:00Z")
    assert lines[7].endswith("2026-04-01T07:30:00Z")
    assert len(lines) == 8


def test_once_timer_reports_no_further_fires(capsys: pytest.CaptureFixture[str]) -> None:
    status = main(["2026-12-01T09:00:00Z", "-n", "3", "--after", "2026-01-01T00:00Z"])
    out = capsys.readouterr().out
    assert status == 0
    assert "kind:        once" in out
    assert out.count("2026-12-01T09:00:00Z") == 2  # canonical line and the one fire
    assert "(no further fire times)" in out


def test_naive_after_is_read_in_the_zone(capsys: pytest.CaptureFixture[str]) -> None:
    assert (
        main(["every 1h", "--tz", "Europe/Berlin", "-n", "1", "--after", "2026-01-01T10:30"]) == 0
    )
    out = capsys.readouterr().out
    assert "after 2026-01-01T09:30:00Z" in out
    assert out.rstrip().endswith("2026-01-01T10:00:00Z")


def test_kind_option_forces_the_grammar(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["every 5m", "--kind", "cron"]) == 2
    assert "cron expression has 5 fields" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["61 * * * *"], "minute 61 is out of range 0..59: '61' at position 0"),
        (["* * * * *", "--tz", "Nowhere/Land"], "unknown time zone"),
        (["* * * * *", "--after", "yesterday"], "expected an ISO-8601 instant"),
        (["* * * * *", "-n", "0"], "-n must be between 1 and 1000"),
        (["* * * * *", "--kind", "weird"], "invalid choice"),
        (["@reboot"], "@reboot"),
    ],
)
def test_bad_input_is_one_line_on_stderr_with_status_2(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    try:
        status = main(argv)
    except SystemExit as exc:  # argparse's own errors exit
        status = int(exc.code or 0)
    captured = capsys.readouterr()
    assert status == 2
    assert captured.out == ""
    assert message in captured.err
    assert len(captured.err.strip().splitlines()) == 1
    assert "Traceback" not in captured.err


def test_runs_as_a_module() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "celery_cronstore.timers", "every 90m", "-n", "2"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert "canonical:   every 1h30m" in result.stdout
    assert "description: every 1 hour 30 minutes" in result.stdout


def test_module_error_exit_status() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "celery_cronstore.timers", "0 0 32 * *"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
        check=False,
    )
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1
    assert "day-of-month 32 is out of range 1..31" in result.stderr
