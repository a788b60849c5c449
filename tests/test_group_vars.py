"""The project's top-level group_vars/ holds no values: beside the entry playbooks Ansible would read them as
playbook group_vars, which beat the inventory's. The inventory's values win (no lab needed)."""

from __future__ import annotations

import json
import subprocess

import yaml

from tests.conftest import PROJECT

LOADED = {".yml", ".yaml", ".json", ""}  # what Ansible's host_group_vars plugin reads


def test_group_vars_holds_nothing_ansible_would_load():
    folder = PROJECT / "group_vars"
    assert (folder / "README.md").is_file()  # its purpose, for whoever opens it
    loaded = [p.relative_to(PROJECT) for p in folder.rglob("*") if p.is_file() and p.suffix in LOADED]
    assert loaded == [], f"{loaded} would beat every inventory's group_vars"


def test_the_inventorys_values_win_over_the_project_defaults(tmp_path):
    inventory = tmp_path / "inv"
    (inventory / "group_vars" / "sparkplay_nodes").mkdir(parents=True)
    (inventory / "hosts.yml").write_text(
        yaml.safe_dump({"all": {"children": {"sparkplay_nodes": {"hosts": {"spark-a": {"sparkplay_rank": 0}}}}}})
    )
    (inventory / "group_vars" / "sparkplay_nodes" / "main.yml").write_text(
        "sparkplay_model_root: /srv/mine\nserve_port: 9100\n"
    )
    argv = ["ansible-inventory", "-i", str(inventory), "--playbook-dir", str(PROJECT), "--host", "spark-a"]
    proc = subprocess.run(argv, cwd=PROJECT, capture_output=True, text=True, timeout=120, check=True)
    merged = json.loads(proc.stdout)  # the inventory's and the playbook directory's group_vars, merged
    assert merged["sparkplay_model_root"] == "/srv/mine" and merged["serve_port"] == 9100
