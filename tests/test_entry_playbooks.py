"""The entry playbooks without nodes: a clear stop before any play, never the lab by default (no lab needed)."""

from __future__ import annotations

import subprocess

import pytest

from tests.conftest import PROJECT


@pytest.mark.parametrize("inventory", [[], ["-i", "inventory/sample-does-not-exist"]])
def test_no_nodes_stops_before_any_play_and_names_the_fix(inventory):
    assert not (PROJECT / "inventory" / "local").exists() or inventory, "this test needs no inventory/local"
    proc = subprocess.run(
        ["ansible-playbook", *inventory, "serve.yml", "-e", "recipe=lab-tiny"],
        cwd=PROJECT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode != 0
    assert "no nodes in group sparkplay_nodes" in proc.stdout
    assert "sparkplay init -i inventory/local" in proc.stdout
    assert "Recipe | Load" not in proc.stdout  # stopped in the controller checks, before the recipe and any node
