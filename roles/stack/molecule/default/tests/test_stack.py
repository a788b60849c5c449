"""Verify the lock held the engine's packages on every node, so an upgrade leaves them alone (testinfra)."""

import os

import pytest

# these hold after this role's own converge, not on the served lab the whole-site test shares
pytestmark = pytest.mark.skipif(
    not os.environ.get("MOLECULE_SCENARIO_DIRECTORY", "").endswith("roles/stack/molecule/default"),
    reason="holds after the stack scenario's converge only",
)


def test_the_engine_packages_are_held(host):
    held = host.check_output("apt-mark showhold").split()
    assert "llama.cpp-tools" in held, held
