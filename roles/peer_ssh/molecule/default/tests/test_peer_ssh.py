"""Verify the peer trust the peer_ssh role left: rank 0 reaches every rank over the cable, nothing else
is trusted (testinfra, read-only)."""

import pytest

SUBNETS = ("192.168.100", "192.168.101")


def rank(host):
    return int(host.backend.get_variables()["sparkplay_rank"])


def test_rank0_reaches_rank1_with_batchmode_ssh_over_each_cable_address(host):
    if rank(host) != 0:
        pytest.skip("the mirror runs from rank 0")
    for subnet in SUBNETS:
        out = host.check_output(f"ssh -o BatchMode=yes -o ConnectTimeout=5 {subnet}.11 hostname")
        assert out.strip() == "sparkplay-lab-rank1"


def test_only_rank0s_key_is_accepted_and_only_from_the_cable(host):
    assert host.file("/root/.ssh/sparkplay_peer_ed25519").mode == 0o600
    keys = host.file("/root/.ssh/authorized_keys")
    if rank(host) == 0:  # no rank reaches the leader: nothing of sparkplay's is authorised here
        assert not keys.exists or "sparkplay peer" not in keys.content_string
        return
    assert 'restrict,from="192.168.100.0/24,192.168.101.0/24"' in keys.content_string
    assert "sparkplay peer sparkplay-lab-rank0" in keys.content_string
