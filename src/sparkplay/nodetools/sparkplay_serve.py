#!/usr/bin/python3
"""sparkplay-serve: what the serve role runs on a node (Python 3 standard library only; the watchdog's
metrics use prometheus_client, from the node's packages).

sparkplay-serve wait-ports ADDR:PORT ... [--timeout S]
    Block until every port accepts a TCP connection (a leader's
    ExecStartPre: workers first). Exit 1 at the timeout.
sparkplay-serve watch --unit U --peer ADDR:PORT ...
    Runs as a unit on the leader. A connection to a worker that the worker
    closed while the leader still holds it (CLOSE_WAIT) means the worker
    went away, its state with it: restart the leader, which then waits
    for the worker again.
sparkplay-serve ready --url URL --model NAME --timeout S --unit U [--peer HOST ...]
    Wait until the API is healthy, lists the model and answers a
    temperature-0 completion, while watching this rank's unit and each
    peer's (over the peer ssh trust): a failed unit stops the wait. Prints
    one JSON object; on failure it holds every rank's last journal lines.
    Only an API served by the unit counts: a port held by another process
    (one that bound it first) is named and never taken for the model.
    Exit 0 ready, 4 a unit failed, 5 timed out, 6 another process holds the port.
sparkplay-serve watchdog --url URL --model NAME --unit U [--worker ADDR ...] [--interval S] [--failures K]
        [--grace S] [--max-restarts R] [--window S] [--metrics-port P] [--container NAME]
    Runs as a unit on the leader. A real completion (a few tokens at
    temperature 0) every interval; K failed probes in a row restart every
    rank in order (stop the leader and the workers, start the workers, then
    the leader, wait for an answer). At most R restarts per window, then it
    stands down and records why (the state file, read by status); a pause
    file stops it acting; a restart of the unit by anyone gives a new grace.
    Counters for Prometheus on METRICS-BIND:METRICS-PORT (prometheus_client).
sparkplay-serve bench --url URL --model NAME --benchy PATH --tokenizer T --corpus FILE|URL --out FILE
        [--pp N ...] [--tg N ...] [--depth N ...] [--concurrency C ...] [--runs R]
    The bench on the leader: first the invariance check (fixed prompts at
    temperature 0 answered alone, then among C concurrent requests for each
    level above 1: the tokens must be identical; a difference names the
    prompt, the level and the first differing position), then llama-benchy
    (prompt processing and generation rates; a local corpus is served to it
    on loopback), then a bare one-token request beside llama-benchy's own
    one-token latency (the client's overhead). Writes one JSON object to
    --out. Exit 0, 1 when llama-benchy failed, 3 when outputs differ.
    Started as root with --as-user, it reads the API's key (--api-key-env)
    first, then drops to that user for everything else; llama-benchy gets
    the key through its environment, never its command line.
sparkplay-serve probe --url URL --model NAME [--api-key-env NAME --env-file FILE]
    One look (no completion): JSON {health, models, served}.
sparkplay-serve verify-unit FILE NAME
    systemd-analyze verify FILE under the unit name NAME (templates land
    under a temporary name that systemd would refuse to parse).
"""

from __future__ import annotations

import argparse
import functools
import http.server
import json
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

JOURNAL_LINES = 40
TCP_ESTABLISHED, TCP_CLOSE_WAIT, TCP_LISTEN = "01", "08", "0A"
PROC = Path("/proc")


def _endpoint(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    return host.strip("[]"), int(port)


def port_open(endpoint: str, timeout: float = 1.0) -> bool:
    try:
        with socket.create_connection(_endpoint(endpoint), timeout=timeout):
            return True
    except OSError:
        return False


def cmd_wait_ports(args: argparse.Namespace) -> int:
    deadline = time.monotonic() + args.timeout
    waiting = list(args.endpoints)
    said: set[str] = set()
    while waiting:
        waiting = [e for e in waiting if not port_open(e)]
        for endpoint in waiting:
            if endpoint not in said:
                print(f"waiting for {endpoint}", flush=True)
                said.add(endpoint)
        if not waiting:
            break
        if time.monotonic() > deadline:
            print(f"gave up after {args.timeout:.0f} s waiting for {', '.join(waiting)}", file=sys.stderr)
            return 1
        time.sleep(1)
    print("all ports answer: " + ", ".join(args.endpoints), flush=True)
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    argv = args.argv[1:] if args.argv[:1] == ["--"] else args.argv
    if not argv:
        print("nothing to run after --", file=sys.stderr)
        return 2
    if args.wait_for:
        waited = cmd_wait_ports(argparse.Namespace(endpoints=args.wait_for, timeout=args.timeout))
        if waited != 0:
            return waited
    sys.stdout.flush()
    os.execv(argv[0], argv)  # noqa: S606 - the plan's own argv, no shell
    return 127  # not reached


# -- the leader's watcher ---------------------------------------------------


def _hex_endpoint(endpoint: str) -> str:
    """'192.168.100.11:50052' as /proc/net/tcp spells a remote address ('0B64A8C0:C384')."""
    host, port = _endpoint(endpoint)
    packed = socket.inet_aton(host)
    return f"{int.from_bytes(packed, 'little'):08X}:{port:04X}"


def connection_states(endpoints: list[str], tcp_table: str, uid: int | None = None) -> dict[str, set[str]]:
    """For each endpoint, the TCP states of the sockets in this netns whose remote end is it (only those of
    `uid`, the engine's user, when given: another user's half-closed socket says nothing of the engine)."""
    wanted = {_hex_endpoint(e): e for e in endpoints}
    states: dict[str, set[str]] = {e: set() for e in endpoints}
    for line in tcp_table.splitlines()[1:]:
        fields = line.split()
        if len(fields) > 7 and fields[2] in wanted and (uid is None or fields[7] == str(uid)):
            states[wanted[fields[2]]].add(fields[3])
    return states


def main_uid(unit: str) -> int | None:
    """The user the unit's main process runs as, or None while it has none."""
    pid = unit_show(unit, "MainPID").get("MainPID", "0")
    try:
        status = (PROC / pid / "status").read_text() if pid not in ("", "0") else ""
    except OSError:
        return None
    uid = next((line.split()[1] for line in status.splitlines() if line.startswith("Uid:")), None)
    return int(uid) if uid is not None else None


def unit_show(unit: str, *props: str, peer: str | None = None) -> dict[str, str]:
    argv = ["systemctl", "show", unit, "--property=" + ",".join(props)]
    if peer:
        argv = ["ssh", "-o", "BatchMode=yes", "-o", "ConnectTimeout=5", peer, *argv]
    out = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False).stdout
    return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)


def lost_peers(states: dict[str, set[str]]) -> list[str]:
    """Workers that closed their end while the leader still holds it (CLOSE_WAIT) and has no live one."""
    return [e for e, found in states.items() if TCP_CLOSE_WAIT in found and TCP_ESTABLISHED not in found]


def cmd_watch(args: argparse.Namespace) -> int:
    print(f"watching {args.unit}'s connections to {', '.join(args.peers)}", flush=True)
    while True:
        time.sleep(args.interval)
        if unit_show(args.unit, "ActiveState").get("ActiveState") != "active":
            continue
        table = (PROC / "net" / "tcp").read_text(encoding="ascii")
        lost = lost_peers(connection_states(args.peers, table, main_uid(args.unit)))
        if lost:
            print(f"{', '.join(lost)} went away: restarting {args.unit} so it reconnects", flush=True)
            subprocess.run(["systemctl", "restart", "--no-block", args.unit], check=False)
            time.sleep(args.interval * 3)


# -- who holds the API's port --------------------------------------------------


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
        out = subprocess.run(["ss", "-Htln", "--cgroup", f"sport = :{port}"], capture_output=True, text=True,
                             timeout=30, check=False).stdout  # fmt: skip
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


# -- readiness ----------------------------------------------------------------


# the API's key, when the engine has one: read from the 0600 env file (never an argument of this tool)
API_KEY: list[str] = []


def env_file_value(path: str, name: str, native: bool) -> str | None:
    """`name`'s value in an env file sparkplay wrote: systemd's quoted form (native) or docker's bare one."""
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        key, sep, value = line.partition("=")
        if sep and key == name:
            if native and len(value) >= 2 and value[0] == value[-1] == '"':
                out, escaped = [], False
                for c in value[1:-1]:
                    if escaped or c != "\\":
                        out.append(c)
                        escaped = False
                    else:
                        escaped = True
                return "".join(out)
            return value
    return None


def use_api_key(args: argparse.Namespace) -> None:
    if getattr(args, "api_key_env", None):
        key = env_file_value(args.env_file, args.api_key_env, args.env_format == "native")
        API_KEY[:] = [key] if key else []


def http_json(url: str, body: dict[str, Any] | None = None, timeout: float = 10.0) -> tuple[int, Any]:
    data = json.dumps(body).encode() if body is not None else None
    headers = {"Content-Type": "application/json"}
    if API_KEY:
        headers["Authorization"] = f"Bearer {API_KEY[0]}"
    request = urllib.request.Request(url, data=data, headers=headers)  # noqa: S310
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:  # noqa: S310 - our own API URL
            text = response.read().decode("utf-8", "replace")
            status = response.status
    except urllib.error.HTTPError as exc:
        return exc.code, None
    except (OSError, ValueError):
        return 0, None
    try:
        return status, json.loads(text)
    except ValueError:
        return status, text


def probe(url: str, model: str) -> dict[str, Any]:
    health, _ = http_json(f"{url}/health", timeout=5)
    status, listing = http_json(f"{url}/v1/models", timeout=5) if health == 200 else (0, None)
    names = []
    if status == 200 and isinstance(listing, dict):
        names = [str(m.get("id")) for m in listing.get("data") or [] if isinstance(m, dict)]
    return {"health": health == 200, "models": names, "served": model in names}


def completion(url: str, model: str, prompt: str, max_tokens: int, timeout: float = 120) -> dict[str, Any] | None:
    body = {
        "model": model,
        "messages": [{"role": "user", "content": prompt}],
        "temperature": 0,
        "max_tokens": max_tokens,
    }
    started = time.monotonic()
    status, answer = http_json(f"{url}/v1/chat/completions", body, timeout=timeout)
    if status != 200 or not isinstance(answer, dict) or not answer.get("choices"):
        return None
    message = answer["choices"][0].get("message") or {}
    text = message.get("content") or message.get("reasoning_content") or ""
    if not text:
        return None
    return {
        "text": text,
        "tokens": (answer.get("usage") or {}).get("completion_tokens"),
        "seconds": round(time.monotonic() - started, 3),
    }


def journal(unit: str, peer: str | None = None) -> str:
    argv = ["journalctl", "-u", unit, "-n", str(JOURNAL_LINES), "--no-pager", "-o", "short-iso"]
    if peer:
        argv = ["ssh", "-o", "BatchMode=yes", "-o", "ConnectTimeout=5", peer, *argv]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"(journal unavailable: {exc})"
    return (done.stdout or done.stderr).strip()


def unit_failed(state: dict[str, str], restarts_before: int) -> str | None:
    """Why a unit counts as failed during the wait, or None."""
    active, sub = state.get("ActiveState", ""), state.get("SubState", "")
    if active == "failed":
        return f"failed ({state.get('Result', '?')})"
    if sub == "auto-restart" or int(state.get("NRestarts", "0") or 0) > restarts_before:
        return f"exited and is being restarted ({state.get('Result', '?')})"
    if active == "inactive":
        return "stopped"
    return None


def cmd_ready(args: argparse.Namespace) -> int:
    use_api_key(args)
    ranks: list[tuple[str, str | None]] = [("rank 0", None)] + [(f"rank {i + 1}", p) for i, p in enumerate(args.peers)]
    props = ("ActiveState", "SubState", "NRestarts", "Result")
    before = {name: int(unit_show(args.unit, *props, peer=peer).get("NRestarts", "0") or 0) for name, peer in ranks}
    started = time.monotonic()
    stage, result = "health", {}
    while True:
        # first: an engine that cannot bind its port fails too, but the process holding it is the news
        squatted = port_holder_problem(args.url, args.unit, args.container)
        if squatted:
            return _report(args, ranks, 6, squatted, stage, started)
        for name, peer in ranks:
            why = unit_failed(unit_show(args.unit, *props, peer=peer), before[name])
            if why:
                return _report(args, ranks, 4, f"{name}'s {args.unit} {why} while waiting", stage, started)
        look = probe(args.url, args.model)
        stage = "completion" if look["served"] else "models" if look["health"] else "health"
        if look["served"]:
            answer = completion(args.url, args.model, args.prompt, args.max_tokens)
            if answer:
                result = {"ready": True, "seconds": round(time.monotonic() - started, 1), "completion": answer}
                print(json.dumps(result), flush=True)
                return 0
        if time.monotonic() - started > args.timeout:
            return _report(args, ranks, 5, f"not ready after {args.timeout} s (stuck at: {stage})", stage, started)
        _progress(args.progress, stage, started)
        time.sleep(args.interval)


def _progress(path: str | None, stage: str, started: float) -> None:
    if path:
        scratch = Path(path + ".tmp")
        scratch.write_text(json.dumps({"stage": stage, "waited_s": round(time.monotonic() - started, 1)}))
        scratch.replace(path)


def _report(args: argparse.Namespace, ranks: list[tuple[str, str | None]], code: int, why: str, stage: str,
            started: float) -> int:  # fmt: skip
    journals = {name: journal(args.unit, peer) for name, peer in ranks}
    print(json.dumps({"ready": False, "why": why, "stage": stage, "seconds": round(time.monotonic() - started, 1),
                      "journals": journals}), flush=True)  # fmt: skip
    return code


# -- the watchdog ------------------------------------------------------------------


class Watchdog:
    """Probes the deployment with a real completion; restarts every rank in order after K failures in a
    row; at most R restarts in a window, then stands down and says why. State in a JSON file for status."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.state: dict[str, Any] = {"status": "starting", "restarts": [], "failures_in_a_row": 0,
                                      "probes": 0, "probe_failures": 0, "restarts_total": 0,
                                      "stood_down": None, "last_ok": None, "since": time.time()}  # fmt: skip
        previous = _read_json(args.state)
        if isinstance(previous, dict) and previous.get("stood_down"):  # a stand-down outlives a watchdog restart
            self.state.update({k: previous.get(k, self.state[k]) for k in self.state})
        try:
            self.metrics = _metrics(args.metrics_port, args.metrics_bind)
        except OSError as exc:  # the port taken (by anyone): watch without counters rather than crash-loop
            self.metrics = None
            self.state["metrics_problem"] = f"metrics port {args.metrics_bind}:{args.metrics_port}: {exc.strerror}"
            print(self.state["metrics_problem"], flush=True)

    def save(self) -> None:
        self.state["updated"] = time.time()
        _write_json(self.args.state, self.state)
        if self.metrics:
            m = self.metrics
            m["stood_down"].set(1 if self.state["stood_down"] else 0)
            m["paused"].set(1 if self.state["status"] == "paused" else 0)
            m["failures_in_a_row"].set(self.state["failures_in_a_row"])

    def healthy(self) -> bool:
        squatted = port_holder_problem(self.args.url, self.args.unit, self.args.container)
        self.state["port_problem"] = squatted
        if squatted:  # an answer from another process proves nothing about the engine
            print(squatted, flush=True)
            self.state["probes"] += 1
            self.state["probe_failures"] += 1
            return False
        answer = completion(self.args.url, self.args.model, self.args.prompt, self.args.max_tokens,
                            timeout=self.args.probe_timeout)  # fmt: skip
        self.state["probes"] += 1
        if self.metrics:
            self.metrics["probes"].inc()
        if answer is None:
            self.state["probe_failures"] += 1
            if self.metrics:
                self.metrics["probe_failures"].inc()
            return False
        self.state["last_ok"] = time.time()
        return True

    def restart_all(self) -> bool:
        """Stop every rank (leader first, so it never runs without its workers), start the workers in order,
        then the leader, and wait until the model answers again."""
        unit, workers = self.args.unit, self.args.workers
        print(f"restarting every rank: stop {unit} here and on {', '.join(workers) or 'no worker'}", flush=True)
        # a wedged engine may never finish a graceful stop (SIGTERM, then SIGCONT to a stopped one): kill it
        subprocess.run(["systemctl", "kill", "--signal=SIGKILL", unit], check=False, timeout=60)
        subprocess.run(["systemctl", "stop", unit], check=False, timeout=180)
        for peer in reversed(workers):
            _on(peer, ["systemctl", "stop", unit])
        for peer in workers:
            _on(peer, ["systemctl", "start", unit])
        subprocess.run(["systemctl", "start", unit], check=False, timeout=180)
        deadline = time.monotonic() + self.args.restart_timeout
        while time.monotonic() < deadline:
            time.sleep(self.args.interval)
            if self.healthy():
                return True
        return False

    def started_anew(self) -> bool:
        """Whether the leader's unit was started since the last look (a deploy, a person): a new grace."""
        invocation = unit_show(self.args.unit, "InvocationID").get("InvocationID", "")
        seen, self.invocation = getattr(self, "invocation", None), invocation
        return seen is not None and invocation != seen

    def step(self) -> None:
        args, state = self.args, self.state
        if self.started_anew():
            state.update(since=time.time(), last_ok=None, failures_in_a_row=0)
        if Path(args.pause).exists():
            state["status"] = "paused"
            return
        if state["stood_down"]:
            state["status"] = "stood-down"
            return
        in_grace = time.time() - state["since"] < args.grace and state["last_ok"] is None
        if self.healthy():
            state.update(status="ok", failures_in_a_row=0)
            return
        if in_grace:
            state["status"] = "starting"
            return
        state["failures_in_a_row"] += 1
        state["status"] = "failing"
        print(f"probe failed ({state['failures_in_a_row']} in a row)", flush=True)
        if state["failures_in_a_row"] < args.failures:
            return
        now = time.time()
        state["restarts"] = [t for t in state["restarts"] if now - t < args.window]
        if len(state["restarts"]) >= args.max_restarts:
            count = len(state["restarts"])
            why = f"{args.failures} failed probes in a row after {count} restart(s) within {args.window:.0f} s"
            why += f": standing down (remove {args.state} and restart this unit to resume)"
            state["stood_down"] = {"at": now, "why": why}
            state["status"] = "stood-down"
            print(state["stood_down"]["why"], flush=True)
            return
        state["restarts"].append(now)
        state["restarts_total"] += 1
        if self.metrics:
            self.metrics["restarts"].inc()
        state["status"] = "restarting"
        self.save()
        ok = self.restart_all()
        self.started_anew()  # our own restart: the grace below, not another one
        state.update(failures_in_a_row=0, status="ok" if ok else "restarted-not-answering", since=time.time())

    def run(self) -> int:
        print(f"watchdog on {self.args.url} ({self.args.model}): every {self.args.interval} s, "
              f"{self.args.failures} failures restart every rank, at most {self.args.max_restarts} per "
              f"{self.args.window} s", flush=True)  # fmt: skip
        while True:
            self.step()
            self.save()
            time.sleep(self.args.interval)


def _on(peer: str, argv: list[str]) -> None:
    """A command on another rank over the peer ssh trust."""
    subprocess.run(["ssh", "-o", "BatchMode=yes", "-o", "ConnectTimeout=5", peer, *argv], check=False, timeout=180)


def _read_json(path: str) -> Any:
    try:
        return json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return None


def _write_json(path: str, data: Any) -> None:
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    scratch = target.with_name(target.name + ".tmp")
    scratch.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    scratch.replace(target)


def _metrics(port: int, bind: str) -> dict[str, Any] | None:
    """The watchdog's counters for Prometheus (prometheus_client, from the node's packages)."""
    if not port:
        return None
    from prometheus_client import Counter, Gauge, start_http_server

    start_http_server(port, addr=bind)
    return {
        "probes": Counter("sparkplay_watchdog_probes", "Completion probes sent"),
        "probe_failures": Counter("sparkplay_watchdog_probe_failures", "Probes that got no answer in time"),
        "restarts": Counter("sparkplay_watchdog_restarts", "Restarts of every rank, in order"),
        "stood_down": Gauge("sparkplay_watchdog_stood_down", "1 when the restart cap was reached"),
        "paused": Gauge("sparkplay_watchdog_paused", "1 while the pause file exists"),
        "failures_in_a_row": Gauge("sparkplay_watchdog_failures_in_a_row", "Failed probes since the last answer"),
    }


def cmd_watchdog(args: argparse.Namespace) -> int:
    use_api_key(args)
    return Watchdog(args).run()


def cmd_probe(args: argparse.Namespace) -> int:
    use_api_key(args)
    print(json.dumps(probe(args.url, args.model)))
    return 0


def cmd_verify_unit(args: argparse.Namespace) -> int:
    if shutil.which("systemd-analyze") is None:
        print("systemd-analyze is missing: cannot check the unit", file=sys.stderr)
        return 1
    with tempfile.TemporaryDirectory() as scratch:
        path = str(Path(scratch) / args.name)
        shutil.copyfile(args.file, path)
        done = subprocess.run(["systemd-analyze", "verify", path], capture_output=True, text=True, check=False)
    # systemd-analyze also grumbles about unrelated units on the host; only lines naming ours count
    mine = [line for line in (done.stdout + done.stderr).splitlines() if args.name in line]
    for line in mine:
        print(line, file=sys.stderr)
    return 1 if done.returncode != 0 and mine else 0


# -- bench ------------------------------------------------------------------------------------------

# Fixed prompts of the invariance check: short, deterministic tasks whose answers run to the token limit.
INVARIANCE_PROMPTS = (
    "Count from one to thirty in words, separated by commas.",
    "List the planets of the solar system in order from the sun, with one fact about each.",
    "Write the English alphabet backwards, one letter per line.",
    "Explain step by step how to multiply 47 by 53.",
)


def answer_tokens(url: str, model: str, prompt: str, max_tokens: int, timeout: float) -> tuple[list[str], str] | None:
    """A temperature-0 answer as its tokens (the engine's logprobs), else its characters, and which of the two."""
    body = {"model": model, "messages": [{"role": "user", "content": prompt}], "temperature": 0, "seed": 0,
            "max_tokens": max_tokens, "logprobs": True}  # fmt: skip
    status, answer = http_json(f"{url}/v1/chat/completions", body, timeout=timeout)
    if status != 200 or not isinstance(answer, dict) or not answer.get("choices"):
        return None
    choice = answer["choices"][0]
    content = (choice.get("logprobs") or {}).get("content")
    if isinstance(content, list) and content and all(isinstance(c, dict) and "token" in c for c in content):
        return [str(c["token"]) for c in content], "token"
    message = choice.get("message") or {}
    return list(message.get("content") or message.get("reasoning_content") or ""), "character"


def first_difference(alone: list[str], among: list[str]) -> int | None:
    for position, (a, b) in enumerate(zip(alone, among, strict=False)):
        if a != b:
            return position
    return None if len(alone) == len(among) else min(len(alone), len(among))


def invariance(url: str, model: str, levels: list[int], max_tokens: int, timeout: float) -> dict[str, Any]:
    """The same prompts alone, then among `level` concurrent requests: identical outputs, or where they part."""
    ask = functools.partial(answer_tokens, url, model, max_tokens=max_tokens, timeout=timeout)
    alone = {prompt: ask(prompt) for prompt in INVARIANCE_PROMPTS}
    units = {found[1] for found in alone.values() if found}
    differences: list[dict[str, Any]] = []
    for prompt, found in alone.items():
        if found is None:
            differences.append({"prompt": prompt, "concurrency": 1, "why": "no answer alone"})
    for level in (c for c in levels if c > 1):
        prompts = [INVARIANCE_PROMPTS[i % len(INVARIANCE_PROMPTS)] for i in range(level)]
        with ThreadPoolExecutor(max_workers=level) as pool:
            answers = list(pool.map(ask, prompts))
        for request, (prompt, found) in enumerate(zip(prompts, answers, strict=True)):
            reference = alone[prompt]
            if reference is None:
                continue
            if found is None:
                differences.append({"prompt": prompt, "concurrency": level, "request": request, "why": "no answer"})
                continue
            position = first_difference(reference[0], found[0])
            if position is not None:
                differences.append({
                    "prompt": prompt, "concurrency": level, "request": request, "position": position,
                    "alone": "".join(reference[0][position:position + 8]),
                    "among": "".join(found[0][position:position + 8]),
                })  # fmt: skip
    return {"prompts": len(INVARIANCE_PROMPTS), "levels": [c for c in levels if c > 1], "max_tokens": max_tokens,
            "unit": units.pop() if len(units) == 1 else "token", "identical": not differences,
            "differences": differences}  # fmt: skip


def bare_latency_ms(url: str, model: str, runs: int = 5) -> float:
    """The median of one-token requests sent with nothing but urllib: the floor the bench client adds to."""
    body = {"model": model, "messages": [{"role": "user", "content": "Hi"}], "temperature": 0, "max_tokens": 1}
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        http_json(f"{url}/v1/chat/completions", body, timeout=120)
        times.append((time.perf_counter() - started) * 1000)
    return round(statistics.median(times), 2)


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args: Any) -> None:  # the bench's output stays its own
        pass


def serve_corpus(corpus: str) -> tuple[str, http.server.ThreadingHTTPServer | None]:
    """A local corpus file as a loopback URL (llama-benchy reads its text from a URL); a URL as it is."""
    if "://" in corpus:
        return corpus, None
    path = Path(corpus).resolve()
    handler = functools.partial(_QuietHandler, directory=str(path.parent))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return f"http://127.0.0.1:{server.server_address[1]}/{path.name}", server


def drop_to(user: str, home: str | None) -> None:
    """Become `user` for good (groups, gid, uid), with HOME at `home`: what root read stays read, nothing more."""
    import pwd

    entry = pwd.getpwnam(user)
    os.setgroups([])
    os.setgid(entry.pw_gid)
    os.setuid(entry.pw_uid)
    if entry.pw_uid != 0:
        try:
            os.setuid(0)
        except PermissionError:
            pass
        else:  # pragma: no cover - the kernel refused to drop
            raise SystemExit(f"could not drop root for {user}")
    os.environ["HOME"] = home or entry.pw_dir


# llama-benchy takes its key only as --api-key, which every local user could read in the process table: a
# small launcher puts it into the program's own argument list, in its memory, from the environment (readable
# by the same user and root alone), then runs the console script's entry point.
BENCHY_KEY_ENV = "SPARKPLAY_BENCH_API_KEY"
BENCHY_LAUNCHER = """
import os, sys
from importlib.metadata import entry_points
program = sys.argv.pop(1)
(entry,) = [e for e in entry_points(group="console_scripts") if e.name == os.path.basename(program)]
sys.argv[0] = program
sys.argv[1:1] = ["--api-key", os.environ.pop("SPARKPLAY_BENCH_API_KEY")]
sys.exit(entry.load()())
"""


def benchy_argv(benchy: str, args: list[str]) -> tuple[list[str], dict[str, str]]:
    """llama-benchy's command line and environment: the key, if the API has one, only in the environment."""
    if not API_KEY:
        return [benchy, *args], dict(os.environ)
    python = str(Path(benchy).parent / "python")
    return [python, "-c", BENCHY_LAUNCHER, benchy, *args], {**os.environ, BENCHY_KEY_ENV: API_KEY[0]}


def cmd_bench(args: argparse.Namespace) -> int:
    use_api_key(args)
    if args.as_user:
        drop_to(args.as_user, args.home)
    result: dict[str, Any] = {"url": args.url, "model": args.model, "started": time.time(),
                              "profile": {"pp": args.pp, "tg": args.tg, "depth": args.depth,
                                          "concurrency": args.concurrency, "runs": args.runs}}  # fmt: skip
    result["invariance"] = invariance(args.url, args.model, args.concurrency, args.invariance_tokens, args.timeout)
    book_url, server = serve_corpus(args.corpus)
    report = Path(args.out).with_suffix(".benchy.json")
    argv, env = benchy_argv(args.benchy, [
            "--base-url", f"{args.url}/v1", "--model", args.model, "--tokenizer", args.tokenizer,
            "--book-url", book_url, "--pp", *map(str, args.pp), "--tg", *map(str, args.tg),
            "--depth", *map(str, args.depth), "--concurrency", *map(str, args.concurrency),
            "--runs", str(args.runs), "--latency-mode", "generation", "--skip-coherence",
            "--format", "json", "--save-result", str(report)])  # fmt: skip
    try:
        proc = subprocess.run(argv, env=env, capture_output=True, text=True, check=False, timeout=args.timeout * 10)
    finally:
        if server:
            server.shutdown()
    result["benchy"] = _read_json(str(report))
    result["benchy_log"] = (proc.stdout + proc.stderr)[-4000:]
    result["latency"] = {"bare_ms": bare_latency_ms(args.url, args.model)}
    if isinstance(result["benchy"], dict) and "latency_ms" in result["benchy"]:
        benchy_ms, bare_ms = float(result["benchy"]["latency_ms"]), result["latency"]["bare_ms"]
        result["latency"].update(benchy_ms=round(benchy_ms, 2), overhead_ms=round(benchy_ms - bare_ms, 2))
    result["finished"] = time.time()
    _write_json(args.out, result)
    if proc.returncode != 0 or not isinstance(result["benchy"], dict):
        print(f"llama-benchy failed (exit {proc.returncode}): {result['benchy_log'][-800:]}", file=sys.stderr)
        return 1
    return 0 if result["invariance"]["identical"] else 3


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="sparkplay-serve", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("wait-ports")
    p.add_argument("endpoints", nargs="+")
    p.add_argument("--timeout", type=float, default=600)
    p.set_defaults(func=cmd_wait_ports)
    p = sub.add_parser("run")
    p.add_argument("--wait-for", action="append", default=[])
    p.add_argument("--timeout", type=float, default=600)
    p.add_argument("argv", nargs=argparse.REMAINDER)
    p.set_defaults(func=cmd_run)
    p = sub.add_parser("watch")
    p.add_argument("--unit", required=True)
    p.add_argument("--peer", dest="peers", action="append", required=True)
    p.add_argument("--interval", type=float, default=1.0)
    p.set_defaults(func=cmd_watch)
    p = sub.add_parser("ready")
    p.add_argument("--url", required=True)
    p.add_argument("--model", required=True)
    p.add_argument("--unit", required=True)
    p.add_argument("--peer", dest="peers", action="append", default=[])
    p.add_argument("--timeout", type=int, default=900)
    p.add_argument("--interval", type=float, default=2.0)
    p.add_argument("--prompt", default="What is 17*23?")
    p.add_argument("--max-tokens", type=int, default=16)
    p.add_argument("--progress")
    p.add_argument("--container", help="the docker runtime's container (its processes hold the API's port)")
    p.set_defaults(func=cmd_ready)
    p = sub.add_parser("watchdog")
    p.add_argument("--url", required=True)
    p.add_argument("--model", required=True)
    p.add_argument("--unit", required=True)
    p.add_argument("--worker", dest="workers", action="append", default=[], help="a worker's cable address, in order")
    p.add_argument("--interval", type=float, default=30)
    p.add_argument("--failures", type=int, default=3)
    p.add_argument("--grace", type=float, default=900)
    p.add_argument("--max-restarts", type=int, default=2)
    p.add_argument("--window", type=float, default=3600)
    p.add_argument("--probe-timeout", type=float, default=30)
    p.add_argument("--restart-timeout", type=float, default=900)
    p.add_argument("--prompt", default="What is 17*23?")
    p.add_argument("--max-tokens", type=int, default=4)
    p.add_argument("--state", required=True, help="its counters' file (the serve role's serve_watchdog_state)")
    p.add_argument("--pause", default="/etc/sparkplay/watchdog.pause")
    p.add_argument("--metrics-port", type=int, default=0)
    p.add_argument("--metrics-bind", default="127.0.0.1")
    p.add_argument("--container", help="the docker runtime's container (its processes hold the API's port)")
    p.set_defaults(func=cmd_watchdog)
    p = sub.add_parser("bench")
    p.add_argument("--url", required=True)
    p.add_argument("--model", required=True)
    p.add_argument("--benchy", required=True, help="the llama-benchy program")
    p.add_argument("--tokenizer", required=True, help="a tokenizer.json, a folder holding one, or a hub name")
    p.add_argument("--corpus", required=True, help="a text file on this node, or a URL")
    p.add_argument("--out", required=True)
    p.add_argument("--pp", type=int, nargs="+", default=[512])
    p.add_argument("--tg", type=int, nargs="+", default=[128])
    p.add_argument("--depth", type=int, nargs="+", default=[0])
    p.add_argument("--concurrency", type=int, nargs="+", default=[1, 2, 4, 8])
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--invariance-tokens", type=int, default=48)
    p.add_argument("--timeout", type=float, default=600, help="seconds per request")
    p.add_argument("--as-user", help="started as root: read the key, then run as this user")
    p.add_argument("--home", help="HOME for --as-user")
    p.set_defaults(func=cmd_bench)
    p = sub.add_parser("probe")
    p.add_argument("--url", required=True)
    p.add_argument("--model", required=True)
    p.set_defaults(func=cmd_probe)
    p = sub.add_parser("verify-unit")
    p.add_argument("file")
    p.add_argument("name")
    p.set_defaults(func=cmd_verify_unit)
    for name in ("ready", "watchdog", "probe", "bench"):
        p = sub.choices[name]
        p.add_argument("--api-key-env", help="the variable in --env-file that holds the API's key")
        p.add_argument("--env-file", help="the rank's env file (the Deployment's; needed with --api-key-env)")
        p.add_argument("--env-format", choices=["native", "docker"], default="docker")
    args = parser.parse_args(argv)
    if getattr(args, "api_key_env", None) and not args.env_file:
        parser.error("--api-key-env needs --env-file (the file that holds the key)")
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
