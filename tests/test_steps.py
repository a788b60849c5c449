"""The lab's step budgets (tests/steps.py) on plain processes: a hang is killed with everything it started
and fails at its budget naming the step; a step inside its budget returns as it ran. No lab needed."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from tests import steps


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie is gone for our purposes
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1][0] != "Z"
    except FileNotFoundError:
        return False


def test_a_step_inside_its_budget_returns_its_output_and_code():
    done = steps.run_step(["sh", "-c", "echo out; echo err >&2; exit 3"], step="quick", budget=20)
    assert (done.returncode, done.stdout, done.stderr) == (3, "out\n", "err\n")


def test_a_hang_fails_at_its_budget_naming_the_step_and_kills_what_it_started(tmp_path):
    pids = tmp_path / "pids"
    # the step starts a child of its own and hangs waiting for it, as ansible-playbook waits for its workers
    script = f"sleep 300 & echo $! > {pids}; wait"
    started = time.monotonic()
    with pytest.raises(pytest.fail.Exception) as failed:
        steps.run_step(["sh", "-c", script], step="a step made to hang", budget=1.5)
    assert time.monotonic() - started < 30
    assert "lab step `a step made to hang` passed its budget of 2 s" in str(failed.value)
    child = int(pids.read_text())
    deadline = time.monotonic() + 5
    while alive(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not alive(child), "the step's own child outlived it"


def test_each_cli_verb_and_playbook_has_a_budget_of_minutes_not_twenty():
    assert steps.cli_step(["up", "lab-tiny", "-i", "inventory/lab", "--yes"]) == ("sparkplay up lab-tiny -i", 480)
    assert steps.cli_step(["lab", "up", "--snapshot", "x"])[1] == steps.CLI_BUDGETS["lab up"]
    assert steps.playbook_step("provision.yml", ["--check"]) == ("ansible-playbook provision.yml --check", 300)
    assert max(*steps.CLI_BUDGETS.values(), *steps.PLAYBOOK_BUDGETS.values()) <= 600
