"""Verify reset undid sparkplay: no unit of its, no file it wrote, no peer key (testinfra, read-only)."""

import os

import pytest

# these hold after this role's own converge, not on the served lab the whole-site test shares
pytestmark = pytest.mark.skipif(
    not os.environ.get("MOLECULE_SCENARIO_DIRECTORY", "").endswith("roles/reset/molecule/default"),
    reason="holds after the reset scenario's converge only",
)


def test_no_unit_no_written_file_and_no_peer_key_are_left(host):
    listed = host.run("systemctl list-unit-files 'sparkplay-*' --no-legend").stdout.splitlines()
    units = [line.split()[0] for line in listed if line.strip()]
    # the lab's own units (sparkplay-lab-*: the node's host keys) are the test bed's, not sparkplay's
    assert [u for u in units if not u.startswith("sparkplay-lab-")] == [], units
    assert not host.file("/etc/sparkplay/fabric.env").exists
    assert not host.file("/root/.ssh/sparkplay_peer_ed25519").exists
