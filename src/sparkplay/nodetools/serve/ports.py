"""Ports: waiting for the workers' (`wait-ports`, `run`), and naming who holds the API's (a squatter)."""

from __future__ import annotations

import argparse
import errno
import os
import re
import socket
import subprocess
import sys
import time
from collections.abc import Iterable
from pathlib import Path
from urllib.parse import urlsplit

from .common import PROC, TCP_LISTEN, _endpoint

WAITING = "sparkplay-serve: waiting for"  # the journal line `explain` reads back (what a rank waits for)


def reach(endpoint: str, timeout: float = 1.0) -> str | None:
    """None when the endpoint accepts a TCP connection, else why not, in words a user acts on."""
    try:
        with socket.create_connection(_endpoint(endpoint), timeout=timeout):
            return None
    except TimeoutError:
        return "no answer (the peer or its cable is down)"
    except OSError as exc:
        return {
            errno.ECONNREFUSED: "connection refused (its engine is not listening yet)",
            errno.EHOSTUNREACH: "no route to it (the cable or the peer is down)",
            errno.ENETUNREACH: "no route to it (this node has no cable address on its subnet)",
        }.get(exc.errno or 0, exc.strerror or str(exc))


def address_missing(address: str) -> str | None:
    """None when this node holds `address` (a rank binds its engine there), else why it cannot bind it."""
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        try:
            probe.bind((address, 0))
        except OSError as exc:
            if exc.errno == errno.EADDRNOTAVAIL:
                return "not on this node (its cable link is down or not configured yet)"
            return exc.strerror or str(exc)
    return None


def cmd_wait_ports(args: argparse.Namespace) -> int:
    """Wait until every endpoint answers and every bind address is this node's; each change of reason is one
    journal line (`explain` reads the last). A timeout of 0 waits as long as it takes: a peer that can come
    back (a reboot, a cable) is waited for, not counted as a failed start."""
    deadline = time.monotonic() + args.timeout if args.timeout > 0 else None
    said: dict[str, str] = {}
    while True:
        why = {f"cable address {a}": r for a in getattr(args, "bind", []) if (r := address_missing(a))}
        why |= {e: r for e in args.endpoints if (r := reach(e))}
        for what, reason in why.items():
            if said.get(what) != reason:
                print(f"{WAITING} {what}: {reason}", flush=True)
        said = why
        if not why:
            break
        if deadline is not None and time.monotonic() > deadline:
            print(f"gave up after {args.timeout:.0f} s waiting for {', '.join(why)}", file=sys.stderr)
            return 1
        time.sleep(1)
    print("all ports answer: " + ", ".join([*args.endpoints, *getattr(args, "bind", [])]), flush=True)
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    argv = args.argv[1:] if args.argv[:1] == ["--"] else args.argv
    if not argv:
        print("nothing to run after --", file=sys.stderr)
        return 2
    if args.wait_for or args.bind:
        waited = cmd_wait_ports(argparse.Namespace(endpoints=args.wait_for, bind=args.bind, timeout=args.timeout))
        if waited != 0:
            return waited
    sys.stdout.flush()
    os.execv(argv[0], argv)  # noqa: S606 - the plan's own argv, no shell
    return 127  # not reached


def listening_inodes(port: int, tables: Iterable[str]) -> set[str]:
    """The socket inodes listening on `port` in /proc/net/tcp and tcp6 tables."""
    found = set()
    for table in tables:
        for line in table.splitlines()[1:]:
            fields = line.split()
            if len(fields) > 9 and fields[3] == TCP_LISTEN and int(fields[1].rsplit(":", 1)[1], 16) == port:
                found.add(fields[9])
    return found


def socket_holders(inodes: set[str], proc: Path = PROC) -> dict[int, str]:
    """pid -> cgroup of every process holding one of the sockets."""
    wanted = {f"socket:[{inode}]" for inode in inodes}
    holders: dict[int, str] = {}
    for entry in proc.iterdir() if wanted else ():
        if not entry.name.isdigit():
            continue
        try:
            if any(str(fd.readlink()) in wanted for fd in (entry / "fd").iterdir()):
                holders[int(entry.name)] = (entry / "cgroup").read_text()
        except OSError:  # gone meanwhile, or not ours to read
            continue
    return holders


def container_id(name: str | None) -> str | None:
    if not name:
        return None
    argv = ["docker", "inspect", "--format", "{{.Id}}", name]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False)
    return (done.stdout.strip() or None) if done.returncode == 0 else None


def ss_listeners(port: int) -> list[tuple[str | None, str]] | None:
    """(cgroup, line) of each socket listening on `port`, from the kernel's socket diagnostics (`ss
    --cgroup`: no reading of other users' /proc fds, which root cannot do without CAP_SYS_PTRACE, as in a
    container); None where ss is missing."""
    try:
        out = subprocess.run(
            ["ss", "-Htln", "--cgroup", f"sport = :{port}"], capture_output=True, text=True, timeout=30, check=False
        ).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    rows = []
    for line in out.splitlines():
        if line.strip():
            found = SS_CGROUP.search(line)
            rows.append((found.group(1) if found else None, line.strip()))
    return rows


SS_CGROUP = re.compile(r"\bcgroup:(\S+)")


def _named(cgroup: str) -> str:
    """`PID n (program) of CGROUP` for a cgroup holding one process, else the cgroup alone."""
    try:
        pids = Path(f"/sys/fs/cgroup{cgroup}/cgroup.procs").read_text().split()
        if len(pids) == 1:
            return f"PID {pids[0]} ({(PROC / pids[0] / 'comm').read_text().strip()}) of {cgroup}"
    except OSError:
        pass
    return cgroup


def port_holder_problem(url: str, unit: str, container: str | None = None, proc: Path = PROC) -> str | None:
    """Why the API port is not the unit's (a process of another cgroup holds it), or None. A native engine
    is in the unit's cgroup; a container's processes are in its own scope, named by its ID. The kernel's
    socket diagnostics say which cgroup holds the socket; without them (cgroup v1, no ss) the processes'
    open files do."""
    port = urlsplit(url).port
    if port is None:
        return None
    ident = container_id(container)
    marks = {unit, *((f"docker-{ident}.scope", ident) if ident else ())}
    advice = "another process bound it first; stop it, or serve on another port (serve_port)"
    rows = ss_listeners(port)
    if rows and all(cgroup not in (None, "/") for cgroup, _ in rows):
        for cgroup, _ in rows:
            if not set(str(cgroup).split("/")) & marks:
                return f"port {port} is held by {_named(str(cgroup))}, not by {unit}: {advice}"
        return None
    tables = []
    for name in ("tcp", "tcp6"):
        try:
            tables.append((proc / "net" / name).read_text(encoding="ascii"))
        except OSError:
            continue
    for pid, cgroup in sorted(socket_holders(listening_inodes(port, tables), proc).items()):
        parts = {part for line in cgroup.splitlines() for part in line.split(":", 2)[-1].split("/")}
        if not parts & marks:
            try:
                name = (proc / str(pid) / "comm").read_text().strip()
            except OSError:
                name = "?"
            return f"port {port} is held by PID {pid} ({name}), not by {unit}: {advice}"
    return None
