"""The real lab: Docker engine, systemd containers, veth cable. Marked `lab`.

Nothing here is a double: these tests build the node image (once), start
real containers and read the cable from inside their network namespaces.
They leave the lab down.
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from tests import steps
from tests.conftest import PROJECT, run_cli

pytestmark = [pytest.mark.lab, pytest.mark.usefixtures("lab_host")]

TWINS = ("enp1s0f1np1", "enP2p1s0f1np1")
HOSTS = PROJECT / "inventory" / "lab" / "hosts.yml"


def docker(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["docker", *args], capture_output=True, text=True, check=check, timeout=120)


def in_node(rank: int, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return docker("exec", f"sparkplay-lab-rank{rank}", *args, check=check)


def post_on_leader(url: str, body: dict, timeout: float) -> dict | None:
    """POST JSON to an API on rank 0's loopback; the answer when it has choices (a completion), else None."""
    out = in_node(
        0,
        "curl",
        "-s",
        "-m",
        str(timeout),
        "-H",
        "Content-Type: application/json",
        "-d",
        json.dumps(body),
        url,
        check=False,
    )
    try:
        answer = json.loads(out.stdout)
    except ValueError:
        return None
    return answer if isinstance(answer, dict) and answer.get("choices") else None


def lab_objects() -> dict[str, list[str]]:
    """Everything carrying the lab's label, plus its host links."""
    containers = docker("ps", "-a", "--filter", "label=sparkplay.lab", "--format", "{{.Names}}").stdout.split()
    networks = docker("network", "ls", "--filter", "label=sparkplay.lab", "--format", "{{.Name}}").stdout.split()
    links = [
        line.split(":")[1].strip().split("@")[0]
        for line in subprocess.run(["ip", "-o", "link"], capture_output=True, text=True, check=True).stdout.splitlines()
        if "splab-" in line
    ]
    return {"containers": sorted(containers), "networks": networks, "links": links}


def status_json() -> list[dict]:
    proc = run_cli("lab", "status", "--json")
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def up(*args: str) -> subprocess.CompletedProcess[str]:
    proc = run_cli("lab", "up", *args)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc


@pytest.fixture(scope="module", autouse=True)
def fresh_lab():
    run_cli("lab", "down")
    yield
    run_cli("lab", "down")


def test_up_starts_two_cabled_systemd_nodes():
    proc = up()
    assert "2 node(s) ready" in proc.stdout
    rows = status_json()
    assert [(r["rank"], r["container"], r["state"]) for r in rows] == [
        (0, "sparkplay-lab-rank0", "running"),
        (1, "sparkplay-lab-rank1", "running"),
    ]
    for row in rows:
        assert row["systemd"] in ("running", "degraded")
        assert row["links"] == dict.fromkeys(TWINS, "up")
    inventory = yaml.safe_load(HOSTS.read_text())
    hosts = inventory["all"]["children"]["sparkplay_nodes"]["hosts"]
    assert hosts == {"sparkplay-lab-rank0": {"sparkplay_rank": 0}, "sparkplay-lab-rank1": {"sparkplay_rank": 1}}


def test_second_up_changes_nothing():
    before = HOSTS.stat().st_mtime_ns
    proc = up()
    assert "nothing to change" in proc.stdout
    assert HOSTS.stat().st_mtime_ns == before


def test_nodes_have_their_own_identity():
    ids = {in_node(r, "cat", "/etc/machine-id").stdout for r in (0, 1)}
    keys = {in_node(r, "cat", "/etc/ssh/ssh_host_ed25519_key.pub").stdout.split()[1] for r in (0, 1)}
    assert len(ids) == 2 and len(keys) == 2


def test_cable_links_the_two_nodes_with_no_addresses_and_carries_jumbo_frames():
    for rank in (0, 1):
        for twin in TWINS:
            shown = json.loads(in_node(rank, "ip", "-j", "addr", "show", twin).stdout)[0]
            assert [a for a in shown.get("addr_info", []) if a["family"] == "inet"] == []
    # What the fabric role will do later, done by hand here to prove the cable is
    # faithful: one /24 per twin, MTU 9000, a no-fragment jumbo ping across.
    for t, twin in enumerate(TWINS):
        for rank in (0, 1):
            in_node(rank, "ip", "link", "set", twin, "mtu", "9000")
            in_node(rank, "ip", "addr", "add", f"192.168.{100 + t}.{10 + rank}/24", "dev", twin)
    try:
        for t in range(len(TWINS)):
            ping = in_node(0, "ping", "-c", "1", "-W", "2", "-M", "do", "-s", "8972", f"192.168.{100 + t}.11")
            assert "1 received" in ping.stdout
    finally:
        for twin in TWINS:
            for rank in (0, 1):
                in_node(rank, "ip", "addr", "flush", "dev", twin)
                in_node(rank, "ip", "link", "set", twin, "mtu", "1500")


def test_up_repairs_a_broken_cable():
    in_node(1, "ip", "link", "del", TWINS[1])
    assert status_json()[0]["links"][TWINS[1]] == "missing"
    proc = up()
    assert f"cable {TWINS[1]}: rank0 <-> rank1" in proc.stdout
    assert f"cable {TWINS[0]}" not in proc.stdout  # the healthy twin is left alone
    assert all(row["links"] == dict.fromkeys(TWINS, "up") for row in status_json())


def test_up_restarts_a_stopped_node_and_rewires_it():
    docker("stop", "sparkplay-lab-rank1")
    assert status_json()[1]["state"] == "exited"
    proc = up()
    assert "sparkplay-lab-rank1 started" in proc.stdout
    assert all(row["links"] == dict.fromkeys(TWINS, "up") for row in status_json())


def test_up_replaces_a_half_made_node():
    """An interrupted run can leave a created-but-never-started container."""
    docker("rm", "-f", "sparkplay-lab-rank1")
    image = docker("inspect", "-f", "{{.Config.Image}}", "sparkplay-lab-rank0").stdout.strip()
    docker(
        "create",
        "--name",
        "sparkplay-lab-rank1",
        "--label",
        "sparkplay.lab=1",
        "--label",
        "sparkplay.lab.rank=1",
        "--network",
        "sparkplay-lab",
        image,
    )
    proc = up()
    assert "sparkplay-lab-rank1 recreated (left half-made by an interrupted run)" in proc.stdout
    assert all(row["state"] == "running" for row in status_json())


def test_up_refuses_to_touch_a_container_it_did_not_make():
    docker("rm", "-f", "sparkplay-lab-rank1")
    image = docker("inspect", "-f", "{{.Config.Image}}", "sparkplay-lab-rank0").stdout.strip()
    docker("create", "--name", "sparkplay-lab-rank1", image)
    try:
        proc = run_cli("lab", "up")
        assert proc.returncode == 1
        assert proc.stderr.strip().count("\n") == 0
        assert "sparkplay-lab-rank1 exists but was not made by sparkplay" in proc.stderr
        assert docker("inspect", "-f", "{{.State.Status}}", "sparkplay-lab-rank1").stdout.strip() == "created"
    finally:
        docker("rm", "-f", "sparkplay-lab-rank1")
    up()


def test_three_nodes_share_a_switch_and_back_to_a_pair():
    proc = up("--nodes", "3")
    assert "switch splab-sw0" in proc.stdout
    rows = status_json()
    assert len(rows) == 3 and all(row["links"] == dict.fromkeys(TWINS, "up") for row in rows)
    proc = up("--nodes", "2")
    assert "sparkplay-lab-rank2 removed" in proc.stdout
    assert lab_objects()["links"] == []
    assert all(row["links"] == dict.fromkeys(TWINS, "up") for row in status_json())


def test_preflight_rejects_a_bad_rank_layout(tmp_path):
    """The preflight role's inventory check, against the real nodes."""
    bad = yaml.safe_load(HOSTS.read_text())
    bad["all"]["children"]["sparkplay_nodes"]["hosts"]["sparkplay-lab-rank1"]["sparkplay_rank"] = 0
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(yaml.safe_dump(bad))
    proc = steps.playbook("preflight.yml", inventory=inventory)
    assert proc.returncode != 0
    assert "more than one rank 0 (sparkplay-lab-rank0, sparkplay-lab-rank1)" in proc.stdout


def test_preflight_passes_on_the_lab():
    proc = steps.playbook("preflight.yml", inventory=HOSTS)
    assert proc.returncode == 0, proc.stdout[-2000:]
    assert "failed=0" in proc.stdout


def test_a_lab_step_made_to_hang_fails_within_its_budget_naming_the_step_and_each_nodes_journal():
    """Budgets, not one long timeout (issue 52): a real ansible step on both nodes that hangs fails the test in
    seconds, not the twenty minutes a blanket timeout gave it, with what a person needs to see why."""
    hang = ["ansible", "-i", str(HOSTS), "sparkplay_nodes", "-m", "ansible.builtin.command", "-a", "sleep 911"]
    started = time.monotonic()
    with pytest.raises(pytest.fail.Exception) as failed:
        steps.run_step(hang, step="a step made to hang", budget=8)
    took = time.monotonic() - started
    try:
        assert took < 45, took  # its budget, then the journals read (each bounded at 20 s)
        said = str(failed.value)
        assert "lab step `a step made to hang` passed its budget of 8 s" in said
        for rank in (0, 1):
            assert f"--- sparkplay-lab-rank{rank}: last 12 journal lines" in said
    finally:  # docker exec's client is gone; the command it started in each node is not
        for rank in (0, 1):
            in_node(rank, "pkill", "-f", "sleep 911", check=False)


def test_down_removes_everything_it_made_and_only_that():
    bystander = docker("network", "create", "sparkplay-test-bystander").stdout.strip()
    try:
        proc = run_cli("lab", "down")
        assert proc.returncode == 0, proc.stderr
        assert lab_objects() == {"containers": [], "networks": [], "links": []}
        assert not HOSTS.exists()
        assert docker("network", "inspect", bystander, check=False).returncode == 0
        again = run_cli("lab", "down")
        assert "nothing to remove" in again.stdout
    finally:
        docker("network", "rm", bystander, check=False)


def test_no_engine_is_one_line_and_leaves_nothing(tmp_path):
    proc = run_cli("lab", "up", env={"DOCKER_HOST": f"unix://{tmp_path}/no-such.sock"})
    assert proc.returncode == 6
    assert proc.stderr.strip() == (
        "sparkplay: error: no Docker engine reachable; "
        "start one (as root: make setup starts dockerd) or point DOCKER_HOST at it"
    )
    assert lab_objects() == {"containers": [], "networks": [], "links": []}
    assert not HOSTS.exists()


@pytest.mark.parametrize("nodes", ["0", "99"])
def test_bad_node_count_is_one_line_and_leaves_nothing(nodes):
    proc = run_cli("lab", "up", "--nodes", nodes)
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0
    assert f"--nodes {nodes} is out of range" in proc.stderr
    assert lab_objects() == {"containers": [], "networks": [], "links": []}
    assert not Path(HOSTS).exists()
