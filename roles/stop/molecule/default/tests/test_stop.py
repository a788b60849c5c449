"""Verify stop left no serve unit running or enabled on any rank (testinfra, read-only)."""

import os

import pytest

# these hold after this role's own converge, not on the served lab the whole-site test shares
pytestmark = pytest.mark.skipif(
    not os.environ.get("MOLECULE_SCENARIO_DIRECTORY", "").endswith("roles/stop/molecule/default"),
    reason="holds after the stop scenario's converge only",
)


def test_no_serve_unit_runs_or_comes_back_at_boot(host):
    for name in ("sparkplay-serve.service", "sparkplay-serve-watchdog.service", "sparkplay-serve-watch.service"):
        unit = host.service(name)
        assert not unit.is_running, name
        assert host.run(f"systemctl is-enabled {name}").stdout.strip() != "enabled", name
