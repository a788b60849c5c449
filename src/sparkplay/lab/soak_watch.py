"""What the soak reads from the lab besides answers: leaks, the journals' tracebacks, and the swaps made.

Leaks are sampled on every node at the start, every few minutes and at the end: the gateway's and the
watchdog's resident memory and open files (on the leader), the journal's size, the files under sparkplay's
state and config folders, memory cgroups, shared memory (/dev/shm), and the host's Docker objects. A figure
is `growing` when its last sample is above the first by more than its slack and no lower than every sample
before it (a process restarted by a fault starts small again: that is not a leak); otherwise `steady`.
"""

from __future__ import annotations

import re
import subprocess
import time
from pathlib import Path
from typing import Any

from sparkplay.engines.context import STATE_DIR
from sparkplay.engines.names import RECORD, UNITS
from sparkplay.lab.manager import LABEL, container_name
from sparkplay.served import gateway

GATEWAY_UNIT = gateway()["unit"]
CONFIG_DIR = str(Path(RECORD).parent)  # where sparkplay's records and env files sit on a node

# what -> (the shell command on a node that prints one number, the rank it runs on, slack: relative, absolute)
NODE_FIGURES: dict[str, tuple[str, int, float, float]] = {
    "gateway RSS (KiB)": (f"_proc_ {GATEWAY_UNIT} VmRSS", 0, 0.25, 8192),
    "gateway fds": (f"_proc_ {GATEWAY_UNIT} fds", 0, 0.25, 16),
    "watchdog RSS (KiB)": (f"_proc_ {UNITS['watchdog']} VmRSS", 0, 0.25, 8192),
    "watchdog fds": (f"_proc_ {UNITS['watchdog']} fds", 0, 0.25, 16),
    "journal bytes rank0": (
        "journalctl --disk-usage | grep -o '[0-9.]*[KMG]' | head -1 | numfmt --from=iec",
        0,
        4.0,
        64 << 20,
    ),
    "journal bytes rank1": (
        "journalctl --disk-usage | grep -o '[0-9.]*[KMG]' | head -1 | numfmt --from=iec",
        1,
        4.0,
        64 << 20,
    ),
    "state and record files rank0": (f"find {STATE_DIR} {CONFIG_DIR} -xdev -type f ! -name '*~' | wc -l", 0, 0.1, 8),
    "state and record files rank1": (f"find {STATE_DIR} {CONFIG_DIR} -xdev -type f ! -name '*~' | wc -l", 1, 0.1, 8),
    "memory cgroups rank1": (
        "find /sys/fs/cgroup /opt/sparkplay-lab/memory -xdev -type d 2>/dev/null | wc -l",
        1,
        0.1,
        16,
    ),
    "shared memory files rank0": ("find /dev/shm -type f | wc -l", 0, 0.1, 4),
    "shared memory files rank1": ("find /dev/shm -type f | wc -l", 1, 0.1, 4),
}
# the backups the nodes' module keeps of a file (plugins/module_utils/sparkplay_managed.py, held equal by a test)
KEEP_BACKUPS = 10
# what -> (the command printing one number, its rank, the most it may ever read): the backups sparkplay keeps of
# a file it rewrites are bounded by design (the newest KEEP_BACKUPS and the original): they grow until the bound
# and must never pass it, so these are held to the bound, not to their first reading
MOST_BACKUPS = (
    f"find {STATE_DIR} {CONFIG_DIR} -xdev -type f -name '*~' "
    r"| sed -E 's/\.[0-9]+\.[0-9]{4}-[0-9]{2}-[0-9]{2}@[0-9:]{8}~$//' | sort | uniq -c | sort -rn "
    "| awk 'NR == 1 {print $1} END {if (NR == 0) print 0}'"
)
BOUNDED: dict[str, tuple[str, int, float]] = {
    f"backups of one file, the most, rank{rank}": (MOST_BACKUPS, rank, KEEP_BACKUPS + 1) for rank in (0, 1)
}
# the main process of a unit: its VmRSS (KiB) or its count of open files
PROC = 'pid=$(systemctl show -p MainPID --value {unit}); [ "${{pid:-0}}" -gt 0 ] || {{ echo 0; exit; }}; {read}'
READS = {"VmRSS": "awk '/^VmRSS/ {{print $2}}' /proc/$pid/status", "fds": "ls /proc/$pid/fd | wc -l"}


def _command(template: str) -> str:
    if template.startswith("_proc_ "):
        _, unit, what = template.split()
        return PROC.format(unit=unit, read=READS[what].format())
    return template


def _node_number(rank: int, command: str) -> float | None:
    try:
        proc = subprocess.run(
            ["docker", "exec", container_name(rank), "sh", "-c", command], capture_output=True, text=True, timeout=30
        )
    except subprocess.TimeoutExpired:
        return None
    found = re.findall(r"[0-9]+(?:\.[0-9]+)?", proc.stdout)
    return float(found[-1]) if proc.returncode == 0 and found else None


def _docker_objects() -> float:
    count = 0
    for kind in ("container", "network", "volume"):
        listed = subprocess.run(
            ["docker", kind, "ls", "-q", *(["-a"] if kind == "container" else []), "--filter", f"label={LABEL}"],
            capture_output=True,
            text=True,
            timeout=30,
        )
        count += len(listed.stdout.split())
    return float(count)


def sample() -> dict[str, float | None]:
    """One reading of every figure (None where a node could not be read: it is down, which a fault explains)."""
    figures: dict[str, float | None] = {
        what: _node_number(rank, _command(template)) for what, (template, rank, _, _) in NODE_FIGURES.items()
    }
    figures |= {what: _node_number(rank, command) for what, (command, rank, _) in BOUNDED.items()}
    figures["lab docker objects"] = _docker_objects()
    return figures


def verdicts(samples: list[tuple[float, dict[str, float | None]]]) -> list[dict[str, Any]]:
    """Per figure: its first and last readings, every reading, and whether it grows."""
    rows = []
    for what in samples[0][1]:
        series = [(at, value) for at, figs in samples if (value := figs.get(what)) is not None]
        if not series:
            rows.append({"what": what, "start": None, "end": None, "verdict": "unread", "samples": []})
            continue
        rel, slack = NODE_FIGURES[what][2:] if what in NODE_FIGURES else (0.0, 0.0)
        start, end = series[0][1], series[-1][1]
        grows = end > start * (1 + rel) + slack and all(end >= v for _, v in series)
        if what in BOUNDED:
            most = BOUNDED[what][2]
            verdict = f"over its bound of {most:g}" if max(v for _, v in series) > most else f"within {most:g}"
        else:
            verdict = "growing" if grows else "steady"
        rows.append(
            {
                "what": what,
                "start": start,
                "end": end,
                "verdict": verdict,
                "samples": [[round(at, 1), v] for at, v in series],
            }
        )
    return rows


def _journal(rank: int, since: float, *args: str) -> list[str]:
    stamp = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(since))
    argv = ["journalctl", "--utc", "--since", stamp, "-o", "short-iso", "--no-pager", *args]
    try:
        proc = subprocess.run(
            ["docker", "exec", container_name(rank), *argv], capture_output=True, text=True, timeout=60
        )
    except subprocess.TimeoutExpired:
        return []
    return proc.stdout.splitlines()


def journal_lines(since: float) -> tuple[set[str], set[str]]:
    """Since the soak began: every traceback line in any node's journal, and the gateway's starts on demand
    (each one a swap), each line with its time, so readings before and after a reboot add up without repeats
    (a node's journal may not outlive its boot)."""
    tracebacks = {
        f"rank{rank}: {line[:240]}"
        for rank in (0, 1)
        for line in _journal(rank, since, "-g", "Traceback")
        if "Traceback" in line  # not journalctl's own "-- No entries --"
    }
    started = {
        line for line in _journal(0, since, "-u", GATEWAY_UNIT) if line.endswith(" on demand") and "starting " in line
    }
    return tracebacks, started
