"""The fabric parser (plugins/module_utils/sparkplay_fabric.py) against sysfs trees."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.conftest import PROJECT
from tests.sysfs_trees import GIDS_V4_AT_5, build, spark

sys.path.insert(0, str(PROJECT / "plugins" / "module_utils"))
import sparkplay_fabric

PORT1 = ["enp1s0f1np1", "enP2p1s0f1np1"]
PORT0 = ["enp1s0f0np0", "enP2p1s0f0np0"]


def test_spark_cabled_on_port1(tmp_path):
    fabric = sparkplay_fabric.detect(str(spark(tmp_path)))
    assert fabric["twins"] == PORT1
    assert fabric["cabled_ports"] == [1]
    assert fabric["hcas"] == ["rocep1s0f1", "roceP2p1s0f1"]
    assert fabric["gid_index"] == 3
    assert fabric["rdma_present"] and fabric["problems"] == []
    assert fabric["netdevs"]["enP2p1s0f1np1"]["pci"] == {"domain": 2, "bus": 1, "slot": 0, "fn": 1}
    assert "enP7s7" not in fabric["netdevs"]


def test_spark_cabled_on_port0_gets_its_own_twins_and_hcas(tmp_path):
    """Copying rank 0's port-1 settings to a node cabled on port 0 is the known failure."""
    fabric = sparkplay_fabric.detect(str(spark(tmp_path, cabled_port=0)))
    assert fabric["twins"] == PORT0
    assert fabric["hcas"] == ["rocep1s0f0", "roceP2p1s0f0"]
    assert fabric["cabled_ports"] == [0]


def test_gid_index_is_the_roce_v2_ipv4_entry(tmp_path):
    assert sparkplay_fabric.detect(str(spark(tmp_path, gids=GIDS_V4_AT_5)))["gid_index"] == 5


def test_gx10_layout_needs_pairing_off(tmp_path):
    """An ASUS GX10 wires the second domain to the other physical port: no carrier on the 'twin'."""
    root = str(spark(tmp_path, second_twin_carrier=False))
    paired = sparkplay_fabric.detect(root, twin_pairing=True)
    assert paired["twins"] == ["enp1s0f1np1"]
    assert "fabric_twin_pairing: false" in paired["problems"][0]
    unpaired = sparkplay_fabric.detect(root, twin_pairing=False)
    assert unpaired["twins"] == ["enp1s0f1np1"] and unpaired["problems"] == []
    assert unpaired["hcas"] == ["rocep1s0f1"]  # the down HCA is never listed


def test_no_carrier_anywhere(tmp_path):
    root = build(tmp_path, {"enp1s0f1np1": {"carrier": False, "pci": "0000:01:00.1"}})
    fabric = sparkplay_fabric.detect(str(root))
    assert fabric["twins"] == [] and "no ConnectX-7 port has carrier" in fabric["problems"][0]


def test_lab_layout_veths_without_pci_or_rdma(tmp_path):
    root = build(tmp_path, {"enp1s0f1np1": {"carrier": True}, "enP2p1s0f1np1": {"carrier": True}, "eth0": {}})
    fabric = sparkplay_fabric.detect(str(root))
    assert fabric["twins"] == PORT1  # twins from the names' bus:device.function
    assert fabric["hcas"] == [] and not fabric["rdma_present"] and fabric["gid_index"] is None


def test_a_down_twin_hca_is_not_listed(tmp_path):
    root = spark(tmp_path)
    state = root / "sys/class/infiniband/roceP2p1s0f1/ports/1/state"
    state.write_text("1: DOWN\n")
    assert sparkplay_fabric.detect(str(root))["hcas"] == ["rocep1s0f1"]


def test_the_module_reports_facts_through_ansible(tmp_path):
    """The same parser as an Ansible module, run by ansible itself on localhost."""
    root = spark(tmp_path, cabled_port=0)
    proc = subprocess.run(
        ["ansible", "localhost", "-m", "sparkplay.spark.sparkplay_fabric_facts", "-a", f"root={root}"],
        capture_output=True,
        text=True,
        cwd=PROJECT,
        check=False,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    facts = json.loads(proc.stdout.split("=>", 1)[1])["ansible_facts"]["sparkplay_fabric"]
    assert facts["twins"] == PORT0 and facts["hcas"] == ["rocep1s0f0", "roceP2p1s0f0"]


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("enp1s0f1np1", {"domain": 0, "bus": 1, "slot": 0, "fn": 1}),
        ("enP2p1s0f0np0", {"domain": 2, "bus": 1, "slot": 0, "fn": 0}),
        ("enP7s7", None),
    ],
)
def test_pci_identity_from_names(tmp_path, name, expected):
    assert sparkplay_fabric.pci_of(str(tmp_path), name) == expected


def test_each_twins_pcie_width_is_read_for_the_pitfall_check(tmp_path):
    root = spark(tmp_path, cabled_port=0)
    for name, width in zip(PORT0, ("8", "4"), strict=True):
        device = (root / "sys/class/net" / name / "device").resolve()
        (device / "current_link_width").write_text(width + "\n")
        (device / "max_link_width").write_text("8\n")
    pcie = sparkplay_fabric.detect(str(root))["pcie"]
    assert pcie[PORT0[0]]["width"] == 8 and pcie[PORT0[1]] == {
        "width": 4,
        "max_width": 8,
        "speed": None,
        "max_speed": None,
    }
