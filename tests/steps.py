"""Lab steps with budgets: each command a lab test runs (the CLI, a playbook) is bounded by its own time,
from what it measures on the project's 2-core machine, not by one long timeout for everything.

A step past its budget is killed with everything it started (its own process group: ansible-runner,
ansible-playbook and their workers) and fails the test at once with the step's name, its budget and the
last journal lines of every running lab node, so a hang costs minutes and says where it hung.

The budgets are about three times the step's measured time here (docs/benchmarks.md, "make test's time");
a step that legitimately takes longer passes `budget=` with the reason beside it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path

import pytest

PROJECT = Path(__file__).resolve().parents[1]

# `sparkplay <verb>` (or `sparkplay lab <verb>`) -> seconds. Measured (fresh clone, 2026-12-06): lab up 2-60 s
# (60 with the node image's build), up from a bare lab about 100 s, up with nothing to change about 25 s.
CLI_BUDGETS: dict[str, float] = {
    "lab up": 240,
    "lab down": 120,
    "lab snapshot": 240,
    "lab status": 60,
    "lab reboot": 180,
    "lab off": 120,
    "lab on": 180,
    "lab pull": 60,
    "lab plug": 60,
    "up": 480,
    "stop": 240,
    "reset": 300,
    "rollback": 300,
    "lock": 240,
    "verify": 300,
    "apply": 240,
    "plan": 240,
    "status": 180,
    "doctor": 240,
    "bench": 420,
    "recipe": 60,
}
# ansible-playbook NAME -> seconds
PLAYBOOK_BUDGETS: dict[str, float] = {
    "provision.yml": 300,
    "models.yml": 240,
    "overlay.yml": 240,
    "serve.yml": 300,
    "site.yml": 480,
    "status.yml": 180,
    "doctor.yml": 240,
    "stop.yml": 240,
    "reset.yml": 300,
}
DEFAULT_BUDGET = 180.0
JOURNAL_LINES = 12


def cli_step(args: Sequence[str]) -> tuple[str, float]:
    """The step's name and budget for `sparkplay ARGS`."""
    words = [a for a in args if not a.startswith("-")]
    verb = " ".join(words[:2]) if words[:1] == ["lab"] else (words[0] if words else "")
    return f"sparkplay {' '.join(args[:3])}", CLI_BUDGETS.get(verb, DEFAULT_BUDGET)


def playbook_step(name: str, args: Sequence[str]) -> tuple[str, float]:
    return f"ansible-playbook {name} {' '.join(args)}".strip(), PLAYBOOK_BUDGETS.get(name, DEFAULT_BUDGET)


def node_journals(lines: int = JOURNAL_LINES) -> str:
    """The last journal lines of each running lab node, for a hang's report."""
    listed = subprocess.run(
        ["docker", "ps", "--filter", "label=sparkplay.lab", "--format", "{{.Names}}"],
        capture_output=True,
        text=True,
        timeout=20,
        check=False,
    )
    parts = []
    for name in sorted(listed.stdout.split()):
        try:
            tail = subprocess.run(
                ["docker", "exec", name, "journalctl", "-n", str(lines), "--no-pager", "-o", "short-monotonic"],
                capture_output=True,
                text=True,
                timeout=20,
                check=False,
            ).stdout.rstrip()
        except subprocess.TimeoutExpired:
            tail = "(its journal did not answer within 20 s)"
        parts.append(f"--- {name}: last {lines} journal lines\n{tail}")
    return "\n".join(parts) or "(no lab node is running)"


def begin(
    argv: Sequence[str],
    *,
    cwd: Path = PROJECT,
    env: dict[str, str] | None = None,
    stdin: int | None = subprocess.DEVNULL,
) -> subprocess.Popen[str]:
    """Start one step in its own process group (a hang is killed with everything it started)."""
    return subprocess.Popen(
        list(argv),
        stdin=stdin,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=cwd,
        env=env,
        start_new_session=True,
    )


def finish(
    proc: subprocess.Popen[str], *, step: str, budget: float, input_text: str | None = None
) -> subprocess.CompletedProcess[str]:
    """Wait for a step begun with `begin`; past `budget` seconds it is killed (its whole process group) and the
    test fails naming it, with its last output and each lab node's last journal lines."""
    started = time.monotonic()
    try:
        out, err = proc.communicate(input_text, timeout=budget)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):  # it ended on its own meanwhile
            os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        took = time.monotonic() - started
        pytest.fail(
            f"lab step `{step}` passed its budget of {budget:.0f} s (killed after {took:.0f} s)\n"
            f"its last output:\n{(out or '')[-1500:]}{(err or '')[-800:]}\n{node_journals()}",
            pytrace=False,
        )
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def run_step(
    argv: Sequence[str],
    *,
    step: str,
    budget: float,
    cwd: Path = PROJECT,
    env: dict[str, str] | None = None,
    input_text: str | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run one step; past `budget` seconds it is killed (its whole process group) and the test fails naming it."""
    stdin = subprocess.PIPE if input_text is not None else subprocess.DEVNULL
    return finish(begin(argv, cwd=cwd, env=env, stdin=stdin), step=step, budget=budget, input_text=input_text)


def playbook(
    name: str, *args: str, budget: float | None = None, inventory: Path | None = None
) -> subprocess.CompletedProcess[str]:
    """ansible-playbook NAME on the lab's inventory (or INVENTORY's hosts file), bounded by the playbook's budget."""
    step, default = playbook_step(name, args)
    hosts = inventory or PROJECT / "inventory" / "lab" / "hosts.yml"
    return run_step(
        ["ansible-playbook", "-i", str(hosts), name, *args],
        step=step,
        budget=budget or default,
        env={**os.environ, "ANSIBLE_NOCOLOR": "1"},
    )
