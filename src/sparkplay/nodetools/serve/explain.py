"""Why a rank is not serving, in words a user acts on: read on the node from its unit, journal, cable and
memory guard (`sparkplay-serve explain`, run by status, doctor and the watchdog)."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import time
from pathlib import Path
from typing import Any

from .common import PROC, unit_show
from .memory import current_kills, gib
from .ports import WAITING

PROPS = (
    "LoadState",
    "ActiveState",
    "SubState",
    "Result",
    "NRestarts",
    "ExecMainCode",
    "ExecMainStatus",
    "MainPID",
    "InvocationID",
    "StateChangeTimestamp",
)
READY = "all ports answer"


def twin_states(twins: list[str], sys_net: Path = Path("/sys/class/net")) -> dict[str, str]:
    """'up', 'no carrier', 'down' (set down by someone) or 'missing' for each of the cable's twins."""
    states = {}
    for twin in twins:
        base = sys_net / twin
        if not base.exists():
            states[twin] = "missing"
            continue
        flags = _read(base / "flags")
        if flags and not int(flags, 16) & 1:  # IFF_UP clear: the kernel will not even read its carrier
            states[twin] = "down"
            continue
        states[twin] = "up" if _read(base / "carrier") == "1" else "no carrier"
    return states


def _read(path: Path) -> str:
    try:
        return path.read_text().strip()
    except OSError:
        return ""


def fabric_twins(env_file: str | None) -> list[str]:
    """The cable's twins from the fabric role's env file (SPARKPLAY_FABRIC_TWINS=a,b)."""
    for line in _read(Path(env_file)).splitlines() if env_file else ():
        key, _, value = line.partition("=")
        if key.strip() == "SPARKPLAY_FABRIC_TWINS":
            return [t for t in value.strip().strip('"').split(",") if t]
    return []


def journal_lines(unit: str, invocation: str, count: int = 200) -> list[tuple[float, str]]:
    """(time, message) of this invocation's last lines (older ones say nothing of now)."""
    argv = ["journalctl", "-u", unit, "-n", str(count), "--no-pager", "-o", "json"]
    if invocation:
        argv += [f"_SYSTEMD_INVOCATION_ID={invocation}"]
    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False).stdout
    except (OSError, subprocess.TimeoutExpired):
        return []
    lines = []
    for raw in out.splitlines():
        try:
            entry = json.loads(raw)
        except ValueError:
            continue
        message = entry.get("MESSAGE")
        if isinstance(message, str):
            lines.append((int(entry.get("__REALTIME_TIMESTAMP", 0)) / 1e6, message))
    return lines


def last_words(unit: str) -> str:
    """The unit's last journal line that is the engine's own (not systemd's bookkeeping, not the guard's)."""
    argv = ["journalctl", "-u", unit, "-n", "40", "--no-pager", "-o", "json"]
    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False).stdout
    except (OSError, subprocess.TimeoutExpired):
        return ""
    for raw in reversed(out.splitlines()):
        try:
            entry = json.loads(raw)
        except ValueError:
            continue
        text = entry.get("MESSAGE")
        if not isinstance(text, str) or not text.strip() or entry.get("SYSLOG_IDENTIFIER") == "systemd":
            continue
        if not text.startswith(("memory limit ", "the engine's previous run")):
            return text.strip()[:200]
    return ""


def waiting_for(lines: list[tuple[float, str]]) -> list[tuple[float, str]]:
    """What the rank still waits for: the wait lines since its last 'all ports answer' (each target's last)."""
    pending: dict[str, tuple[float, str]] = {}
    first: dict[str, float] = {}
    for stamp, message in lines:
        if message.startswith(READY):
            pending.clear()
            first.clear()
        elif message.startswith(WAITING):
            what = message[len(WAITING) :].strip()
            target = what.split(": ", 1)[0]
            first.setdefault(target, stamp)
            pending[target] = (first[target], what)
    return list(pending.values())


# what is not the checkpoint in a model folder: sparkplay's bookkeeping, the hub's (ckpt/manifest.py's walk)
NOT_MODEL = (".sparkplay", ".cache")


def started_at(pid: str, proc: Path = PROC) -> float | None:
    """When process `pid` started, in seconds since the epoch (boot time + its start in clock ticks)."""
    if pid in ("", "0"):
        return None
    stat, boot = _read(proc / pid / "stat"), _read(proc / "stat")
    try:
        ticks = int(stat.rsplit(")", 1)[1].split()[19])  # field 22: starttime
        btime = next(int(line.split()[1]) for line in boot.splitlines() if line.startswith("btime "))
    except (IndexError, ValueError, StopIteration):
        return None
    return btime + ticks / os.sysconf("SC_CLK_TCK")


def replaced_since(folders: list[str], since: float, limit: int = 5) -> list[tuple[float, str]]:
    """(ctime, path) of each file under `folders` changed or replaced after `since` (ctime: a write, a rename
    into place, a new link; no touch can set it back), newest first. The engine that started before holds
    the old bytes (a mapping of a deleted file) or reads changed ones: either way not what was verified."""
    found: list[tuple[float, str]] = []
    for folder in folders:
        pending = [(Path(folder), True)]
        while pending:
            where, top = pending.pop()
            try:
                entries = list(os.scandir(where))
            except OSError:
                continue
            for entry in entries:
                if top and entry.name in NOT_MODEL:
                    continue
                try:
                    st = entry.stat(follow_symlinks=False)
                except OSError:
                    continue
                if entry.is_dir(follow_symlinks=False):
                    pending.append((Path(entry.path), False))
                elif st.st_ctime > since:
                    found.append((st.st_ctime, entry.path))
    return sorted(found, reverse=True)[:limit]


def _clock(stamp: float) -> str:
    return time.strftime("%H:%M", time.localtime(stamp))


def frozen(pid: str) -> bool:
    """The engine's main process stopped by a signal (SIGSTOP): alive, answering nothing."""
    if pid in ("", "0"):
        return False
    stat = _read(PROC / pid / "stat")
    return bool(stat) and stat.rsplit(")", 1)[-1].split()[:1] == ["T"]


def explain(
    show: dict[str, str], waits: list[tuple[float, str]], twins: dict[str, str], memory: dict[str, Any], last: str
) -> str | None:
    """The one sentence status shows for a rank (None: nothing is wrong that the rank itself can see), with the
    state of a cable twin that is not up after whatever else it says."""
    cable = "; ".join(
        f"twin {t} {'is missing' if s == 'missing' else 'has ' + s if s == 'no carrier' else 'is ' + s}"
        for t, s in twins.items()
        if s != "up"
    )
    why = _reason(show, waits, memory, last)
    return "; ".join(part for part in (why, cable) if part) or None


def _reason(show: dict[str, str], waits: list[tuple[float, str]], memory: dict[str, Any], last: str) -> str | None:
    active, sub, result = show.get("ActiveState", ""), show.get("SubState", ""), show.get("Result", "")
    restarts = int(show.get("NRestarts") or 0)
    limit = memory.get("limit")
    oom = ""
    if memory.get("oom_kills"):
        at = memory.get("last_oom_at")
        oom = f"killed {memory['oom_kills']} time(s) above its memory limit of {gib(int(limit or 0))}" + (
            f" (last at {_clock(at)})" if at else ""
        )
    if active == "failed" or result == "start-limit-hit":
        why = f"gave up after {restarts} restarts ({result or 'failed'})"
        if result == "oom-kill" or memory.get("killed_now") or oom:
            why = f"{why}: {oom or 'killed above its memory limit'}; raise its memory claim or lower its context"
        elif last:
            why = f"{why}: {last}"
        return f"{why}; fix it, then `sparkplay up` (or systemctl reset-failed and start the unit)"
    if active in ("activating", "deactivating") or sub == "auto-restart":
        if result == "oom-kill" or memory.get("killed_now"):
            return f"killed: above its memory limit of {gib(int(limit or 0))}; restarting ({restarts} restarts)"
        return f"engine exited {restarts} time(s), restarting: {last or result}"
    if active == "inactive":
        return "stopped"
    if active != "active":
        return f"unit {active or 'unknown'}"
    if waits:
        return "; ".join(
            f"waiting for {what.split(': ', 1)[0]} since {_clock(since)}: {what.split(': ', 1)[-1]}"
            for since, what in waits
        )
    if frozen(show.get("MainPID", "")):
        return "engine frozen (its process is stopped): the watchdog restarts it after its failed probes"
    return oom or None


def replaced_words(replaced: list[tuple[float, str]]) -> str:
    """The sentence status shows for an engine started before a file it serves was replaced."""
    stamp, path = replaced[0]
    more = f" and {len(replaced) - 1} more" if len(replaced) > 1 else ""
    return (
        f"serving a file replaced at {_clock(stamp)} ({path}{more}): restart to load the verified copy "
        "(`sparkplay verify` restarts it, workers first)"
    )


def report(unit: str, fabric_env: str | None, models: list[str] | None = None) -> dict[str, Any]:
    show = unit_show(unit, *PROPS)
    lines = journal_lines(unit, show.get("InvocationID", ""))
    twins = twin_states(fabric_twins(fabric_env))
    memory = current_kills(unit)
    active = show.get("ActiveState") == "active"
    waits = waiting_for(lines) if active else []
    loaded = show.get("LoadState") == "loaded"  # no unit here: nothing deployed, nothing to explain
    started = started_at(show.get("MainPID", "")) if active and models else None
    replaced = replaced_since(models or [], started) if started is not None else []
    why = explain(show, waits, twins, memory, last_words(unit)) if loaded else None
    if replaced:
        why = "; ".join(part for part in (why, replaced_words(replaced)) if part)
    return {
        "unit": unit,
        "why": why,
        "replaced": [{"path": path, "at": stamp} for stamp, path in replaced],
        "waiting": [w for _, w in waits],
        "twins": twins,
        "memory": memory,
        "restarts": int(show.get("NRestarts") or 0),
        "result": show.get("Result", ""),
    }


def cmd_explain(args: argparse.Namespace) -> int:
    print(json.dumps(report(args.unit, args.fabric_env, args.model_dir)))
    return 0
