"""A ten-minute soak on the real lab (`sparkplay lab soak`, issue 55), asserting the rules a long one is held to:
requests outside fault windows answered (>= 99.5%), every fault recovered within its bound, no leak growing, no
traceback in any journal, at least one swap a minute. Marked `lab` and `faults` (`make test-soak`).

Everything is real, as in tests/test_faults_lab.py: the CLI, systemd in both nodes, llama.cpp, the gateway and
its models on demand, the lab's reboots, power and cable. Stand-ins: none. The report (JSON, markdown, the
plot) is kept in .cache/soak/ for docs/benchmarks.md.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import socket
import subprocess
import threading
from collections.abc import Iterator

import pytest

from sparkplay.engines.names import UNITS
from tests.conftest import PROJECT, run_cli

pytestmark = [pytest.mark.lab, pytest.mark.faults, pytest.mark.usefixtures("lab_host", "own_lab")]

MINUTES = 10
UNIT = UNITS["serve"]
KEPT = PROJECT / ".cache" / "soak"


def test_a_ten_minute_soak_of_faults_swaps_and_load_holds_every_rule(tmp_path):
    report = tmp_path / "soak"
    proc = run_cli(
        "lab", "soak", "--minutes", str(MINUTES), "--seed", "55", "--report", str(report), timeout=MINUTES * 60 + 1500
    )
    shutil.copytree(report, KEPT, dirs_exist_ok=True)
    said = proc.stdout[-4000:] + proc.stderr[-2000:]
    data = json.loads((report / "report.json").read_text())
    assert data["availability_outside_faults"] >= 0.995, (data["failed_outside_faults"][:10], said)
    faults = data["faults"]
    assert len(faults) >= 4 and len({f["kind"] for f in faults}) >= 4, said
    late = [f for f in faults if not f["within_bound"]]
    assert not late, late
    assert all(f["status_said"] for f in faults)
    assert not [row for row in data["leaks"] if row["verdict"] == "growing"], data["leaks"]
    assert not data["tracebacks"], data["tracebacks"]
    assert data["swaps"] >= MINUTES, data["swaps"]
    assert proc.returncode == 0, said
    assert (report / "requests.png").stat().st_size > 10_000
    # the soak leaves the lab as it found it: lab-tiny served, nothing of its own left
    assert not list((PROJECT / "recipes").glob("lab-soak-*.yml"))
    assert not (PROJECT / "inventory" / "lab" / "group_vars" / "all" / "soak.yml").exists()


# `sparkplay soak` against an inventory: on the lab's, through Ansible's docker connection as any inventory's.
# The user's `ssh -L` tunnel to the leader's loopback is the one stand-in: a listener here that carries each
# connection to rank 0's loopback through `docker exec` (RELAY runs there).
RELAY = """
import socket, sys, threading
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
def up():
    while data := sys.stdin.buffer.read1(65536):
        s.sendall(data)
    s.shutdown(socket.SHUT_WR)
threading.Thread(target=up, daemon=True).start()
while data := s.recv(65536):
    sys.stdout.buffer.write(data)
    sys.stdout.buffer.flush()
"""


@contextlib.contextmanager
def tunnel(port: int) -> Iterator[int]:
    """A port on this machine's loopback that reaches rank 0's 127.0.0.1:`port` (as `ssh -L` would)."""
    listener = socket.create_server(("127.0.0.1", 0))

    def carry(conn: socket.socket) -> None:
        node = subprocess.Popen(
            ["docker", "exec", "-i", "sparkplay-lab-rank0", "python3", "-c", RELAY, str(port)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        )

        def down() -> None:
            while data := node.stdout.read1(65536):  # type: ignore[union-attr]
                conn.sendall(data)
            conn.close()

        threading.Thread(target=down, daemon=True).start()
        try:
            while data := conn.recv(65536):
                node.stdin.write(data)  # type: ignore[union-attr]
                node.stdin.flush()  # type: ignore[union-attr]
        except OSError:
            pass
        finally:
            node.stdin.close()  # type: ignore[union-attr]

    def accept() -> None:
        with contextlib.suppress(OSError):
            while True:
                conn, _ = listener.accept()
                threading.Thread(target=carry, args=(conn,), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    try:
        yield listener.getsockname()[1]
    finally:
        listener.close()


def test_the_soak_against_an_inventory_makes_only_the_faults_named_and_reports_each_recovery(tmp_path):
    from tests.test_lab import in_node

    if "lab-tiny" not in in_node(0, "curl", "-s", "http://127.0.0.1:9931/v1/models", check=False).stdout:
        assert run_cli("up", "lab-tiny", "--yes").returncode == 0  # this test alone: serve the primary first
    restarts = {r: int(in_node(r, "systemctl", "show", "-p", "NRestarts", "--value", UNIT).stdout) for r in (0, 1)}
    report = tmp_path / "soak"
    with tunnel(9931) as port:  # lab-tiny's own API: no gateway is needed
        url = f"http://127.0.0.1:{port}/v1"
        gentle = ["--faults", "engine-kill,engine-restart", "--bound", "90", "--seed", "7", "--yes"]
        inventory = ["-i", str(PROJECT / "inventory" / "lab")]
        proc = run_cli(
            "soak", "--report", str(report), "--url", url, "--minutes", "4", *gentle, *inventory, timeout=1200
        )
    said = proc.stdout[-3000:] + proc.stderr[-2000:]
    data = json.loads((report / "report.json").read_text())
    assert proc.returncode == 0, said
    assert data["availability_outside_faults"] >= 0.995, (data["failed_outside_faults"][:5], said)
    assert data["faults"] and all(f["within_bound"] and f["status_said"] for f in data["faults"]), data["faults"]
    assert {f["kind"] for f in data["faults"]} <= {"engine-kill", "engine-restart"}
    assert all(f["target"].endswith(UNIT) for f in data["faults"])
    after = {r: int(in_node(r, "systemctl", "show", "-p", "NRestarts", "--value", UNIT).stdout) for r in (0, 1)}
    killed = sum(1 for f in data["faults"] if f["kind"] == "engine-kill")
    assert sum(after.values()) - sum(restarts.values()) >= killed  # systemd restarted each one killed
    assert "Not measured here" in (report / "report.md").read_text()
