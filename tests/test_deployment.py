"""The deployment: computed once from the recipe, the ranks and the settings (no lab)."""

from __future__ import annotations

import json

import pytest
import yaml

from sparkplay import deployment
from sparkplay.errors import BadInput
from sparkplay.recipes import catalog
from tests.conftest import PROJECT, run_cli


def recipe(name: str) -> dict:
    return catalog.load_for_use(catalog.catalog_dir(PROJECT), name)


def test_the_project_defaults_are_the_pythons():
    ansible = yaml.safe_load((PROJECT / "roles/sparkplay/defaults/main.yml").read_text())
    assert {k: ansible[k] for k in deployment.DEFAULTS} == deployment.DEFAULTS


def test_leader_paths_checkpoints_and_overlay_of_an_atlas_pair():
    got = deployment.compute(recipe("glm53-atlas"), {"spark-b": 1, "spark-a": 0}, {"sparkplay_model_root": "/m/"})
    assert got["leader"] == "spark-a" and [n["host"] for n in got["nodes"]] == ["spark-a", "spark-b"]
    assert got["paths"]["model_root"] == "/m" and got["paths"]["fabric_env"] == "/etc/sparkplay/fabric.env"
    dests = [c["dest"] for c in got["checkpoints"]]
    assert dests == ["/m/nvidia--GLM-5.3-Flash-NVFP4", "/m/incoai--GLM-5.3-Flash-DFlash2"]  # the drafter too
    assert got["overlay"] == {"source": dests[0], "output": "/m/atlas-overlay", "mount": "/models/atlas-overlay",
                              "expect": 864}  # fmt: skip
    assert got["engine"]["runtime"] == "docker" and got["engine"]["docker"] == "/usr/bin/docker"


def test_settings_and_staged_folders_reach_the_deployment():
    staged = [{"name": "mine", "staged": "/data/mine/"}]
    settings = {"sparkplay_fabric_env_file": "/srv/fabric.env", "sparkplay_serve_record": "/srv/serve.json",
                "sparkplay_docker": "/opt/bin/docker"}  # fmt: skip
    got = deployment.compute(recipe("lab-tiny"), {"n0": 0, "n1": 1}, settings, staged)
    assert got["paths"]["fabric_env"] == "/srv/fabric.env" and got["paths"]["serve_record"] == "/srv/serve.json"
    assert got["engine"]["docker"] == "/opt/bin/docker"
    assert got["checkpoints"][-1]["dest"] == "/data/mine" and got["overlay"] is None


def test_no_recipe_still_gives_the_leader_and_the_staged_folders():
    got = deployment.compute(None, {"n0": 0}, {}, [{"name": "x", "staged": "/x"}])
    assert got["recipe"] is None and got["leader"] == "n0" and got["engine"] is None
    assert [c["name"] for c in got["checkpoints"]] == ["x"]


@pytest.mark.parametrize(
    ("ranks", "settings", "message"),
    [
        ({"a": 1, "b": 2}, {}, "no host has sparkplay_rank 0"),
        ({"a": 0, "b": 0}, {}, "more than one rank 0"),
        ({"a": 0}, {"sparkplay_model_root": "models"}, "sparkplay_model_root 'models' is not an absolute path"),
        ({"a": 0}, {"sparkplay_fabric_env_file": "/etc/../x"}, "is not an absolute path"),
    ],
)
def test_bad_layouts_and_paths_are_one_line_errors(ranks, settings, message):
    with pytest.raises(BadInput, match=message) as exc:
        deployment.compute(None, ranks, settings)
    assert "\n" not in str(exc.value)


def test_plan_json_prints_the_deployment_from_the_inventory(tmp_path):
    inventory = tmp_path / "inv"
    (inventory / "group_vars" / "sparkplay_nodes").mkdir(parents=True)
    (inventory / "hosts.yml").write_text(yaml.safe_dump({"all": {"children": {"sparkplay_nodes": {"hosts": {
        "spark-a": {"sparkplay_rank": 0}, "spark-b": {"sparkplay_rank": 1}}}}}}))  # fmt: skip
    (inventory / "group_vars" / "sparkplay_nodes" / "main.yml").write_text("sparkplay_model_root: /srv/models\n")
    proc = run_cli("plan", "glm53-atlas", "-i", str(inventory), "--json")
    assert proc.returncode == 0, proc.stderr
    got = json.loads(proc.stdout)
    assert got["leader"] == "spark-a" and got["overlay"]["output"] == "/srv/models/atlas-overlay"
    assert got["paths"]["model_root"] == "/srv/models"
