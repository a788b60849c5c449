"""Verify the lab's simulated cable from inside each node (testinfra, read-only)."""

import pytest

TWINS = ("enp1s0f1np1", "enP2p1s0f1np1")


@pytest.mark.parametrize("twin", TWINS)
def test_twin_has_carrier(host, twin):
    carrier = host.file(f"/sys/class/net/{twin}/carrier")
    assert carrier.exists, f"{twin} missing on {host.backend.hostname}"
    assert carrier.content_string.strip() == "1"


def test_systemd_is_pid1(host):
    assert host.file("/proc/1/comm").content_string.strip() == "systemd"
