#!/usr/bin/env python3
"""Time `make test`'s phases and report them with the slowest tests: durations are data.

    timed.py --reset                 start a new record (.cache/test-times/)
    timed.py PHASE -- COMMAND ...    run COMMAND, record PHASE's seconds and exit code, exit as it did
    timed.py --together PHASE=COMMAND PHASE=COMMAND ...
                                     run the COMMANDs (shell lines) at once, each recorded as a phase;
                                     every one after the first at the lowest CPU priority (nice 19): the
                                     first is the lab, whose step budgets must hold, the others use what
                                     it leaves idle; exit as the first that failed
    timed.py --report                print each phase, the wall-clock total, and the slowest tests and modules

Standard library only: it runs before the virtualenv exists (the setup phase makes it).
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

TIMES = Path(__file__).resolve().parent.parent / ".cache" / "test-times"
PHASES = TIMES / "phases.tsv"


STARTED = TIMES / "started"  # when --reset ran: the wall-clock total counts from it (phases may overlap)


def clock(seconds: float) -> str:
    return f"{int(seconds // 60)}:{seconds % 60:04.1f}"


def report() -> None:
    rows = [line.split("\t") for line in PHASES.read_text().splitlines()] if PHASES.exists() else []
    print("\nmake test, by phase (.cache/test-times/phases.tsv):")
    for phase, seconds, rc in rows:
        print(f"  {phase:<12} {clock(float(seconds)):>8}  {'ok' if rc == '0' else 'FAILED rc ' + rc}")
    total = sum(float(seconds) for _, seconds, _ in rows)
    print(f"  {'phases':<12} {clock(total):>8}  (summed; phases run --together overlap)")
    if STARTED.exists():
        print(f"  {'wall':<12} {clock(time.time() - float(STARTED.read_text())):>8}")
    tests = [
        line.split("\t") for found in sorted(TIMES.glob("pytest*.tsv")) for line in found.read_text().splitlines()[1:]
    ]
    if not tests:
        return
    modules: dict[str, float] = defaultdict(float)
    for node, _, seconds, _ in tests:
        modules[node.split("::")[0]] += float(seconds)
    print("slowest test modules (setup, call and teardown; .cache/test-times/pytest-*.tsv):")
    for module, seconds in sorted(modules.items(), key=lambda kv: -kv[1])[:12]:
        print(f"  {clock(seconds):>8}  {module}")


def main(argv: list[str]) -> int:
    if argv == ["--reset"]:
        TIMES.mkdir(parents=True, exist_ok=True)
        PHASES.write_text("")
        STARTED.write_text(f"{time.time():.1f}")
        for found in TIMES.glob("pytest*.tsv"):
            found.unlink()
        return 0
    if argv[:1] == ["--together"] and len(argv) > 1 and all("=" in a for a in argv[1:]):
        return together([tuple(a.split("=", 1)) for a in argv[1:]])  # type: ignore[misc]
    if argv == ["--report"]:
        report()
        return 0
    if len(argv) < 3 or argv[1] != "--":
        print(__doc__, file=sys.stderr)
        return 2
    phase, command = argv[0], argv[2:]
    started = time.monotonic()
    rc = subprocess.call(command)
    record(phase, time.monotonic() - started, rc)
    if rc != 0:
        report()  # what ran, and how long, before the failure
    return rc


def record(phase: str, seconds: float, rc: int) -> None:
    TIMES.mkdir(parents=True, exist_ok=True)
    with PHASES.open("a") as fh:
        fh.write(f"{phase}\t{seconds:.1f}\t{rc}\n")


def together(parts: list[tuple[str, str]]) -> int:
    """Each (phase, shell line) at once; the first at normal priority, the rest under nice 19."""
    started = time.monotonic()
    running = {
        phase: subprocess.Popen([*(["nice", "-n", "19"] if i else []), "bash", "-c", line])
        for i, (phase, line) in enumerate(parts)
    }
    codes: dict[str, int] = {}
    while len(codes) < len(running):
        for phase, proc in running.items():
            if phase not in codes and proc.poll() is not None:
                codes[phase] = proc.returncode
                record(phase, time.monotonic() - started, proc.returncode)
                print(f"timed: {phase} ended, rc {proc.returncode}, {clock(time.monotonic() - started)}", flush=True)
        time.sleep(0.5)
    failed = [codes[phase] for phase, _ in parts if codes[phase] != 0]
    if failed:
        report()
    return failed[0] if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
