"""The serve node tool's logic, off the nodes: port waits, the watcher's reading of /proc/net/tcp,
what counts as a failed unit, and the lab model it serves.

The TCP tables are written here in the kernel's own format (the lab tests
watch the real ones); the ports are real sockets on this machine.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import gguf  # the reader llama.cpp's own tools use
import pytest
import yaml

from sparkplay.lab import tiny_gguf
from sparkplay.nodetools import app
from sparkplay.nodetools.serve import bench as serve_bench
from sparkplay.nodetools.serve import cli as serve_cli
from sparkplay.nodetools.serve import common as serve_common
from sparkplay.nodetools.serve import group as serve_group
from sparkplay.nodetools.serve import ports as serve_ports
from sparkplay.nodetools.serve import ready as serve_ready
from sparkplay.nodetools.serve import watch as serve_watch
from sparkplay.nodetools.serve import watchdog as serve_watchdog
from tests.conftest import PROJECT

HEADER = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n"


def row(remote: str, state: str) -> str:
    return f"   0: 0A64A8C0:B00E {remote} {state} 00000000:00000000 00:00000000 00000000     0        0 1 1 0\n"


def test_watcher_reads_the_leaders_connections_to_each_worker():
    worker = "192.168.100.11:50052"
    assert serve_watch._hex_endpoint(worker) == "0B64A8C0:C384"  # little-endian address, port 50052
    live = HEADER + row("0B64A8C0:C384", "01")
    closed = HEADER + row("0B64A8C0:C384", "08")
    probe_done = HEADER + row("0B64A8C0:C384", "06")  # the leader's own short probes end in TIME_WAIT
    other = HEADER + row("0C64A8C0:C384", "08")  # a different worker
    assert serve_watch.connection_states([worker], live) == {worker: {"01"}}
    assert serve_watch.lost_peers(serve_watch.connection_states([worker], live)) == []
    assert serve_watch.lost_peers(serve_watch.connection_states([worker], closed)) == [worker]
    assert serve_watch.lost_peers(serve_watch.connection_states([worker], probe_done)) == []
    assert serve_watch.lost_peers(serve_watch.connection_states([worker], other)) == []
    # a fresh connection next to the dead one: the leader already reconnected
    assert serve_watch.lost_peers(serve_watch.connection_states([worker], closed + row("0B64A8C0:C384", "01"))) == []


def test_a_worker_that_reset_its_connection_is_lost_only_if_this_leader_held_one():
    """kill -9 of a worker with unread bytes sends RST: the leader's socket leaves the table, no CLOSE_WAIT."""
    worker = "192.168.100.11:50052"
    live, gone = HEADER + row("0B64A8C0:C384", "01"), HEADER
    watch = serve_watch.Watch([worker])
    assert watch.step("100", None, gone) == []  # never held one (still loading): nothing lost
    assert watch.step("100", None, live) == []
    assert watch.step("100", None, gone) == [worker]  # held, now gone: reset
    assert watch.step("100", None, gone) == []  # reported once
    assert watch.step("100", None, live) == []
    assert watch.step("200", None, gone) == []  # a new leader process: the old one's connection says nothing
    assert watch.step("200", None, HEADER + row("0B64A8C0:C384", "08")) == [worker]  # FIN: half-closed


def test_a_unit_counts_as_failed_when_it_died_during_the_wait():
    assert serve_ready.unit_failed({"ActiveState": "active", "SubState": "running", "NRestarts": "0"}, 0) is None
    assert serve_ready.unit_failed({"ActiveState": "activating", "SubState": "start-pre", "NRestarts": "0"}, 0) is None
    assert "failed" in serve_ready.unit_failed({"ActiveState": "failed", "Result": "exit-code"}, 0)
    assert "restarted" in serve_ready.unit_failed({"ActiveState": "activating", "SubState": "auto-restart"}, 0)
    assert "restarted" in serve_ready.unit_failed({"ActiveState": "active", "SubState": "running", "NRestarts": "3"}, 2)
    assert serve_ready.unit_failed({"ActiveState": "inactive", "SubState": "dead"}, 0) == "stopped"


def test_wait_ports_blocks_until_the_port_answers_and_gives_up_at_the_timeout():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    assert serve_cli.main(["wait-ports", f"127.0.0.1:{port}", "--timeout", "1"]) == 1

    server = socket.socket()
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)

    def listen_later() -> None:
        time.sleep(1.5)
        server.bind(("127.0.0.1", port))
        server.listen()

    thread = threading.Thread(target=listen_later)
    thread.start()
    started = time.monotonic()
    try:
        assert serve_cli.main(["wait-ports", f"127.0.0.1:{port}", "--timeout", "30"]) == 0
        assert 1.0 < time.monotonic() - started < 10
    finally:
        thread.join()
        server.close()


def test_lab_model_is_the_same_bytes_every_time_and_the_recipe_pins_them(tmp_path: Path):
    first = tiny_gguf.write(tmp_path / "a" / "lab-tiny.gguf")
    second = tiny_gguf.write(tmp_path / "b" / "lab-tiny.gguf")
    digest = hashlib.sha256(first.read_bytes()).hexdigest()
    assert digest == hashlib.sha256(second.read_bytes()).hexdigest()
    recipe = yaml.safe_load((PROJECT / "recipes" / "lab-tiny.yml").read_text())
    assert recipe["source"]["sha256"] == digest
    reader = gguf.GGUFReader(str(first))
    assert len(reader.tensors) == 3 + 9 * tiny_gguf.LAYERS
    tokens, _, types = tiny_gguf.vocabulary()
    assert tokens[:3] == ["<unk>", "<s>", "</s>"] and tokens[3] == "<0x00>" and types[3] == 6
    output = next(t for t in reader.tensors if t.name == "output.weight").data.reshape(len(tokens), -1)
    assert not output[:259].any() and output[259:].any()  # only printable tokens can win greedily


def test_run_waits_for_the_ports_then_becomes_the_program():
    script = app("serve")  # the one file the serve role installs
    done = subprocess.run(
        [sys.executable, script, "run", "--", "/bin/echo", "engine", "100%"],
        capture_output=True,
        text=True,
        check=False,
        timeout=30,
    )
    assert done.returncode == 0 and done.stdout.strip().endswith("engine 100%")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    argv = [sys.executable, script, "run", "--wait-for", f"127.0.0.1:{port}", "--timeout", "1", "--", "/bin/echo", "x"]
    done = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=30)
    assert done.returncode == 1 and "x" not in done.stdout.split()  # never started: systemd retries the unit


# -- the watchdog's decisions, off the nodes --------------------------------------------------
# The engine's API is a local HTTP server here (a test double: answers, or hangs like a SIGSTOPped
# engine); systemctl and ssh are recorded instead of run. The lab test wedges a real llama.cpp.


class _Engine:
    def __init__(self) -> None:
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        engine = self
        self.wedged = False
        self.answer = "391"

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length", 0)))
                if engine.wedged:
                    time.sleep(1.5)  # longer than the probe's timeout: no answer
                    return
                body = json.dumps(
                    {"choices": [{"message": {"content": engine.answer}}], "usage": {"completion_tokens": 1}}
                ).encode()
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"


def watchdog(tmp_path: Path, monkeypatch, engine: _Engine, **overrides) -> tuple[serve_watchdog.Watchdog, list]:
    calls: list = []
    monkeypatch.setattr(serve_watchdog, "unit_show", lambda unit, *props, peer=None: {"InvocationID": "one"})
    monkeypatch.setattr(serve_watchdog.subprocess, "run", lambda argv, **kw: calls.append(list(argv)))
    # the engine here is this test's own server, in no unit: who holds its port is tested on its own below
    monkeypatch.setattr(serve_watchdog, "port_holder_problem", lambda *a, **kw: None)
    # the node as explain reads it (unit, journal, twins) and the workers' ssh: all well unless a test says
    seen = overrides.pop("seen", {"waiting": [], "twins": {}, "why": None})
    monkeypatch.setattr(serve_watchdog, "report", lambda unit, fabric_env: seen)
    monkeypatch.setattr(serve_watchdog, "reach", overrides.pop("reach", lambda endpoint, timeout=1.0: None))
    namespace = dict(
        url=engine.url,
        model="m",
        unit="sparkplay-serve.service",
        workers=["10.0.0.2", "10.0.0.3"],
        interval=0.01,
        failures=2,
        grace=0,
        max_restarts=1,
        window=3600,
        probe_timeout=0.5,
        restart_timeout=1,
        prompt="p",
        max_tokens=1,
        state=str(tmp_path / "watchdog.json"),
        pause=str(tmp_path / "pause"),
        metrics_port=0,
        metrics_bind="127.0.0.1",
        container=None,
        fabric_env=None,
        look_interval=0.01,
    )
    namespace.update(overrides)
    return serve_watchdog.Watchdog(argparse.Namespace(**namespace)), calls


def test_the_watchdog_restarts_every_rank_in_order_after_k_failures(tmp_path, monkeypatch):
    engine = _Engine()
    dog, calls = watchdog(tmp_path, monkeypatch, engine)
    dog.step()
    assert dog.state["status"] == "ok" and not calls
    engine.wedged = True
    dog.step()
    assert dog.state["failures_in_a_row"] == 1 and not calls  # one failure is not enough
    dog.step()
    ssh = ["ssh", "-o", "BatchMode=yes", "-o", "ConnectTimeout=5"]
    assert calls[:12] == [
        ["systemctl", "kill", "--signal=SIGKILL", "sparkplay-serve.service"],  # a wedged engine never stops politely
        ["systemctl", "stop", "sparkplay-serve.service"],  # the leader first: never without its workers
        [*ssh, "10.0.0.3", "systemctl", "kill", "--signal=SIGKILL", "sparkplay-serve.service"],  # nor its workers
        [*ssh, "10.0.0.3", "systemctl", "stop", "sparkplay-serve.service"],
        [*ssh, "10.0.0.2", "systemctl", "kill", "--signal=SIGKILL", "sparkplay-serve.service"],
        [*ssh, "10.0.0.2", "systemctl", "stop", "sparkplay-serve.service"],
        # workers in order, then the leader; one that gave up on a crash loop gets this one more chance
        [*ssh, "10.0.0.2", "systemctl", "reset-failed", "sparkplay-serve.service"],
        [*ssh, "10.0.0.2", "systemctl", "start", "sparkplay-serve.service"],
        [*ssh, "10.0.0.3", "systemctl", "reset-failed", "sparkplay-serve.service"],
        [*ssh, "10.0.0.3", "systemctl", "start", "sparkplay-serve.service"],
        ["systemctl", "reset-failed", "sparkplay-serve.service"],
        ["systemctl", "start", "--no-block", "sparkplay-serve.service"],
    ]
    assert dog.state["restarts_total"] == 1


def test_a_group_leader_kills_and_restarts_every_worker_in_order_before_it_starts(monkeypatch, capsys):
    calls: list = []

    def run(argv, **kw):
        calls.append(list(argv))
        failed = argv[-1].startswith("systemctl kill") and "10.0.0.3" in argv
        return subprocess.CompletedProcess(argv, 255 if failed else 0, "", "ssh: connect refused" if failed else "")

    monkeypatch.setattr(serve_group.subprocess, "run", run)
    args = argparse.Namespace(unit="sparkplay-serve.service", peers=["10.0.0.2", "10.0.0.3"])
    assert serve_group.cmd_restart_workers(args) == 1  # a worker that cannot be restarted fails the leader's start
    ssh = ["ssh", "-o", "BatchMode=yes", "-o", "ConnectTimeout=5"]
    remote = "systemctl kill --signal=SIGKILL sparkplay-serve.service; systemctl restart sparkplay-serve.service"
    assert calls == [[*ssh, "10.0.0.2", remote], [*ssh, "10.0.0.3", remote]]
    out = capsys.readouterr()
    assert "restarted sparkplay-serve.service on 10.0.0.2" in out.out
    assert "could not restart the worker 10.0.0.3: exit 255: ssh: connect refused" in out.err
    calls.clear()
    assert serve_group.cmd_restart_workers(argparse.Namespace(unit="sparkplay-serve.service", peers=["10.0.0.2"])) == 0


def test_the_watchdog_stands_down_at_its_cap_and_a_pause_file_stops_it(tmp_path, monkeypatch):
    engine = _Engine()
    engine.wedged = True
    dog, calls = watchdog(tmp_path, monkeypatch, engine, max_restarts=1)
    for _ in range(4):  # two failures: a restart (that does not help); two more: the cap is reached
        dog.step()
        dog.save()
    assert dog.state["restarts_total"] == 1 and dog.state["stood_down"]
    saved = json.loads((tmp_path / "watchdog.json").read_text())
    assert saved["status"] == "stood-down" and "standing down" in saved["stood_down"]["why"]
    again, _ = watchdog(tmp_path, monkeypatch, engine)  # a restarted watchdog stays stood down
    again.step()
    assert again.state["status"] == "stood-down"
    (tmp_path / "pause").write_text("")
    paused, calls = watchdog(tmp_path / "other", monkeypatch, engine, pause=str(tmp_path / "pause"))
    paused.step()
    assert paused.state["status"] == "paused" and not calls


def test_the_watchdog_gives_a_new_start_its_grace(tmp_path, monkeypatch):
    engine = _Engine()
    engine.wedged = True
    dog, calls = watchdog(tmp_path, monkeypatch, engine, grace=3600)
    for _ in range(3):
        dog.step()
    assert dog.state["status"] == "starting" and not calls  # never answered yet, within its grace


WAITING_SEEN = {
    "waiting": ["192.168.100.11:50052: no route"],
    "twins": {},
    "why": "waiting for 192.168.100.11:50052 since 13:51: no route to it",
}
CABLE_SEEN = {"waiting": [], "twins": {"enp1s0f1np1": "no carrier", "enP2p1s0f1np1": "up"}, "why": None}
CLEAR_SEEN = {"waiting": [], "twins": {}, "why": None}


@pytest.mark.parametrize(
    ("seen", "reach", "says"),
    [
        (WAITING_SEEN, None, "waiting for 192.168.100.11:50052"),
        (CABLE_SEEN, None, "twin enp1s0f1np1 has no carrier"),
        (CLEAR_SEEN, "no route to it (the cable or the peer is down)", "rank 1 (10.0.0.2) does not answer: no route"),
    ],
)
def test_the_watchdog_stands_aside_while_a_restart_cannot_help_and_says_why(tmp_path, monkeypatch, seen, reach, says):
    """A peer, a cable or an address that is away comes back by itself: the watchdog waits (no failure counted,
    no restart spent, never stood down by a long outage) and its state says what for; then it counts again."""
    engine = _Engine()
    engine.wedged = True
    seen = dict(seen)
    dog, calls = watchdog(tmp_path, monkeypatch, engine, seen=seen, reach=lambda endpoint, timeout=1.0: reach)
    for _ in range(5):
        dog.step()
    assert dog.state["status"] == "waiting" and says in dog.state["why"] and not calls
    assert dog.state["failures_in_a_row"] == 0 and dog.state["restarts_total"] == 0
    # it is back, and still the model does not answer: the group lived through the outage wedged, and a restart
    # helps at once (not after another K failures)
    seen.update(waiting=[], twins={}, why=None)
    monkeypatch.setattr(serve_watchdog, "reach", lambda endpoint, timeout=1.0: None)
    dog.step()
    assert dog.state["restarts_total"] == 1 and calls


def test_between_probes_a_pulled_cable_is_said_at_once_and_its_return_brings_the_next_probe(tmp_path, monkeypatch):
    """The gateway reads the state each second to refuse requests with the cause: the watchdog says `waiting`
    within a look (not after a probe's timeout), and probes at once when what it waited for is back."""
    engine = _Engine()
    seen = dict(CABLE_SEEN)
    dog, calls = watchdog(tmp_path, monkeypatch, engine, seen=seen)
    dog.args.interval = 5
    dog.step()
    assert dog.state["status"] == "ok"
    started = time.monotonic()
    monkeypatch.setattr(
        dog, "save", lambda: seen.update(waiting=[], twins={}) if dog.state["status"] == "waiting" else None
    )
    dog.between_probes()  # the cable is seen down at the first look, then back: it returns before the interval
    assert time.monotonic() - started < 2 and dog.state["status"] == "waiting"
    assert "twin enp1s0f1np1 has no carrier" in dog.state["why"] and not calls
    dog.step()
    assert dog.state["status"] == "ok"


def test_between_probes_a_twin_down_is_no_reason_for_a_deployment_without_workers(tmp_path, monkeypatch):
    engine = _Engine()
    dog, _ = watchdog(tmp_path, monkeypatch, engine, seen=dict(CABLE_SEEN))
    dog.args.workers, dog.args.interval = [], 0.05
    dog.step()
    dog.between_probes()
    assert dog.state["status"] == "ok"  # one node, served from loopback: the cable is not its business


def answer_dog(tmp_path, monkeypatch, bad: dict[str, str]) -> tuple[_Engine, serve_watchdog.Watchdog, list]:
    """A watchdog holding an exact engine to its answers, whose files verify as `bad` says."""
    engine = _Engine()
    dog, _ = watchdog(tmp_path, monkeypatch, engine, answer_check="exact", model_dir=["/m/lab-tiny"], ckpt_tool="ckpt")
    calls: list = []

    def run(argv, **kw):
        calls.append(list(argv))
        if argv[:2] == ["ckpt", "verify"]:
            out = json.dumps({"ok": not bad, "bad": bad})
            return subprocess.CompletedProcess(argv, 3 if bad else 0, out, "")
        return subprocess.CompletedProcess(argv, 0, "", "")

    monkeypatch.setattr(serve_watchdog.subprocess, "run", run)
    monkeypatch.setattr(serve_watchdog, "on_peer", lambda peer, argv: calls.append([peer, *argv]))
    return engine, dog, calls


def test_an_answer_changed_under_verified_files_restarts_every_rank_once_and_is_named(tmp_path, monkeypatch):
    engine, dog, calls = answer_dog(tmp_path, monkeypatch, bad={})
    dog.step()
    assert dog.state["answer"]["reference"] == "391" and not calls
    engine.answer = "3 9 1 !!"  # token soup, while every health check passes
    dog.step()
    changed = dog.state["answer"]["changed"]
    assert ["ckpt", "verify", "/m/lab-tiny", "--full"] in calls  # the files first: they verify
    assert any(c[:2] == ["systemctl", "start"] or c[1:3] == ["systemctl", "start"] for c in calls)  # restarted
    assert dog.state["restarts_total"] == 1
    # the stand-in still answers so after the restart: said, and no second restart for it
    assert changed["got"] == "3 9 1 !!" and "a restart did not bring the deploy's answer back" in changed["why"]
    calls.clear()
    dog.step()
    assert dog.state["restarts_total"] == 1 and not calls
    engine.answer = "391"
    dog.step()
    assert dog.state["answer"]["changed"] is None


def test_an_answer_changed_over_damaged_files_names_them_and_restarts_nothing(tmp_path, monkeypatch):
    engine, dog, calls = answer_dog(tmp_path, monkeypatch, bad={"lab-tiny.gguf": "sha256"})
    dog.step()
    engine.answer = "soup"
    dog.step()
    why = dog.state["answer"]["changed"]["why"]
    assert "/m/lab-tiny/lab-tiny.gguf (sha256)" in why and "run `sparkplay verify` to repair" in why
    assert dog.state["restarts_total"] == 0 and not any("start" in c for c in calls)
    rows = systemd_status_rows(dog.state)
    assert "answers changed since deploy (at " in rows[0]["why"] and "sparkplay verify" in rows[0]["why"]


def test_a_watchdog_restart_keeps_the_deploys_answer_and_a_deploy_clears_it(tmp_path, monkeypatch):
    _, dog, _ = answer_dog(tmp_path, monkeypatch, bad={})
    dog.step()
    dog.save()
    again = serve_watchdog.Watchdog(dog.args)
    assert again.state["answer"]["reference"] == "391"
    Path(dog.args.state).unlink()  # the serve role's deploy removes the state
    assert serve_watchdog.Watchdog(dog.args).state["answer"]["reference"] is None


def test_an_exempt_engine_is_never_held_and_status_says_why(tmp_path, monkeypatch):
    engine = _Engine()
    why = "vllm batches requests and picks its kernels at start: an answer may differ after a restart"
    dog, calls = watchdog(tmp_path, monkeypatch, engine, answer_check="exempt", answer_why=why)
    dog.step()
    engine.answer = "another"
    dog.step()
    assert dog.state["answer"]["reference"] is None and dog.state["answer"]["changed"] is None and not calls
    assert systemd_status_rows(dog.state)[0]["answers"] == f"not held: {why}"


def systemd_status_rows(state: dict) -> list[dict]:
    from sparkplay.engines.systemd import status_rows

    record = {"role": "leader", "rank": 0, "watchdog_unit": "w", "served_name": "m", "unit": "u"}
    shows = {"n0": {"ActiveState": "active", "SubState": "running"}}
    return status_rows({"n0": record}, shows, {"answers": True, "served": True}, watchdog=json.loads(json.dumps(state)))


# -- who holds the API's port: the processes and sockets of this machine, for real ----------------------


def own_cgroup_part() -> str | None:
    """A name in this process's cgroup paths (as the unit's name is in an engine's), None at the root."""
    lines = Path("/proc/self/cgroup").read_text().splitlines()
    parts = [p for line in lines for p in line.split(":", 2)[-1].split("/") if p]
    return parts[-1] if parts else None


def test_a_port_another_process_bound_first_is_named_and_the_units_own_is_not():
    squatter = socket.socket()
    squatter.bind(("127.0.0.1", 0))
    squatter.listen()
    port = squatter.getsockname()[1]
    try:
        url = f"http://127.0.0.1:{port}"
        problem = serve_ports.port_holder_problem(url, "sparkplay-serve.service")
        assert problem is not None and f"port {port} is held by PID {os.getpid()}" in problem
        assert "not by sparkplay-serve.service" in problem and "serve_port" in problem
        # the same socket, held by a process of the unit's own cgroup (this one's, named as the unit)
        if own_cgroup_part():
            assert serve_ports.port_holder_problem(url, own_cgroup_part()) is None
    finally:
        squatter.close()
    assert serve_ports.port_holder_problem(url, "sparkplay-serve.service") is None  # nothing listens: the probe says so


def test_the_watchdog_counts_an_answer_from_a_squatter_as_no_answer(tmp_path, monkeypatch):
    engine = _Engine()  # answers every probe, but it is this test's process, not the unit's
    dog, _ = watchdog(tmp_path, monkeypatch, engine)
    squatted = "port is held by PID 1 (x)"
    monkeypatch.setattr(serve_watchdog, "port_holder_problem", lambda url, unit, container=None: squatted)
    assert dog.healthy() is False
    assert dog.state["port_problem"] == "port is held by PID 1 (x)" and dog.state["probe_failures"] == 1


def test_a_taken_metrics_port_leaves_the_watchdog_watching_without_counters(tmp_path, monkeypatch):
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    try:
        dog, _ = watchdog(tmp_path, monkeypatch, _Engine(), metrics_port=taken.getsockname()[1])
        assert dog.metrics is None and "Address already in use" in dog.state["metrics_problem"]
        dog.step()
        assert dog.state["status"] == "ok"
    finally:
        taken.close()


def test_the_watcher_reads_only_the_engines_own_connections():
    worker = "192.168.100.11:50052"
    theirs = HEADER + row("0B64A8C0:C384", "08").replace("     0        0 1", "  1000        0 1")
    states = serve_watch.connection_states([worker], theirs, uid=993)
    assert serve_watch.lost_peers(states) == []  # another user's socket
    assert serve_watch.lost_peers(serve_watch.connection_states([worker], theirs, uid=1000)) == [worker]


def test_the_api_key_is_read_from_the_env_file_and_sent_as_a_bearer_token(tmp_path, monkeypatch):
    from sparkplay.engines.systemd import env_file

    key = 'sk-"quoted"\\back$slash'
    for runtime in ("native", "docker"):
        path = tmp_path / f"{runtime}.env"
        path.write_text(env_file({"A": "1", "VLLM_API_KEY": key}, runtime))
        assert serve_common.env_file_value(str(path), "VLLM_API_KEY", runtime == "native") == key
    seen: list[str | None] = []

    class Recorder:
        def __init__(self, request, timeout):
            seen.append(request.get_header("Authorization"))

        def __enter__(self):
            raise OSError("no server")

        def __exit__(self, *exc):
            return False

    monkeypatch.setattr(serve_common.urllib.request, "urlopen", Recorder)
    serve_common.use_api_key(
        argparse.Namespace(api_key_env="VLLM_API_KEY", env_file=str(tmp_path / "native.env"), env_format="native")
    )
    try:
        assert serve_common.http_json("http://127.0.0.1:1/v1/models") == (0, None)
        assert seen == [f"Bearer {key}"]
    finally:
        serve_common.API_KEY.clear()


def test_the_kernels_socket_cgroups_decide_where_they_name_one(monkeypatch):
    """Where `ss --cgroup` names each listener's cgroup (cgroup v2), that decides, no /proc fds read (root in
    a container cannot read another user's); a cgroup of `/` says nothing and the open files decide."""
    rows = {
        "ours": [("/system.slice/sparkplay-serve.service", "LISTEN ...")],
        "theirs": [
            ("/system.slice/squatter.service", "LISTEN ..."),
            ("/system.slice/sparkplay-serve.service", "LISTEN ..."),
        ],
        "container": [("/system.slice/docker-abc123.scope", "LISTEN ...")],
    }
    monkeypatch.setattr(serve_ports, "socket_holders", lambda *a: pytest.fail("the open files were read"))
    monkeypatch.setattr(serve_ports, "container_id", lambda name: "abc123" if name else None)
    for case, listed in rows.items():
        monkeypatch.setattr(serve_ports, "ss_listeners", lambda port, listed=listed: listed)
        problem = serve_ports.port_holder_problem(
            "http://127.0.0.1:9931", "sparkplay-serve.service", "sparkplay-serve" if case == "container" else None
        )
        if case == "theirs":
            assert problem and "port 9931 is held by /system.slice/squatter.service" in problem
        else:
            assert problem is None, case


# a stand-in for llama-benchy: a console script (found through its distribution's entry points, as the launcher
# finds the real one) that records the arguments it parsed and what `ps` shows of its command line
FAKE_BENCHY = """
import json, sys
def main():
    with open(sys.argv[sys.argv.index("--out") + 1], "w") as out:
        cmdline = open("/proc/self/cmdline", "rb").read().split(b"\\0")
        json.dump({"argv": sys.argv, "cmdline": [part.decode() for part in cmdline if part]}, out)
    return 0
"""


def test_llama_benchy_gets_the_api_key_in_its_arguments_but_never_on_its_command_line(tmp_path, monkeypatch):
    site = tmp_path / "site"
    (site / "fakebenchy-1.0.dist-info").mkdir(parents=True)
    (site / "fakebenchy-1.0.dist-info" / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: fakebenchy\nVersion: 1.0\n"
    )
    (site / "fakebenchy-1.0.dist-info" / "entry_points.txt").write_text(
        "[console_scripts]\nllama-benchy = fakebenchy:main\n"
    )
    (site / "fakebenchy.py").write_text(FAKE_BENCHY)
    venv_bin = tmp_path / "venv" / "bin"
    venv_bin.mkdir(parents=True)
    (venv_bin / "python").symlink_to(sys.executable)
    monkeypatch.setenv("PYTHONPATH", str(site))
    out = tmp_path / "seen.json"
    key = "sk-secret 'quoted' $x"
    try:
        serve_common.API_KEY[:] = [key]
        argv, env = serve_bench.benchy_argv(str(venv_bin / "llama-benchy"), ["--model", "m", "--out", str(out)])
    finally:
        serve_common.API_KEY.clear()
    assert key not in json.dumps(argv) and env[serve_bench.BENCHY_KEY_ENV] == key
    subprocess.run(argv, env=env, check=True, timeout=60)
    seen = json.loads(out.read_text())
    assert seen["argv"][1:3] == ["--api-key", key] and seen["argv"][0].endswith("llama-benchy")
    assert key not in json.dumps(seen["cmdline"])  # what every local user reads in the process table
    # without a key the program runs as it is
    bare = serve_bench.benchy_argv("/v/bin/llama-benchy", ["--model", "m"])[0]
    assert bare == ["/v/bin/llama-benchy", "--model", "m"]


@pytest.mark.skipif(os.geteuid() != 0, reason="dropping to another user needs root")
def test_the_bench_drops_root_for_good_after_reading_the_key():
    code = (
        "import os; from sparkplay.nodetools.serve.bench import drop_to; drop_to('nobody', '/nonexistent');"
        "print(os.getuid(), os.geteuid(), os.getgroups(), os.environ['HOME'])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split(" ", 2)
    import pwd

    nobody = pwd.getpwnam("nobody").pw_uid
    assert out[:2] == [str(nobody), str(nobody)] and out[2].strip() == "[] /nonexistent"


def test_the_watchdogs_counters_carry_the_model_and_unit_so_several_deployments_tell_apart():
    import urllib.request

    from sparkplay.nodetools.serve.watchdog import _metrics

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    counters = _metrics(port, "127.0.0.1", "coder", "sparkplay-serve-coder.service")
    assert counters is not None
    counters["probes"].inc()
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    assert 'sparkplay_watchdog_probes_total{model="coder",unit="sparkplay-serve-coder.service"} 1.0' in text


@pytest.mark.parametrize(
    ("serves", "said"),
    [
        ("chat", "391"),
        ("embeddings", "an embedding of 3 numbers"),
        ("rerank", "a ranking of 2 documents"),
        ("broken", None),
    ],
)
def test_the_health_proof_uses_the_endpoint_the_model_serves(serves, said):
    """An embedding model is proven by an embedding and a reranker by a ranking, not by a chat completion
    they refuse (as llama.cpp's --embeddings and vLLM's pooling runner do, with a 4xx); an engine that fails
    a chat completion with a 500 is not proven by anything else."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from sparkplay.nodetools.serve.common import completion

    answers = {
        "chat": {"/v1/chat/completions": (200, {"choices": [{"message": {"content": "391"}}]})},
        "embeddings": {"/v1/embeddings": (200, {"data": [{"embedding": [0.1, -0.2, 0.3]}]})},
        "rerank": {"/v1/rerank": (200, {"results": [{"index": 0, "relevance_score": 0.9}, {"index": 1}]})},
        "broken": {
            "/v1/chat/completions": (500, {"error": "x"}),
            "/v1/embeddings": (200, {"data": [{"embedding": [1]}]}),
        },
    }[serves]

    class Engine(BaseHTTPRequestHandler):
        def log_message(self, *_: object) -> None:
            pass

        def do_POST(self) -> None:
            self.rfile.read(int(self.headers["Content-Length"]))
            status, body = answers.get(self.path, (400, {"error": "this model does not serve that"}))
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Engine)
    threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
    try:
        got = completion(f"http://127.0.0.1:{server.server_address[1]}", "m", "What is 17*23?", 4, timeout=5)
    finally:
        server.shutdown()
    assert (got or {}).get("text") == said


def test_memguard_raises_a_v1_limit_memory_and_swap_first_and_lowers_it_memory_first(tmp_path, monkeypatch):
    """cgroup v1 refuses (EINVAL) a memory limit above the memory+swap one: an update with a larger claim met
    that on the lab (the soak, issue 55) and memguard died with a traceback, leaving the old limit."""
    import errno
    from pathlib import Path

    from sparkplay.nodetools.serve import memory

    group = tmp_path / "sparkplay" / "unit.service"
    group.mkdir(parents=True)
    (group / "memory.limit_in_bytes").write_text("1000\n")
    (group / "memory.memsw.limit_in_bytes").write_text("1000\n")
    monkeypatch.setattr(memory, "v1_group", lambda unit: group)
    monkeypatch.setattr(memory, "_unit_pids", lambda unit: [])
    write = Path.write_text

    def kernel(path: Path, text: str, *args, **kwargs):  # the v1 rule, as the kernel holds it
        value = int(text)
        if path.name == "memory.limit_in_bytes" and value > int(
            (path.parent / "memory.memsw.limit_in_bytes").read_text()
        ):
            raise OSError(errno.EINVAL, "Invalid argument")
        if path.name == "memory.memsw.limit_in_bytes" and value < int(
            (path.parent / "memory.limit_in_bytes").read_text()
        ):
            raise OSError(errno.EINVAL, "Invalid argument")
        return write(path, text, *args, **kwargs)

    monkeypatch.setattr(Path, "write_text", kernel)
    for limit in (5000, 2000, 7000):
        assert "enforced in the cgroup v1" in memory._enforce_v1("unit.service", limit, limit // 2)
        assert (
            (group / "memory.limit_in_bytes").read_text()
            == (group / "memory.memsw.limit_in_bytes").read_text()
            == str(limit)
        )
