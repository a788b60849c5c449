"""`sparkplay status`'s picture, once and under --watch (issue 57): what a person reads, from the rows the
status playbook hands the CLI (set here as the run's stats; the lab tests read it from the real lab)."""

from __future__ import annotations

import io
from pathlib import Path

from rich.console import Console

from sparkplay import cli_status
from sparkplay.errors import ExitCode
from sparkplay.runner import RunResult
from tests.conftest import run_cli

RANKS = [
    {
        "rank": 0,
        "host": "spark-0",
        "unit": "sparkplay-serve.service",
        "state": "active/running",
        "since": "12:00",
        "health": "ok",
        "model": "glm53",
        "watchdog": "ok",
        "up": True,
        "answers": "held to the deploy's",
    },
    {
        "rank": 1,
        "host": "spark-1",
        "unit": "sparkplay-serve.service",
        "state": "activating/start",
        "since": "12:01",
        "health": "-",
        "model": "-",
        "watchdog": "-",
        "up": False,
        "why": "twin enp1s0f1np1 has no carrier",
    },
]
GATEWAY = {"line": "gateway on spark-0: http://127.0.0.1:9930/v1 (no key asked), active, routes glm53", "up": True}


def result(**custom: object) -> RunResult:
    return RunResult(status="successful", rc=0, custom={"sparkplay_status": RANKS, **custom})


def shown(renderable: object) -> str:
    console = Console(width=200, record=True, file=io.StringIO())
    console.print(renderable)
    return console.export_text()


def test_the_picture_has_every_rank_the_gateway_and_why_a_rank_is_down():
    picture, words = cli_status.view(result(sparkplay_status_gateway=[GATEWAY]))
    text = shown(picture)
    lines = text.splitlines()
    assert lines[0].split() == ["rank", "host", "unit", "state", "since", "health", "model", "watchdog"]
    assert lines[1].split()[:4] == ["0", "spark-0", "sparkplay-serve.service", "active/running"]
    assert GATEWAY["line"] in text and "answers on spark-0: held to the deploy's" in text
    assert words == ["rank 1 (spark-1): twin enp1s0f1np1 has no carrier"]


def test_watch_reads_again_and_draws_each_picture_and_a_failed_read_is_said_and_retried(capsys):
    reads = iter([result(), RunResult(status="failed", rc=2), result()])
    assert cli_status.watch(lambda: next(reads), 0.01, rounds=3) == 0
    printed = capsys.readouterr().out
    assert printed.count("; again every 0.01 s; Ctrl-C stops") == 2
    assert "status could not be read at" in printed and "trying again" in printed
    assert printed.count("spark-0") >= 2 and "rank 1 (spark-1): twin enp1s0f1np1 has no carrier" in printed


def test_ctrl_c_ends_the_watch_cleanly():
    def read() -> RunResult:
        raise KeyboardInterrupt

    assert cli_status.watch(read, 5) == 0


def test_watch_and_json_together_are_refused_in_one_line(tmp_path: Path):
    (tmp_path / "hosts.yml").write_text("all: {}\n")
    proc = run_cli("status", "-i", str(tmp_path), "--watch", "2", "--json")
    assert proc.returncode == ExitCode.BAD_INPUT and "--watch" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
