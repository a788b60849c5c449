"""Day two without a lab: what a rank says while it waits or after it died, the memory guard's rules, the
status rows that carry those words, doctor on a node whose twin is gone. (The faults themselves, on the real
lab: tests/test_faults_lab.py.)"""

from __future__ import annotations

import argparse
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sparkplay import admission, fabric
from sparkplay.engines import systemd
from sparkplay.nodetools.serve import explain, memory, ports

# -- what a rank waits for ------------------------------------------------------------------------------


def test_a_refused_port_and_an_address_this_node_lacks_are_named_as_such():
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    listener.close()  # nothing listens there now
    assert ports.reach(f"127.0.0.1:{port}") == "connection refused (its engine is not listening yet)"
    assert ports.address_missing("127.0.0.1") is None
    # TEST-NET-1 is on no interface of any machine: an engine bound there could not start
    assert "not on this node" in (ports.address_missing("192.0.2.77") or "")


def test_run_waits_for_its_cable_address_and_says_so_then_becomes_the_engine():
    argv = [
        sys.executable,
        "-c",
        "import sys; from sparkplay.nodetools.serve.cli import main; sys.exit(main())",
        "run",
        "--bind",
        "192.0.2.77",
        "--timeout",
        "2",
        "--",
        "/bin/echo",
        "engine",
    ]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False)
    assert done.returncode == 1 and "engine" not in done.stdout  # never started without its address
    assert f"{ports.WAITING} cable address 192.0.2.77: not on this node" in done.stdout
    argv[argv.index("192.0.2.77")] = "127.0.0.1"
    done = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False)
    assert done.returncode == 0 and done.stdout.strip().endswith("engine")


def test_a_zero_timeout_waits_as_long_as_it_takes():
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    started = time.monotonic()
    import threading

    def late() -> None:  # the peer comes back after a while
        time.sleep(2.5)
        listener.listen()

    threading.Thread(target=late, daemon=True).start()
    args = argparse.Namespace(endpoints=[f"127.0.0.1:{port}"], bind=[], timeout=0)
    assert ports.cmd_wait_ports(args) == 0 and time.monotonic() - started >= 2.4
    listener.close()


def test_the_wait_lines_left_pending_are_what_the_rank_waits_for():
    lines = [
        (100.0, f"{ports.WAITING} 192.168.100.11:50052: no route to it (the cable or the peer is down)"),
        (160.0, f"{ports.WAITING} 192.168.100.11:50052: connection refused (its engine is not listening yet)"),
    ]
    assert explain.waiting_for(lines) == [
        (100.0, "192.168.100.11:50052: connection refused (its engine is not listening yet)")
    ]
    assert explain.waiting_for([*lines, (170.0, "all ports answer: 192.168.100.11:50052")]) == []


def fake_net(tmp_path: Path, links: dict[str, tuple[str, str]]) -> Path:
    for name, (flags, carrier) in links.items():
        (tmp_path / name).mkdir(parents=True)
        (tmp_path / name / "flags").write_text(flags + "\n")
        if carrier:
            (tmp_path / name / "carrier").write_text(carrier + "\n")
    return tmp_path


def test_each_twin_reads_up_no_carrier_down_or_missing(tmp_path):
    net = fake_net(
        tmp_path, {"enp1s0f1np1": ("0x1003", "1"), "enP2p1s0f1np1": ("0x1003", "0"), "enp1s0f0np0": ("0x1002", "")}
    )
    got = explain.twin_states(["enp1s0f1np1", "enP2p1s0f1np1", "enp1s0f0np0", "gone0"], net)
    assert got == {"enp1s0f1np1": "up", "enP2p1s0f1np1": "no carrier", "enp1s0f0np0": "down", "gone0": "missing"}


def test_the_fabric_env_names_the_twins(tmp_path):
    env = tmp_path / "fabric.env"
    env.write_text("# sparkplay\nSPARKPLAY_FABRIC_TWINS=enp1s0f1np1,enP2p1s0f1np1\nNCCL_SOCKET_IFNAME=x\n")
    assert explain.fabric_twins(str(env)) == ["enp1s0f1np1", "enP2p1s0f1np1"]
    assert explain.fabric_twins(str(tmp_path / "none")) == [] and explain.fabric_twins(None) == []


ACTIVE = {"LoadState": "loaded", "ActiveState": "active", "SubState": "running", "NRestarts": "0", "MainPID": "0"}


@pytest.mark.parametrize(
    ("show", "waits", "twins", "memory_seen", "says"),
    [
        (
            ACTIVE,
            [(0.0, "192.168.100.11:50052: no route to it (the cable or the peer is down)")],
            {"enp1s0f1np1": "no carrier"},
            {},
            "waiting for 192.168.100.11:50052 since 00:00: no route to it (the cable or the peer is down); twin "
            "enp1s0f1np1 has no carrier",
        ),
        (
            {
                **ACTIVE,
                "ActiveState": "activating",
                "SubState": "auto-restart",
                "NRestarts": "3",
                "Result": "exit-code",
            },
            [],
            {},
            {},
            "engine exited 3 time(s), restarting: Failed to create server socket",
        ),
        (
            {**ACTIVE, "ActiveState": "activating", "SubState": "auto-restart", "NRestarts": "2", "Result": "signal"},
            [],
            {},
            {"limit": 2**29, "oom_kills": 2, "killed_now": True},
            "killed: above its memory limit of 512 MiB; restarting (2 restarts)",
        ),
        (
            {**ACTIVE, "ActiveState": "failed", "SubState": "failed", "NRestarts": "10", "Result": "start-limit-hit"},
            [],
            {},
            {"limit": 2**30, "oom_kills": 10},
            "gave up after 10 restarts (start-limit-hit): killed 10 time(s) above its memory limit of 1.0 GiB; raise",
        ),
        (
            {**ACTIVE, "ActiveState": "failed", "SubState": "failed", "NRestarts": "10", "Result": "oom-kill"},
            [],
            {},
            {},
            "killed above its memory limit; raise its memory claim",
        ),
        ({**ACTIVE, "ActiveState": "inactive", "SubState": "dead"}, [], {}, {}, "stopped"),
        (ACTIVE, [], {"enP2p1s0f1np1": "missing"}, {}, "twin enP2p1s0f1np1 is missing"),
    ],
)
def test_a_rank_says_why_it_is_not_serving_in_words(show, waits, twins, memory_seen, says):
    got = explain.explain(show, waits, twins, memory_seen, "Failed to create server socket")
    assert got is not None and says in got


def test_a_healthy_rank_has_nothing_to_explain():
    assert explain.explain(ACTIVE, [], {"enp1s0f1np1": "up"}, {"limit": 1, "oom_kills": 0}, "x") is None


def test_a_frozen_engine_is_named(tmp_path):
    child = subprocess.Popen(["sleep", "30"])
    try:
        child.send_signal(19)  # SIGSTOP
        time.sleep(0.2)
        got = explain.explain({**ACTIVE, "MainPID": str(child.pid)}, [], {}, {}, "")
        assert got is not None and "frozen" in got
    finally:
        child.kill()
        child.wait()


# -- the memory guard ------------------------------------------------------------------------------------


def test_the_limit_is_the_claim_plus_headroom_and_no_claim_no_limit():
    assert admission.memory_limit({"bytes": 10 * 2**30, "how": "x"}) == {"max": 11 * 2**30, "high": 10 * 2**30}
    assert admission.memory_limit({"bytes": 2**20, "how": "x"})["max"] == 2**20 + admission.MIN_HEADROOM
    assert admission.memory_limit(None) is None and admission.memory_limit({"bytes": 0}) is None


def test_a_stated_claim_is_what_admission_counts():
    from tests.test_several import hosts, staged

    launch = staged("lab-small", {"serve_mode": "add"})["launch"]
    derived = admission.decide(launch, hosts(), [])["claims"]
    stated = {**launch, "memory_claim": {"bytes": 3 * 2**30, "how": "3 GiB as the recipe's serve.memory_claim_gib"}}
    got = admission.decide(stated, hosts(), [])["claims"]
    assert {c["bytes"] for c in got.values()} == {3 * 2**30} != {c["bytes"] for c in derived.values()}
    assert all("memory_claim_gib" in c["how"] for c in got.values())


MOUNTINFO = """\
122 114 0:38 / /sys/fs/cgroup rw,relatime - cgroup2 cgroup2 rw
130 114 0:40 / /opt/sparkplay-lab/memory rw,relatime - cgroup cgroup rw,memory
131 114 0:41 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
"""


def test_the_v1_memory_hierarchy_and_this_processes_place_in_it_are_found():
    assert memory.v1_memory_mount(MOUNTINFO) == Path("/opt/sparkplay-lab/memory")
    assert memory.v1_memory_mount(MOUNTINFO.splitlines()[0]) is None  # a pure cgroup v2 host: systemd enforces
    assert memory.own_v1_path("9:name=systemd:/docker/abc\n4:memory:/docker/abc\n0::/x") == "/docker/abc"


def test_the_kernels_kill_counters_are_read(tmp_path):
    (tmp_path / "memory.oom_control").write_text("oom_kill_disable 0\nunder_oom 0\noom_kill 3\n")
    (tmp_path / "memory.events").write_text("low 0\nhigh 4\nmax 9\noom 2\noom_kill 2\n")
    assert memory.oom_kills_v1(tmp_path) == 3 and memory.oom_kills_v2(tmp_path) == 2
    assert memory.oom_kills_v1(tmp_path / "none") == 0


# -- status and doctor say it ----------------------------------------------------------------------------


RECORDS = {
    "r0": {
        "rank": 0,
        "role": "leader",
        "unit": "u",
        "address": "192.168.100.10",
        "served_name": "m",
        "plan_sha256": "a",
        "watchdog_unit": "w",
    },
    "r1": {"rank": 1, "role": "worker", "unit": "u", "address": "192.168.100.11", "plan_sha256": "a"},
}
UNITS = {h: {"ActiveState": "active", "SubState": "running"} for h in RECORDS}


def test_status_health_is_a_real_answer_and_each_row_says_why():
    probe = {
        "health": True,
        "served": True,
        "answers": False,
        "why": "no answer to a completion within 10 s",
        "watchdog": {"status": "waiting", "why": "twin enp1s0f1np1 has no carrier"},
    }
    explained = {"r0": {"why": "waiting for 192.168.100.11:50052 since 13:51: no route to it"}, "r1": {"why": None}}
    rows = systemd.status_rows(RECORDS, UNITS, probe, explained)
    leader, worker = rows
    assert leader["health"] == "down" and not leader["up"]  # /health said ok; the model did not answer
    assert leader["why"].startswith("no answer to a completion within 10 s; waiting for rank 1 (192.168.100.11:50052)")
    assert "twin enp1s0f1np1 has no carrier" in leader["why"] and worker["why"] is None
    healthy = systemd.status_rows(RECORDS, UNITS, {"health": True, "served": True, "answers": True}, {})
    assert healthy[0]["health"] == "ok" and healthy[0]["why"] is None


def test_a_node_that_does_not_answer_is_a_row_not_the_end_of_status():
    answers = {"health": True, "served": True, "answers": True}
    off = {"r1": {"rank": 1, "msg": "container is not running"}}
    rows = systemd.status_rows({"r0": RECORDS["r0"], "r1": {}}, UNITS, answers, {}, off)
    down = next(r for r in rows if r["host"] == "r1")
    assert down["state"] == "unreachable" and down["rank"] == 1 and "container is not running" in down["why"]


def test_doctor_plans_pings_for_a_node_whose_twin_is_gone():
    addresses = {"r0": ["192.168.100.10/24", "192.168.101.10/24"], "r1": ["192.168.100.11/24", "192.168.101.11/24"]}
    assert fabric.ping_plan({k: v for k, v in addresses.items() if k != "r0"}, "r0", ["enp1s0f1np1"]) == []
    assert len(fabric.ping_plan(addresses, "r0", ["enp1s0f1np1", "enP2p1s0f1np1"])) == 2
