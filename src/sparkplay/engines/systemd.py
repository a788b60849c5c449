"""systemd unit pieces: an argv as one Exec line, an env file, the status table.

Recipe flags are untrusted text: each argument is double-quoted with
backslash and quote escaped, and `%` and `$` doubled, so systemd starts
exactly the argv the plan holds, with no specifier or variable expansion
and no shell involved.
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from collections.abc import Mapping, Sequence
from typing import Any

from sparkplay.errors import BadInput


def quote(arg: str) -> str:
    if any(c in arg for c in "\n\r\0"):
        raise BadInput(f"argument {arg[:40]!r} spans lines", "give every engine flag on one line")
    escaped = arg.replace("\\", "\\\\").replace('"', '\\"').replace("%", "%%").replace("$", "$$")
    return f'"{escaped}"'


def exec_line(argv: Sequence[str]) -> str:
    """`ExecStart=` value for argv; the program stays bare (systemd wants an absolute path there)."""
    if not argv or not str(argv[0]).startswith("/"):
        raise BadInput(f"the program {argv[:1]} is not an absolute path", "fix the engine adapter's binary path")
    program, *rest = (str(a) for a in argv)
    if any(c.isspace() or c in "\"'\\%$" for c in program):
        raise BadInput(f"the program path {program!r} has characters systemd would read", "use a plain path")
    return " ".join([program, *(quote(a) for a in rest)])


# systemd.exec(5) settings for an engine that runs on the host (the native runtime): its own unprivileged
# user, no privilege to gain, the system read-only but for its home, no capabilities, the kernel's knobs out
# of reach. Devices stay visible (a GPU engine opens /dev/nvidia*), and memory may be writable and
# executable (torch and triton compile kernels at run time).
SANDBOX = (
    "NoNewPrivileges=yes",
    "ProtectSystem=strict",
    "PrivateTmp=yes",
    "ProtectKernelTunables=yes",
    "ProtectKernelModules=yes",
    "ProtectKernelLogs=yes",
    "ProtectControlGroups=yes",
    "ProtectClock=yes",
    "ProtectHostname=yes",
    "ProtectProc=invisible",
    "RestrictSUIDSGID=yes",
    "RestrictRealtime=yes",
    "RestrictNamespaces=yes",
    "LockPersonality=yes",
    "CapabilityBoundingSet=",
    "AmbientCapabilities=",
    "SystemCallArchitectures=native",
    "SystemCallFilter=@system-service",
    "SystemCallErrorNumber=EPERM",
    "RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6 AF_NETLINK",
    "UMask=0027",
    # RDMA registers (locks) the engine's buffers: root could by CAP_IPC_LOCK, the engine's user needs the limit
    "LimitMEMLOCK=infinity",
)
HOMES = ("/home", "/root", "/run/user")


def sandbox(user: str, home: str, readable: Sequence[str]) -> list[str]:
    """The [Service] lines that run a native engine as `user` in its sandbox, writing only `home`.

    `readable`: the folders it reads (the model root); a home folder among them keeps /home readable.
    """
    for path in (home, *readable):
        if any(c.isspace() or c in "\"'\\%$" for c in path):
            raise BadInput(f"the path {path!r} has characters systemd would read", "use a plain path")
    in_homes = any(p == h or p.startswith(h + "/") for p in readable for h in HOMES)
    return [
        f"User={user}",
        f"Group={user}",
        f"WorkingDirectory={home}",
        f"Environment=HOME={home}",
        *SANDBOX,
        f"ProtectHome={'read-only' if in_homes else 'yes'}",
        f"ReadWritePaths={home}",
    ]


def env_file(env: Mapping[str, str], runtime: str = "docker") -> str:
    """KEY=VALUE lines that the reader of this runtime's env file takes back as exactly `env`.

    docker's --env-file takes a value verbatim to the end of its line, so it is written bare; systemd's
    EnvironmentFile= (native) strips quotes, drops backslashes, trims whitespace and joins a line ending in
    a backslash to the next, so there every value is double-quoted with the four characters its parser
    unescapes there (`"`, `\\`, backquote, `$`) escaped. plan.environment() already refused names and values
    that could break a line (a newline, a NUL), which neither reader can carry.
    """
    if runtime == "native":
        return "".join(f'{key}="{_systemd_escaped(value)}"\n' for key, value in sorted(env.items()))
    return "".join(f"{key}={value}\n" for key, value in sorted(env.items()))


def env_value(text: str, name: str, runtime: str = "docker") -> str | None:
    """The value env_file() wrote for `name` (None when the file has none): the gateway presents a
    deployment's own API key, read back from its env file."""
    for line in str(text or "").splitlines():
        key, sep, value = line.partition("=")
        if sep and key == name:
            if runtime != "native":
                return value
            if len(value) < 2 or value[0] != '"' or value[-1] != '"':
                return None
            return re.sub(r'\\(["\\`$])', r"\1", value[1:-1])
    return None


def _systemd_escaped(value: str) -> str:
    return "".join(f"\\{c}" if c in '"\\`$' else c for c in value)


def status_rows(
    records: Mapping[str, Mapping[str, Any]],
    units: Mapping[str, Mapping[str, str]],
    probe: Mapping[str, Any],
    explained: Mapping[str, Any] | None = None,
    unreachable: Mapping[str, Any] | None = None,
    watchdog: Mapping[str, Any] | None = None,
) -> list[dict[str, Any]]:
    """One row per host: rank, host, unit, state, since, health, served model, and why it is not serving.

    records: host -> the deployment record the serve role left (the Deployment's serve_record),
    empty for a host with none; units: host -> `systemctl show` properties;
    probe: the leader's look at its API ({health, served, answers: a completion came back}) and its
    watchdog's state file (or None); explained: host -> the serve tool's `explain` report of its unit;
    unreachable: host -> {rank, msg} for a node that did not answer (off, its management link cut);
    watchdog: the watchdog's state file, where not in `probe`.
    """
    watchdog = (watchdog if watchdog is not None else probe.get("watchdog")) or {}
    # health is a real answer from the model where the probe asked for one (/health stays "ok" while a
    # worker is gone or the engine is frozen)
    healthy = bool(probe.get("answers")) if "answers" in probe else bool(probe.get("health"))
    peers = {str(r.get("address")): f"rank {r.get('rank')}" for r in records.values() if r.get("address")}
    leader_plan = next((r.get("plan_sha256") for r in records.values() if r.get("role") == "leader"), None)
    rows = []
    for host, down in (unreachable or {}).items():
        if down:
            rows.append(
                {
                    "rank": down.get("rank", "-"),
                    "host": host,
                    "role": "-",
                    "unit": "-",
                    "state": "unreachable",
                    "since": "-",
                    "restarts": 0,
                    "health": "-",
                    "model": "-",
                    "watchdog": "-",
                    "watchdog_restarts": 0,
                    "watchdog_stood_down": None,
                    "plan_differs": False,
                    "up": False,
                    "why": f"the node does not answer: {str(down.get('msg') or '-').strip()[:160]}",
                }
            )
    for host, record in records.items():
        if (unreachable or {}).get(host):
            continue
        show = units.get(host) or {}
        state, sub = show.get("ActiveState") or "unknown", show.get("SubState", "")
        leader = record.get("role") == "leader"
        deployed = bool(record)
        # every rank's unit comes from one plan; a rank left from another run (another recipe version,
        # other knobs, a run limited to some hosts) starts with other engine flags than its peers
        differs = bool(deployed and leader_plan and record.get("plan_sha256") != leader_plan)
        rows.append(
            {
                "rank": record.get("rank", "-"),
                "host": host,
                "role": record.get("role", "-"),
                "unit": record.get("unit", "-"),
                "state": (f"{state}/{sub}" if sub else state) if deployed else "not deployed",
                "since": _short_time(show.get("StateChangeTimestamp") or "-"),
                "restarts": int(show.get("NRestarts") or 0),
                "health": ("ok" if healthy else "down") if leader else "-",
                "why": "; ".join(
                    dict.fromkeys(
                        w
                        for w in (
                            probe.get("why") if leader and deployed and not healthy else None,
                            _why(((explained or {}).get(host) or {}).get("why"), peers),
                            watchdog.get("why") if leader and deployed and not healthy else None,
                            answers_changed(watchdog.get("answer")) if leader and deployed else None,
                        )
                        if w
                    )
                )
                or None,
                "model": (record.get("served_name") if probe.get("served") else "-") if leader else "-",
                "watchdog": (watchdog.get("status") or "-") if leader and record.get("watchdog_unit") else "-",
                "watchdog_restarts": int(watchdog.get("restarts_total") or 0) if leader else 0,
                "watchdog_stood_down": (watchdog.get("stood_down") or None) if leader else None,
                "answers": answers_held(watchdog.get("answer")) if leader and record.get("watchdog_unit") else None,
                # the last start's receipt (the serve tool's ready wrote it on the leader): seconds to each step
                "receipt": probe.get("receipt") if leader else None,
                "plan_differs": differs,
                # a leader is up when its API answers, not merely when its process runs
                "up": deployed and state == "active" and (healthy or not leader) and not differs,
            }
        )
    return sorted(rows, key=lambda row: (row["rank"] if isinstance(row["rank"], int) else 1 << 30, row["host"]))


def answers_changed(answer: Any) -> str | None:
    """'answers changed since deploy (at 13:51): ...' from the watchdog's state, or None."""
    changed = answer.get("changed") if isinstance(answer, Mapping) else None
    if not isinstance(changed, Mapping):
        return None
    at = changed.get("since")
    when = f" (at {time.strftime('%H:%M', time.localtime(at))})" if isinstance(at, int | float) else ""
    return f"answers changed since deploy{when}: {changed.get('why') or 'its files are being re-verified'}"


def answers_held(answer: Any) -> str | None:
    """How the watchdog holds the answers: to the deploy's, or not (and why)."""
    if not isinstance(answer, Mapping):
        return None
    if answer.get("check") == "exact":
        return "held to the deploy's" if answer.get("reference") else "held to the deploy's (not yet asked)"
    return f"not held: {answer.get('why') or 'exempt'}"


WAITED = re.compile(r"waiting for (\[[^\]]+\]|[0-9.]+):(\d+)( since [0-9:]+)?: ")


def _why(text: str | None, peers: Mapping[str, str]) -> str | None:
    """The node's explanation with each peer's cable address named by its rank: "waiting for rank 1
    (192.168.100.11:50052): ..." (a node knows addresses; the records know which rank holds each)."""
    if not text:
        return None

    def named(found: re.Match[str]) -> str:
        address, port = found.group(1), found.group(2)
        rank = peers.get(address.strip("[]"))
        return f"waiting for {rank} ({address}:{port}){found.group(3) or ''}: " if rank else found.group(0)

    return WAITED.sub(named, text)


def plan_digest(plan: Mapping[str, Any]) -> str:
    """One digest of the whole launch plan (every rank's argv, env and mounts): the same on every rank
    deployed in one run, so a rank whose record holds another was deployed with other flags."""
    return hashlib.sha256(json.dumps(plan, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def plan_problems(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    return [
        f"rank {row['rank']} ({row['host']}) runs another launch plan than the leader (engine flags, env or "
        "image differ): run `sparkplay up` (or serve.yml) on every host again"
        for row in rows
        if row.get("plan_differs")
    ]


def _short_time(stamp: str) -> str:
    """'Mon 2026-11-30 09:55:02 UTC' -> '2026-11-30 09:55:02 UTC' (the weekday only widens the table)."""
    parts = stamp.split()
    return " ".join(parts[1:]) if len(parts) == 4 else stamp


def status_table(rows: Sequence[Mapping[str, Any]]) -> str:
    columns = ("rank", "host", "unit", "state", "since", "health", "model", "watchdog")
    cells = [[str(row[c]) for c in columns] for row in rows]
    widths = [max(len(c), *(len(r[i]) for r in cells)) for i, c in enumerate(columns)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(columns, widths, strict=True)).rstrip()]
    lines += ["  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)).rstrip() for r in cells]
    return "\n".join(lines)
