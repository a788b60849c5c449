"""provision.yml and doctor.yml on the real lab: check mode, foreign files, confirmation. Marked `lab`.

Runs ansible-playbook against the two lab nodes exactly as a user would.
The only things that cannot exist here are the GPU and RDMA: the lab
inventory says so (sparkplay_gpu_expected false, fabric_socket_fallback true, socket
fallback allowed), and the roles take their documented no-GPU/no-RDMA paths.
The tests run in file order on one lab: each starts from the state the one
before it left (fresh, then a foreign file, then confirmed, provisioned...).
"""

from __future__ import annotations

import gzip
import json
import re

import pytest

from tests import steps
from tests.conftest import PROJECT, run_cli
from tests.test_lab import in_node

pytestmark = [pytest.mark.lab, pytest.mark.usefixtures("lab_host")]

HOSTS = PROJECT / "inventory" / "lab" / "hosts.yml"
NETPLAN = "/etc/netplan/40-cx7.yaml"
USER_NETPLAN = "# the user's own cable config\nnetwork:\n  version: 2\n"


playbook = steps.playbook  # the lab's playbooks, each under its budget (tests/steps.py)


def recap(output: str) -> dict[str, dict[str, int]]:
    found = {}
    for host, fields in re.findall(r"^(sparkplay-lab-rank\d+)\s+:\s+(.*)$", output, re.M):
        found[host] = {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", fields)}
    return found


def node_state(rank: int) -> dict[str, str]:
    """What provisioning would change on a node, read from inside it."""
    return {
        "netplan": in_node(rank, "ls", "/etc/netplan", check=False).stdout,
        "sparkplay": in_node(rank, "ls", "/etc/sparkplay", check=False).stdout,
        "addresses": in_node(rank, "ip", "-4", "-o", "addr", "show", "dev", "enp1s0f1np1").stdout,
        "keys": in_node(rank, "ls", "/root/.ssh", check=False).stdout,
    }


@pytest.fixture(scope="module", autouse=True)
def fresh_lab():
    run_cli("lab", "down")
    assert run_cli("lab", "up").returncode == 0
    yield
    run_cli("lab", "down")


def test_check_mode_on_a_fresh_lab_reports_and_changes_nothing():
    before = [node_state(r) for r in (0, 1)]
    proc = playbook("provision.yml", "--check", "--diff")
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert all(totals["changed"] > 0 for totals in recap(proc.stdout).values())
    assert "192.168.100.10/24" in proc.stdout  # the netplan file it would write, as a diff
    assert [node_state(r) for r in (0, 1)] == before


def test_offline_lists_what_would_be_downloaded_and_stops_before_any_change():
    """Real: a fresh lab has lab-tiny's model staged on rank 0 but not llama.cpp's packages."""
    before = [node_state(r) for r in (0, 1)]
    proc = playbook("provision.yml", "-e", "recipe=lab-tiny", "-e", "sparkplay_offline=true")
    assert proc.returncode != 0
    for rank in (0, 1):
        assert re.search(
            rf"sparkplay-lab-rank{rank} would have to download: package llama\.cpp-tools \(apt\)", proc.stdout
        ), proc.stdout[-3000:]
    assert "model lab-tiny" not in proc.stdout  # staged on rank 0 by `lab up`: nothing to fetch
    assert [node_state(r) for r in (0, 1)] == before


def test_a_foreign_netplan_file_stops_the_play_before_any_change():
    in_node(1, "sh", "-c", f'mkdir -p /etc/netplan && printf %s "$1" > {NETPLAN}', "_", USER_NETPLAN)
    before = [node_state(r) for r in (0, 1)]
    proc = playbook("provision.yml")
    assert proc.returncode != 0
    assert f"These files exist and were not written by sparkplay: sparkplay-lab-rank1: {NETPLAN}" in proc.stdout
    assert "-e sparkplay_confirm_overwrite=true" in proc.stdout
    assert in_node(1, "cat", NETPLAN).stdout == USER_NETPLAN
    assert [node_state(r) for r in (0, 1)] == before  # nothing changed on either node


@pytest.mark.parametrize("tags", ["fabric_configure", "fabric", "fabric_install,fabric_configure"])
def test_no_tag_steps_around_the_question(tags):
    """The role's own probe and guard run in the step that writes, so a tagged run cannot skip the question."""
    before = [node_state(r) for r in (0, 1)]
    proc = playbook("provision.yml", "--tags", tags)
    assert proc.returncode != 0, proc.stdout[-2000:]
    assert "These files exist and were not written by sparkplay: sparkplay-lab-rank1" in proc.stdout
    assert in_node(1, "cat", NETPLAN).stdout == USER_NETPLAN
    assert [node_state(r) for r in (0, 1)] == before


def test_confirming_backs_up_and_replaces_it():
    proc = playbook("provision.yml", "-e", "sparkplay_confirm_overwrite=true")
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert "Written by sparkplay" in in_node(1, "cat", NETPLAN).stdout
    backups = in_node(1, "sh", "-c", f"ls {NETPLAN}.*~").stdout.split()
    assert len(backups) == 1
    assert in_node(1, "cat", backups[0]).stdout == USER_NETPLAN


def test_second_run_changes_nothing_and_asks_nothing():
    proc = playbook("provision.yml")
    assert proc.returncode == 0, proc.stdout[-3000:]
    totals = recap(proc.stdout)
    assert set(totals) == {"sparkplay-lab-rank0", "sparkplay-lab-rank1"}
    assert all(t["changed"] == 0 and t["failed"] == 0 for t in totals.values()), totals


def test_skipping_the_nvidia_stacks_other_steps_does_not_skip_the_daemon_json_question():
    """`--skip-tags nvidia_stack_install,nvidia_stack_run` skips the role's preflight, and with it the probe
    there: the guard in the step that writes daemon.json looks at it itself."""
    theirs = '{"data-root": "/srv/docker"}'
    in_node(0, "sh", "-c", 'mkdir -p /etc/docker && printf %s "$1" > /etc/docker/daemon.json', "_", theirs)
    before = [node_state(r) for r in (0, 1)]
    try:
        proc = playbook(
            "provision.yml",
            "-e",
            "nvidia_stack_configure_docker=true",
            "--skip-tags",
            "nvidia_stack_install,nvidia_stack_run",
        )
        assert proc.returncode != 0, proc.stdout[-3000:]
        assert "not written by sparkplay: sparkplay-lab-rank0: /etc/docker/daemon.json" in proc.stdout
        assert in_node(0, "cat", "/etc/docker/daemon.json").stdout == theirs
        assert [node_state(r) for r in (0, 1)] == before
    finally:
        in_node(0, "rm", "-rf", "/etc/docker")


def test_a_file_edited_after_sparkplay_wrote_it_is_asked_about_again():
    in_node(0, "sh", "-c", "echo '# my tweak' >> /etc/security/limits.d/90-sparkplay-memlock.conf")
    proc = playbook("provision.yml")
    assert proc.returncode != 0
    assert "sparkplay-lab-rank0: /etc/security/limits.d/90-sparkplay-memlock.conf" in proc.stdout
    assert "# my tweak" in in_node(0, "cat", "/etc/security/limits.d/90-sparkplay-memlock.conf").stdout


@pytest.mark.parametrize("mode", [[], ["--check"]])
def test_doctor_prints_its_table_and_changes_nothing(mode):
    proc = playbook("doctor.yml", *mode)
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert all(t["changed"] == 0 for t in recap(proc.stdout).values())
    table = [line for line in proc.stdout.splitlines() if "  up    9000  192.168." in line]
    assert len(table) == 4  # a row per twin per node
    assert '"sparkplay-lab-rank0  0     ok         socket     enp1s0f1np1' in table[0]
    assert "ok:sparkplay-lab-rank1  ok:sparkplay-lab-rank1" in table[0]  # jumbo ping and ssh from rank 0
    assert "no RDMA: not measured" in proc.stdout
    assert "fabric.env: NCCL_SOCKET_IFNAME=enp1s0f1np1 NCCL_IB_DISABLE=1" in proc.stdout


def test_doctor_bundle_has_every_section_of_every_node_and_no_secret(tmp_path):
    """Real: the CLI runs doctor.yml on both nodes and writes the bundle; a token in the controller's
    environment (what the checkpoint download would use) must not reach it."""
    token = "hf_" + "Zz9Yy8Xx" * 4
    bundle = tmp_path / "bundle.ndjson.gz"
    proc = run_cli("doctor", "-i", "inventory/lab", "--bundle", str(bundle), env={"HF_TOKEN": token})
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr
    # the table as a person reads it: a header line, then a row per twin per node, each on a line of its own
    lines = proc.stdout.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("node "))
    rows = lines[header + 1 : header + 5]  # a node's second twin is on the next line, under its node
    assert all("  up    9000  192.168." in line for line in rows), lines[header:]
    assert rows[0].startswith("sparkplay-lab-rank0 ") and rows[2].startswith("sparkplay-lab-rank1 "), rows
    assert "['" not in proc.stdout and "', '" not in proc.stdout
    assert oct(bundle.stat().st_mode & 0o777) == "0o600"
    raw = gzip.decompress(bundle.read_bytes()).decode()
    assert token not in raw
    records = [json.loads(line) for line in raw.splitlines()]
    assert records[0]["kind"] == "meta" and records[1]["kind"] == "deployment"
    sections = {(r["host"], r["section"]) for r in records if r["kind"] == "node"}
    for host in ("sparkplay-lab-rank0", "sparkplay-lab-rank1"):
        for section in (
            "host",
            "fabric",
            "checks",
            "gpu",
            "packages",
            "docker",
            "units",
            "journal",
            "links",
            "meminfo",
            "netplan",
        ):
            assert (host, section) in sections, (host, section)
    meminfo = next(r for r in records if r.get("section") == "meminfo")["data"]
    assert meminfo["rc"] == 0 and "MemTotal" in meminfo["stdout"]


def test_another_netplan_file_configuring_a_twin_is_named_before_anything_changes():
    """Real: a cloud-init style netplan file on rank 1 giving the cable's twin another MTU."""
    path = "/etc/netplan/50-cloud-init.yaml"
    in_node(1, "sh", "-c", f"printf 'network:\\n  ethernets:\\n    enp1s0f1np1:\\n      mtu: 1500\\n' > {path}")
    try:
        before = in_node(1, "cat", "/etc/netplan/40-cx7.yaml").stdout
        proc = playbook("provision.yml")
        assert proc.returncode != 0
        assert f"{path} sets enp1s0f1np1 mtu 1500 (the cable needs 9000): remove enp1s0f1np1 from {path}" in proc.stdout
        assert in_node(1, "cat", "/etc/netplan/40-cx7.yaml").stdout == before
    finally:
        in_node(1, "rm", "-f", path)


def test_reset_puts_every_file_back_and_a_second_reset_changes_nothing():
    """Real: `sparkplay reset` through the CLI on both nodes. Rank 1's netplan file was the user's before
    sparkplay replaced it (confirmed, backed up): it comes back byte for byte; what sparkplay created goes.
    Rank 0's limits file was edited after sparkplay wrote it (above): the playbook alone names it and changes
    nothing; the CLI, confirmed, keeps the edited bytes beside it."""
    limits = "/etc/security/limits.d/90-sparkplay-memlock.conf"
    before = [node_state(r) for r in (0, 1)]
    refused = playbook("reset.yml")
    assert refused.returncode != 0, refused.stdout[-3000:]
    assert f"These files changed since sparkplay wrote them: {limits}" in refused.stdout
    assert [node_state(r) for r in (0, 1)] == before and "# my tweak" in in_node(0, "cat", limits).stdout
    proc = run_cli("reset", "-i", "inventory/lab", "--yes")
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr
    assert in_node(1, "cat", NETPLAN).stdout == USER_NETPLAN
    assert in_node(1, "sh", "-c", f"ls {NETPLAN}.*~ 2>/dev/null || true").stdout == ""  # sparkplay's backups gone
    for rank in (0, 1):
        assert in_node(rank, "test", "-e", "/etc/sparkplay", check=False).returncode == 1
        assert (
            in_node(rank, "test", "-e", "/etc/security/limits.d/90-sparkplay-memlock.conf", check=False).returncode == 1
        )
        assert in_node(rank, "test", "-e", "/root/.ssh/sparkplay_peer_ed25519", check=False).returncode == 1
        keys = in_node(rank, "sh", "-c", "cat /root/.ssh/authorized_keys 2>/dev/null || true").stdout
        assert "sparkplay peer" not in keys
    assert in_node(0, "test", "-e", NETPLAN, check=False).returncode == 1  # sparkplay created it there
    kept = in_node(0, "sh", "-c", f"cat {limits}.sparkplay-edited-*~").stdout
    assert "# my tweak" in kept
    again = run_cli("reset", "-i", "inventory/lab", "--yes")
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr
    assert "nothing of sparkplay's is left on any node" in again.stdout


def test_provisioning_again_after_a_reset_works():
    proc = playbook("provision.yml")
    assert proc.returncode != 0  # the user's netplan file is back, so sparkplay asks again
    assert f"These files exist and were not written by sparkplay: sparkplay-lab-rank1: {NETPLAN}" in proc.stdout
    proc = playbook("provision.yml", "-e", "sparkplay_confirm_overwrite=true")
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert "Written by sparkplay" in in_node(1, "cat", NETPLAN).stdout
