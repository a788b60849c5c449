"""Verify what the fabric role left on each lab node, and the simulated cable under it (testinfra, read-only)."""

import json

import pytest

TWINS = ("enp1s0f1np1", "enP2p1s0f1np1")
SUBNETS = ("192.168.100", "192.168.101")


def rank(host):
    return int(host.backend.get_variables()["sparkplay_rank"])


@pytest.mark.parametrize("twin", TWINS)
def test_twin_has_carrier(host, twin):
    carrier = host.file(f"/sys/class/net/{twin}/carrier")
    assert carrier.exists, f"{twin} missing on {host.backend.hostname}"
    assert carrier.content_string.strip() == "1"


def test_systemd_is_pid1(host):
    assert host.file("/proc/1/comm").content_string.strip() == "systemd"


def test_netplan_file_is_private_and_names_both_twins(host):
    netplan = host.file("/etc/netplan/40-cx7.yaml")
    assert netplan.exists and netplan.mode == 0o600 and netplan.user == "root"
    text = netplan.content_string
    assert "Written by sparkplay" in text
    for twin in TWINS:
        assert f"    {twin}:" in text
    assert text.count("mtu: 9000") == 2


@pytest.mark.parametrize(("index", "twin"), list(enumerate(TWINS)))
def test_twin_has_mtu_9000_and_its_rank_address(host, index, twin):
    assert host.file(f"/sys/class/net/{twin}/mtu").content_string.strip() == "9000"
    shown = json.loads(host.check_output(f"ip -j addr show dev {twin}"))[0]
    inet = [a["local"] + "/" + str(a["prefixlen"]) for a in shown["addr_info"] if a["family"] == "inet"]
    assert inet == [f"{SUBNETS[index]}.{10 + rank(host)}/24"]


@pytest.mark.parametrize("index", [0, 1])
def test_jumbo_ping_crosses_each_twin(host, index):
    peer = f"{SUBNETS[index]}.{11 - rank(host)}"
    result = host.run(f"ping -c 1 -W 2 -M do -s 8972 -I {TWINS[index]} {peer}")
    assert result.rc == 0, result.stdout + result.stderr


def test_fabric_env_is_computed_from_this_host(host):
    env = dict(
        line.split("=", 1)
        for line in host.file("/etc/sparkplay/fabric.env").content_string.splitlines()
        if line and not line.startswith("#")
    )
    assert env["SPARKPLAY_FABRIC_TRANSPORT"] == "socket"
    assert env["SPARKPLAY_FABRIC_TWINS"] == ",".join(TWINS)
    assert env["SPARKPLAY_FABRIC_ADDRESSES"] == ",".join(f"{s}.{10 + rank(host)}" for s in SUBNETS)
    assert env["NCCL_SOCKET_IFNAME"] == env["GLOO_SOCKET_IFNAME"] == TWINS[0]
    assert env["NCCL_IB_DISABLE"] == "1"
    assert "NCCL_IB_HCA" not in env


def test_memlock_is_unlimited(host):
    limits = host.file("/etc/security/limits.d/90-sparkplay-memlock.conf").content_string
    assert "root hard memlock unlimited" in limits and "*    soft memlock unlimited" in limits
