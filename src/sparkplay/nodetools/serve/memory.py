"""The memory guard: an engine held to its admitted claim by a cgroup, and what its kills were.

A native engine's unit carries MemoryMax=/MemoryHigh= (systemd enforces them where its cgroup v2 tree has the
memory controller, as on a Spark's Ubuntu); a docker engine's limit is its container's (`docker update
--memory`, docker's own cgroup). On a host whose memory controller sits in a cgroup v1 hierarchy (a "hybrid"
host, the lab's), systemd cannot enforce the unit's limit: `memguard` (started beside the unit by its
ExecStartPre, as root) then puts the unit's processes into a memory cgroup of their own in that hierarchy
with the same limit.
Either way the kernel kills the engine, not another process of the node, when it outgrows its limit.
Each start records the kill counter it found, so `explain` can tell an OOM kill from any other death.
"""

from __future__ import annotations

import argparse
import subprocess
import time
from pathlib import Path
from typing import Any

from .common import _read_json, _write_json, unit_show

STATE_DIR = "/run/sparkplay/memguard"
CGROUP2 = Path("/sys/fs/cgroup")
V1_GROUP = "sparkplay"  # beneath the node's own memory cgroup


def state_path(unit: str) -> str:
    return f"{STATE_DIR}/{unit}.json"


def v1_memory_mount(mountinfo: str) -> Path | None:
    """Where a cgroup v1 hierarchy holding the memory controller is mounted (from /proc/self/mountinfo)."""
    for line in mountinfo.splitlines():
        fields = line.split(" - ", 1)
        if len(fields) != 2:
            continue
        fstype, _source, options = [*fields[1].split(), "", "", ""][:3]
        if fstype == "cgroup" and "memory" in options.split(","):
            return Path(line.split()[4])
    return None


def own_v1_path(proc_cgroup: str) -> str | None:
    """This process's path in the v1 memory hierarchy ("N:memory:/PATH" of /proc/self/cgroup)."""
    for line in proc_cgroup.splitlines():
        parts = line.split(":", 2)
        if len(parts) == 3 and "memory" in parts[1].split(","):
            return parts[2]
    return None


def _counter(path: Path, key: str) -> int:
    """One `KEY N` line's N in a cgroup file (0 where the file or the line is missing)."""
    try:
        text = path.read_text()
    except OSError:
        return 0
    for line in text.splitlines():
        name, _, value = line.partition(" ")
        if name == key and value.strip().isdigit():
            return int(value)
    return 0


def oom_kills_v1(group: Path) -> int:
    """The kernel's count of OOM kills in a v1 memory cgroup (memory.oom_control's oom_kill)."""
    return _counter(group / "memory.oom_control", "oom_kill")


def oom_kills_v2(group: Path) -> int:
    """The same in a v2 cgroup (memory.events)."""
    return _counter(group / "memory.events", "oom_kill")


def v1_group(unit: str) -> Path | None:
    """The v1 memory cgroup memguard uses for `unit` on this node, or None where there is no v1 hierarchy."""
    try:
        mount = v1_memory_mount(Path("/proc/self/mountinfo").read_text())
        mine = own_v1_path(Path("/proc/self/cgroup").read_text())
    except OSError:
        return None
    if mount is None or mine is None:
        return None
    # memguard runs in the unit's own v1 group on a second start: its parent is the node's
    base = mine.rsplit(f"/{V1_GROUP}/", 1)[0]
    return mount / base.lstrip("/") / V1_GROUP / unit


def _unit_pids(unit: str) -> list[int]:
    group = unit_show(unit, "ControlGroup").get("ControlGroup", "")
    try:
        return [int(p) for p in (CGROUP2 / group.lstrip("/") / "cgroup.procs").read_text().split()]
    except (OSError, ValueError):
        return []


def _number(path: Path) -> int:
    try:
        return int(path.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 0


def _enforce_v1(unit: str, limit: int, high: int) -> str:
    group = v1_group(unit)
    if group is None:
        return "not enforced: neither systemd's cgroup v2 tree nor a v1 hierarchy has the memory controller here"
    group.mkdir(parents=True, exist_ok=True)
    memory, swap = group / "memory.limit_in_bytes", group / "memory.memsw.limit_in_bytes"
    # v1 keeps memory's limit at or below memory+swap's (EINVAL otherwise): a limit raised since the group's
    # last start (an update with a larger claim) writes memory+swap's first, a lowered one memory's first
    raised = swap.exists() and _number(swap) < limit
    for path in [swap, memory] if raised else [memory, swap]:
        if path.exists() or path is memory:  # no swapping past the limit either, where swap is accounted
            path.write_text(str(limit))
    (group / "memory.soft_limit_in_bytes").write_text(str(high))
    for pid in _unit_pids(unit):
        try:
            (group / "cgroup.procs").write_text(str(pid))
        except OSError:  # gone meanwhile
            continue
    return f"enforced in the cgroup v1 memory hierarchy ({group})"


def _same_start(unit: str, invocation: str) -> bool:
    """Whether the unit is still in the start this guard was made for (not stopped, not started anew)."""
    seen = unit_show(unit, "InvocationID", "ActiveState")
    return seen.get("InvocationID", "") == invocation and seen.get("ActiveState") in ("activating", "active")


def _enforce_docker(unit: str, invocation: str, container: str, limit: int, docker: str) -> str:
    """The container's limit, as soon as it exists (a leader's container only once its workers answer)."""
    while _same_start(unit, invocation):
        done = subprocess.run(
            [docker, "update", "--memory", str(limit), "--memory-swap", str(limit), container],
            capture_output=True,
            text=True,
            check=False,
            timeout=60,
        )
        if done.returncode == 0:
            return f"enforced on container {container} (docker's cgroup)"
        time.sleep(0.5)
    return f"not enforced: the unit stopped before container {container} appeared"


def _main_pid(unit: str, invocation: str) -> bool:
    """Wait until the start's main process exists (ExecStart forked); False if the start ended first."""
    while _same_start(unit, invocation):
        if unit_show(unit, "MainPID").get("MainPID", "0") not in ("", "0"):
            return True
        time.sleep(0.05)
    return False


def cmd_memguard(args: argparse.Namespace) -> int:
    """Beside a start of the unit (its ExecStartPre launches it with systemd-run, as a unit of its own, so the
    start never waits for it): hold the engine to its limit as soon as it exists, and note the kills before this
    start. Not a start-post step: an engine that dies while one runs fails the start job, where systemd's own
    restart is the answer; and whatever an ExecStartPre forks is killed before the engine starts."""
    unit, limit, high = args.unit, args.max, args.high or args.max
    invocation = unit_show(unit, "InvocationID").get("InvocationID", "")
    previous = _read_json(state_path(unit)) or {}
    if args.container:
        how = _enforce_docker(unit, invocation, args.container, limit, args.docker)
        kills = int(previous.get("oom_kills_seen") or 0)
    elif not _main_pid(unit, invocation):
        return 0
    else:
        group = unit_show(unit, "ControlGroup").get("ControlGroup", "")
        v2 = CGROUP2 / group.lstrip("/")
        if group and (v2 / "memory.max").exists():
            how = "enforced by systemd (cgroup v2 MemoryMax)"
            kills = int(previous.get("oom_kills_seen") or 0)
        else:
            how = _enforce_v1(unit, limit, high)
            group_v1 = v1_group(unit)
            found = oom_kills_v1(group_v1) if group_v1 else 0
            if found > int(previous.get("oom_kill_counter") or 0):  # the run before this one was killed
                previous["last_oom_at"] = time.time()
                previous["oom_kills_seen"] = (
                    int(previous.get("oom_kills_seen") or 0) + found - int(previous.get("oom_kill_counter") or 0)
                )
                print(f"the engine's previous run was killed above its memory limit of {gib(limit)}", flush=True)
            previous["oom_kill_counter"] = found
            kills = int(previous.get("oom_kills_seen") or 0)
    state: dict[str, Any] = {
        **previous,
        "unit": unit,
        "limit": limit,
        "high": high,
        "how": how,
        "oom_kills_seen": kills,
        "started": time.time(),
    }
    _write_json(state_path(unit), state)
    print(f"memory limit {gib(limit)} (high {gib(high)}): {how}", flush=True)
    return 0


# a v1 limit this high is no limit (the kernel's page-rounded LONG_MAX)
NO_LIMIT_V1 = 1 << 62
_GROUPS: dict[str, str] = {}  # unit -> its v2 ControlGroup (it does not move while the unit exists)


def unit_use(unit: str) -> dict[str, int | None] | None:
    """The memory `unit`'s engine uses now and its limit, read as any user may from the unit's cgroup (v2:
    memory.current and memory.max; v1: memguard's group); None where neither holds it (a docker engine's
    memory is its container's cgroup, which this does not look for)."""
    if unit not in _GROUPS:
        _GROUPS[unit] = unit_show(unit, "ControlGroup").get("ControlGroup", "")
    v2 = CGROUP2 / _GROUPS[unit].lstrip("/")
    if _GROUPS[unit] and (v2 / "memory.current").exists():
        limit = (v2 / "memory.max").read_text().strip() if (v2 / "memory.max").exists() else "max"
        return {"use_bytes": _number(v2 / "memory.current"), "limit_bytes": None if limit == "max" else int(limit)}
    group = v1_group(unit)
    if group is None or not (group / "memory.usage_in_bytes").exists():
        return None
    limit = _number(group / "memory.limit_in_bytes")
    return {
        "use_bytes": _number(group / "memory.usage_in_bytes"),
        "limit_bytes": limit if limit < NO_LIMIT_V1 else None,
    }


def gib(count: int) -> str:
    return f"{count / 2**30:.1f} GiB" if count >= 2**30 else f"{count / 2**20:.0f} MiB"


def current_kills(unit: str) -> dict[str, Any]:
    """What `explain` needs: the limit and every OOM kill of the unit's engine seen so far (v1: the live counter
    against the one at the last start; v2: systemd's own Result and memory.events)."""
    state = _read_json(state_path(unit)) or {}
    if not state:
        return {}
    kills = int(state.get("oom_kills_seen") or 0)
    group = v1_group(unit)
    killed_now = False
    if group is not None and group.exists():
        counter = oom_kills_v1(group)
        if counter > int(state.get("oom_kill_counter") or 0):  # killed since its last start
            kills += counter - int(state.get("oom_kill_counter") or 0)
            killed_now = True
    else:
        cg = unit_show(unit, "ControlGroup").get("ControlGroup", "")
        if cg and oom_kills_v2(CGROUP2 / cg.lstrip("/")):
            killed_now = True
    return {
        "limit": state.get("limit"),
        "how": state.get("how"),
        "oom_kills": kills,
        "killed_now": killed_now,
        "last_oom_at": state.get("last_oom_at"),
    }


def cmd_release(args: argparse.Namespace) -> int:
    """After a stop: the unit's v1 memory cgroup (empty once the engine is gone) and its state file go, so a
    stopped deployment leaves nothing of the guard behind. Prints what went (the role's `changed`)."""
    gone = []
    group = v1_group(args.unit)
    if group is not None and group.is_dir():
        try:
            group.rmdir()  # a cgroup with processes in it refuses: it is then still serving
            gone.append(str(group))
        except OSError as exc:
            print(f"{group} kept: {exc.strerror}", flush=True)
            return 1
    state = Path(state_path(args.unit))
    if state.exists():
        state.unlink()
        gone.append(str(state))
    for item in gone:
        print(f"removed {item}", flush=True)
    return 0
