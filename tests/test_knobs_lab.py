"""Documented knobs set to other values on the real lab: each changes what the sample says it does. Marked `lab`.

On a lab serving lab-tiny (set up by this module, whatever ran before):
one whole-site run in check mode with --diff shows every file knob's effect
in the file it writes (netplan, the fabric env, the authorised key, the
units), and changes nothing; preflight runs show each node check refusing
the lab when its knob excludes it; a stand-in `nvidia-smi` (the one test
double: the lab has no GPU) shows the two driver minimums; real runs show
serve_watchdog_enabled. Knobs that cannot act
here are rendered from the task files (tests/test_knob_effects.py).
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests import steps
from tests.conftest import PROJECT, run_cli
from tests.test_lab import in_node
from tests.test_provision_lab import playbook, recap

pytestmark = [pytest.mark.lab, pytest.mark.extra, pytest.mark.usefixtures("lab_host")]

LAB = PROJECT / "inventory" / "lab"
NETPLAN = "/etc/netplan/40-cx7.yaml"


def execs(*argv: str) -> str:
    """A unit's new ExecStart line holding these arguments in a row (each double-quoted, as units write them)."""
    return r"^\+ExecStart=.*" + " ".join(re.escape(f'"{a}"') for a in argv) + r"( |$)"


# knob -> (a value other than the default, what the diff then shows in the file the knob names)
DIFF_KNOBS: dict[str, tuple[Any, str]] = {
    "fabric_mtu": (8000, r"^\+\s+mtu: 8000$"),
    "fabric_netplan_renderer": ("NetworkManager", r"^\+\s+renderer: NetworkManager$"),
    "fabric_subnets": (["10.77.0.0/24", "10.78.0.0/24"], r"^\+\s+- 10\.77\.0\.\d+/24$"),
    "fabric_host_offset": (20, r"^\+\s+- 10\.78\.0\.21/24$"),  # rank 1, second twin
    "fabric_socket_ifname": ("eth0", r"^\+NCCL_SOCKET_IFNAME=eth0$"),
    "peer_ssh_from": (["10.77.0.0/23"], r'^\+.*restrict,from="10\.77\.0\.0/23" ssh-ed25519 '),
    "serve_bind": ("127.0.0.2", execs("--host", "127.0.0.2")),
    "serve_port": (9932, execs("--port", "9932")),
    "serve_worker_wait": (77, execs("run", "--timeout", "77")),
    "serve_health_timeout": (333, r"^\+TimeoutStartSec=393$"),
    "serve_start_limit_burst": (9, r"^\+StartLimitBurst=9$"),
    "serve_start_limit_interval": (1234, r"^\+StartLimitIntervalSec=1234$"),
    "serve_state_dir": ("/var/lib/sparkplay-knob", execs("--state", "/var/lib/sparkplay-knob/watchdog.json")),
    "serve_watchdog_interval": (11, execs("--interval", "11")),
    "serve_watchdog_failures": (4, execs("--failures", "4")),
    "serve_watchdog_grace": (55, execs("--grace", "55")),
    "serve_watchdog_max_restarts": (5, execs("--max-restarts", "5")),
    "serve_watchdog_window": (777, execs("--window", "777")),
    "serve_watchdog_probe_timeout": (13, execs("--probe-timeout", "13")),
    "serve_watchdog_metrics_port": (9898, execs("--metrics-port", "9898")),
    "serve_watchdog_metrics_bind": ("127.0.0.3", execs("--metrics-bind", "127.0.0.3")),
    "serve_watchdog_pause_file": ("/etc/sparkplay/knob.pause", execs("--pause", "/etc/sparkplay/knob.pause")),
}

# knob -> (a value that excludes the lab's nodes, what preflight then says)
PREFLIGHT_KNOBS: dict[str, tuple[Any, str]] = {
    "preflight_os_families": (["RedHat"], r"needs the RedHat family"),
    "preflight_service_manager": ("upstart", r"runs systemd, not upstart"),
    "preflight_architectures": (["riscv64"], r"sparkplay supports riscv64"),
}

# The GPU stand-in: an nvidia-smi that reports this driver, and what DGX OS ships beside it
STAND_IN_DRIVER = "575.51.03"
STAND_IN = {
    # as nvidia-smi --query-gpu answers: the fields asked for, comma-separated
    "/usr/local/bin/nvidia-smi": '#!/bin/sh\ncase "$*" in *name*) echo \''
    + STAND_IN_DRIVER
    + ", NVIDIA GB10 (stand-in)';; *) echo '"
    + STAND_IN_DRIVER
    + "';; esac\n",
    "/usr/local/bin/nvidia-ctk": "#!/bin/sh\necho 'NVIDIA Container Toolkit CLI version 1.18.0 (stand-in)'\n",
    "/usr/local/cuda/version.json": '{"cuda": {"name": "CUDA SDK", "version": "13.0.0"}}\n',
    "/etc/dgx-release": 'DGX_NAME="DGX Spark"\nDGX_OTA_VERSION="stand-in"\n',
}


def site_check(*extra: str) -> subprocess.CompletedProcess[str]:
    return playbook("site.yml", "--check", "--diff", "-e", "recipe=lab-tiny", *extra)


def as_extra_vars(knobs: dict[str, Any]) -> tuple[str, str]:
    return "-e", json.dumps(knobs)


@pytest.fixture(scope="module", autouse=True)
def served_lab() -> Iterator[None]:
    """lab-tiny served, from whatever lab is there (none, or one another module left serving: then the
    up below changes next to nothing, which keeps the suite's time down)."""
    assert run_cli("lab", "up").returncode == 0
    proc = run_cli("up", "lab-tiny", "-i", "inventory/lab", "--yes")
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr
    yield
    run_cli("lab", "down")


def node_files() -> dict[int, str]:
    """What the file knobs would change, read from inside each node."""
    files = (
        "/etc/netplan/*.yaml /etc/sparkplay/*.env /etc/systemd/system/sparkplay-*.service /root/.ssh/authorized_keys"
    )
    return {rank: in_node(rank, "sh", "-c", f"cat {files} 2>/dev/null", check=False).stdout for rank in (0, 1)}


def test_every_file_knob_changes_its_file_in_a_check_mode_diff_and_nothing_changes():
    before = node_files()
    proc = site_check(*as_extra_vars({knob: value for knob, (value, _) in DIFF_KNOBS.items()}))
    assert proc.returncode == 0, proc.stdout[-5000:]
    shown = [knob for knob, (_, effect) in DIFF_KNOBS.items() if not re.search(effect, proc.stdout, re.M)]
    assert not shown, f"knobs whose effect the diff does not show: {shown}\n{proc.stdout[-6000:]}"
    assert node_files() == before  # check mode


def test_with_default_knobs_the_same_check_shows_none_of_those_effects():
    """The baseline for the test above: the effects come from the knobs, not from a lab out of date."""
    proc = site_check()
    assert proc.returncode == 0, proc.stdout[-5000:]
    assert [k for k, (_, effect) in DIFF_KNOBS.items() if re.search(effect, proc.stdout, re.M)] == []
    assert all(v.get("changed", 0) == 0 for v in recap(proc.stdout).values()), proc.stdout[-3000:]


def test_the_file_path_knobs_move_the_files_they_name():
    """A real run: check mode's diff of a new file does not name it, and serve would read the fabric env
    where this knob puts it, which check mode never writes. The files go afterwards."""
    knobs = {"fabric_netplan_file": "/etc/netplan/41-knob.yaml", "sparkplay_fabric_env_file": "/etc/sparkplay/k.env"}
    try:
        proc = playbook("provision.yml", *as_extra_vars(knobs))
        assert proc.returncode == 0, proc.stdout[-5000:]
        for rank in (0, 1):
            assert "Written by sparkplay (fabric role)" in in_node(rank, "cat", knobs["fabric_netplan_file"]).stdout
            assert "SPARKPLAY_FABRIC_TWINS=" in in_node(rank, "cat", knobs["sparkplay_fabric_env_file"]).stdout
    finally:
        for rank in (0, 1):
            in_node(rank, "rm", "-f", *knobs.values())


def test_registering_the_nvidia_runtime_needs_docker_and_says_so_first():
    """The lab-tiny recipe runs natively and the lab's nodes have no Docker: asked to configure it anyway,
    provisioning stops in preflight (the rendered daemon.json is tested in tests/test_knob_effects.py)."""
    before = node_files()
    proc = playbook("provision.yml", "-e", "nvidia_stack_configure_docker=true")
    assert proc.returncode == 2, proc.stdout[-3000:]
    assert "has no Docker service (docker.service is not-found)" in proc.stdout
    assert node_files() == before


def test_without_the_socket_fallback_a_node_with_no_rdma_is_refused():
    proc = playbook("provision.yml", "--check", "-e", "fabric_socket_fallback=false")
    assert proc.returncode == 2, proc.stdout[-3000:]
    assert "has no active RDMA device behind" in proc.stdout


def test_the_apply_commands_are_what_applies_a_changed_netplan_file():
    knobs = {"fabric_mtu": 8000, "fabric_netplan_apply_commands": [["touch", "/run/knob-applied"]]}
    proc = playbook("provision.yml", *as_extra_vars(knobs))
    # the file changed and only that command ran: the links keep their MTU, and the fabric check says so
    assert proc.returncode == 2, proc.stdout[-3000:]
    assert "(want 8000)" in proc.stdout and "mtu: 8000" in in_node(0, "cat", NETPLAN).stdout
    assert in_node(0, "test", "-e", "/run/knob-applied", check=False).returncode == 0
    proc = playbook("provision.yml")  # the lab's own commands apply the file put back
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert "mtu 9000" in in_node(0, "ip", "link", "show", "enp1s0f1np1").stdout


@pytest.mark.parametrize("knob", sorted(PREFLIGHT_KNOBS))
def test_a_preflight_knob_that_excludes_the_lab_refuses_it_naming_why(knob: str):
    value, says = PREFLIGHT_KNOBS[knob]
    proc = playbook("preflight.yml", "-e", "recipe=lab-tiny", *as_extra_vars({knob: value}))
    assert proc.returncode == 2, proc.stdout[-3000:]
    assert re.search(says, proc.stdout), proc.stdout[-3000:]


def test_the_bad_kernel_list_warns_about_the_running_kernel():
    kernel = in_node(0, "uname", "-r").stdout.strip()
    proc = playbook("preflight.yml", "-e", "recipe=lab-tiny", *as_extra_vars({"preflight_bad_kernels": [kernel]}))
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert f"runs kernel {kernel}, known to show CmaTotal 0" in proc.stdout
    assert "known to show CmaTotal 0" not in playbook("preflight.yml", "-e", "recipe=lab-tiny").stdout


@pytest.fixture()
def stand_in_gpu() -> Iterator[None]:
    """Test double: an nvidia-smi, nvidia-ctk, CUDA version file and DGX OS marker on both nodes."""
    for rank in (0, 1):
        for path, text in STAND_IN.items():
            subprocess.run(
                [
                    "docker",
                    "exec",
                    "-i",
                    f"sparkplay-lab-rank{rank}",
                    "sh",
                    "-c",
                    f"mkdir -p {Path(path).parent} && cat > {path} && chmod 0755 {path}",
                ],
                input=text,
                text=True,
                check=True,
                capture_output=True,
            )
    yield
    for rank in (0, 1):
        in_node(
            rank,
            "rm",
            "-rf",
            "/usr/local/bin/nvidia-smi",
            "/usr/local/bin/nvidia-ctk",
            "/usr/local/cuda",
            "/etc/dgx-release",
        )


@pytest.mark.usefixtures("stand_in_gpu")
def test_the_driver_minimums_compare_with_the_driver_the_node_reports():
    gpu = ("-e", "sparkplay_gpu_expected=true")
    refused = playbook("preflight.yml", "-e", "recipe=lab-tiny", *gpu)
    assert refused.returncode == 2 and f"driver {STAND_IN_DRIVER} is older than 580" in refused.stdout
    accepted = playbook("preflight.yml", "-e", "recipe=lab-tiny", *gpu, "-e", "preflight_driver_min=570")
    assert accepted.returncode == 0, accepted.stdout[-3000:]
    stack = ("provision.yml", "--check", "--tags", "nvidia_stack_run", *gpu, "-e", "preflight_driver_min=570")
    refused = playbook(*stack)
    assert refused.returncode == 2, refused.stdout[-3000:]
    assert f"driver {STAND_IN_DRIVER} (want >= 580" in refused.stdout
    accepted = playbook(*stack, "-e", "nvidia_stack_driver_min=570")
    assert accepted.returncode == 0, accepted.stdout[-3000:]
    assert re.search(r"NVIDIA stack \| Check all three\].*\n.*\nok: \[sparkplay-lab-rank[01]\]", accepted.stdout)


def test_one_node_failing_a_check_stops_every_node(tmp_path: Path):
    inventory = tmp_path / "lab"
    shutil.copytree(LAB, inventory)
    (inventory / "host_vars").mkdir(exist_ok=True)
    broken = yaml.safe_dump({"preflight_service_manager": "upstart"})  # rank 1 alone fails a check
    (inventory / "host_vars" / "sparkplay-lab-rank1.yml").write_text(broken)
    proc = steps.playbook("preflight.yml", "-e", "recipe=lab-tiny", inventory=inventory / "hosts.yml")
    assert proc.returncode == 2, proc.stdout[-3000:]
    totals = recap(proc.stdout)
    assert totals["sparkplay-lab-rank1"]["failed"] == 1 and totals["sparkplay-lab-rank0"]["failed"] == 0
    # rank 0 passed the check, and went no further than it: a run where both pass does more on it
    clean = recap(playbook("preflight.yml", "-e", "recipe=lab-tiny").stdout)
    assert totals["sparkplay-lab-rank0"]["ok"] < clean["sparkplay-lab-rank0"]["ok"]


def test_the_watchdog_can_be_turned_off_and_on_again():
    watchdog = "sparkplay-serve-watchdog.service"
    proc = playbook("serve.yml", "-e", "recipe=lab-tiny", "-e", "serve_watchdog_enabled=false")
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert in_node(0, "systemctl", "is-active", watchdog, check=False).stdout.strip() != "active"
    assert in_node(0, "test", "-e", f"/etc/systemd/system/{watchdog}", check=False).returncode == 1
    proc = playbook("serve.yml", "-e", "recipe=lab-tiny")
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert in_node(0, "systemctl", "is-active", watchdog, check=False).stdout.strip() == "active"
