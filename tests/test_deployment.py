"""The deployment: computed once from the recipe, the ranks and the settings (no lab)."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest
import yaml

from sparkplay import deployment, settings
from sparkplay.errors import BadInput
from sparkplay.recipes.store import catalog
from tests.conftest import PROJECT, run_cli


def recipe(name: str) -> dict:
    return catalog.load_for_use(catalog.catalog_dir(PROJECT), name)


def test_the_project_defaults_are_the_pythons():
    ansible = yaml.safe_load((PROJECT / "roles/sparkplay/defaults/main.yml").read_text())
    assert {k: ansible[k] for k in settings.DEFAULTS} == settings.DEFAULTS


def test_leader_paths_checkpoints_and_overlay_of_an_atlas_pair():
    got = deployment.compute(recipe("glm53-atlas"), {"spark-b": 1, "spark-a": 0}, {"sparkplay_model_root": "/m/"})
    assert got["leader"] == "spark-a" and [n["host"] for n in got["nodes"]] == ["spark-a", "spark-b"]
    assert got["paths"]["model_root"] == "/m" and got["paths"]["fabric_env"] == "/etc/sparkplay/fabric.env"
    dests = [c["dest"] for c in got["checkpoints"]]
    assert dests == ["/m/nvidia--GLM-5.3-Flash-NVFP4", "/m/incoai--GLM-5.3-Flash-DFlash2"]  # the drafter too
    assert got["overlay"] == {
        "source": dests[0],
        "output": "/m/atlas-overlay",
        "mount": "/models/atlas-overlay",
        "expect": 864,
    }
    assert got["engine"]["runtime"] == "docker" and got["engine"]["docker"] == "/usr/bin/docker"


def test_settings_and_staged_folders_reach_the_deployment():
    staged = [{"name": "mine", "staged": "/data/mine/"}]
    settings = {
        "sparkplay_fabric_env_file": "/srv/fabric.env",
        "sparkplay_serve_record": "/srv/serve.json",
        "sparkplay_docker": "/opt/bin/docker",
    }
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


def two_nodes(tmp_path: Path, group_vars: str) -> Path:
    """An inventory of spark-a (rank 0) and spark-b (rank 1) with these group variables."""
    inventory = tmp_path / "inv"
    (inventory / "group_vars" / "sparkplay_nodes").mkdir(parents=True)
    (inventory / "hosts.yml").write_text(
        yaml.safe_dump(
            {
                "all": {
                    "children": {
                        "sparkplay_nodes": {
                            "hosts": {"spark-a": {"sparkplay_rank": 0}, "spark-b": {"sparkplay_rank": 1}}
                        }
                    }
                }
            }
        )
    )
    (inventory / "group_vars" / "sparkplay_nodes" / "main.yml").write_text(group_vars)
    return inventory


def test_plan_json_prints_the_deployment_from_the_inventory(tmp_path):
    inventory = two_nodes(tmp_path, "sparkplay_model_root: /srv/models\n")
    proc = run_cli("plan", "glm53-atlas", "-i", str(inventory), "--json", "--without-nodes")
    assert proc.returncode == 0, proc.stderr
    got = json.loads(proc.stdout)
    assert got["leader"] == "spark-a" and got["overlay"]["output"] == "/srv/models/atlas-overlay"
    assert got["paths"]["model_root"] == "/srv/models"


def test_a_plan_json_that_fails_says_why_on_stderr_and_leaves_stdout_to_the_json(tmp_path):
    inventory = two_nodes(tmp_path, "serve_mode: sideways\n")
    proc = run_cli("plan", "lab-tiny", "-i", str(inventory), "--json")
    assert proc.returncode != 0 and proc.stdout == "", proc.stdout
    assert "serve_mode 'sideways' is not a mode" in proc.stderr


SHOW = """
- name: Load it as every entry playbook does
  ansible.builtin.import_playbook: {project}/playbooks/recipe.yml
- name: Show what the run derived
  hosts: localhost
  gather_facts: false
  tasks:
    - name: Show
      ansible.builtin.debug:
        msg: "DEPLOYMENT={{{{ sparkplay_deployment_doc | to_json }}}}"
"""


def test_a_run_takes_rank_0s_settings_and_the_inventorys_api_address_everywhere(tmp_path):
    """The host listed first is rank 1: the run still takes the leader's (rank 0's) settings; serve_port and
    serve_bind reach the deployment (which the preflight port check and the summary read), plan --json too."""
    inventory = tmp_path / "inv"
    (inventory / "host_vars").mkdir(parents=True)
    (inventory / "hosts.yml").write_text(
        yaml.safe_dump(
            {
                "all": {
                    "children": {
                        "sparkplay_nodes": {
                            "hosts": {"spark-b": {"sparkplay_rank": 1}, "spark-a": {"sparkplay_rank": 0}}
                        }
                    }
                }
            },
            sort_keys=False,
        )
    )
    (inventory / "host_vars" / "spark-a.yml").write_text(
        "sparkplay_model_root: /srv/leader\nserve_port: 9100\nserve_bind: 10.1.2.3\n"
    )
    (inventory / "host_vars" / "spark-b.yml").write_text("sparkplay_model_root: /srv/worker\nserve_port: 9200\n")
    (tmp_path / "show.yml").write_text(SHOW.format(project=PROJECT))
    argv = ["ansible-playbook", "-i", str(inventory), str(tmp_path / "show.yml"), "-e", "recipe=lab-tiny"]
    proc = subprocess.run(argv, cwd=PROJECT, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:]
    got = json.loads(re.search(r'"DEPLOYMENT=(.*)"\n', proc.stdout).group(1).replace('\\"', '"'))
    assert got["leader"] == "spark-a" and got["paths"]["model_root"] == "/srv/leader"
    assert got["api"] == {"bind": "10.1.2.3", "port": 9100}
    assert "API 10.1.2.3:9100" in proc.stdout  # the summary says where it will listen
    planned = json.loads(run_cli("plan", "lab-tiny", "-i", str(inventory), "--json", "--without-nodes").stdout)
    assert planned["api"] == got["api"] and planned["paths"]["model_root"] == "/srv/leader"
    # nothing set: the recipe's own address
    assert deployment.compute(recipe("lab-tiny"), {"a": 0})["api"] == {"bind": "127.0.0.1", "port": 9931}


def test_the_preflight_port_check_looks_at_the_port_the_engine_will_listen_on():
    from tests.role_render import render, role_vars, task

    look = task("roles/preflight/tasks/recipe.yml", "Preflight | Measure free disk at the model root")
    given = role_vars("preflight", sparkplay_deployment={"api": {"bind": "127.0.0.1", "port": 9100}})
    assert render(look["sparkplay.spark.sparkplay_probe"]["listening"], given) == [9100]
    # and the check reads that port's listeners
    probed = {**given, "preflight_probe": {"listeners": {"9100": "LISTEN 0 4096 *:9100 *:* users:((x,pid=7,fd=3))"}}}
    assert "pid=7" in render("{{ preflight_listeners }}", probed)


# -- stage two: what each rank runs, from the ranks' facts ----------------------------------------------


def facts_of(count: int) -> dict:
    from sparkplay.engines.plan import stand_in_nodes

    return {n.host: {"machine": "aarch64", "fabric_env": dict(n.fabric_env)} for n in stand_in_nodes(count)}


def two_stage(name: str, settings: dict | None = None, count: int = 2) -> dict:
    doc = recipe(name)
    stage_one = deployment.compute(doc, {f"rank{r}": r for r in range(count)}, settings)
    return deployment.with_launch(stage_one, doc, facts_of(count), settings)


def test_a_recipe_served_on_demand_is_recorded_so_and_never_the_primary():
    added = {"serve_mode": "add", "serve_on_demand": ["lab-small"]}
    record = two_stage("lab-small", added, 1)["launch"]["ranks"][0]["record"]
    assert record["on_demand"] is True and record["slot"] == "lab-small"
    other = two_stage("lab-small", {"serve_mode": "add", "serve_on_demand": ["lab-other"]}, 1)
    assert other["launch"]["ranks"][0]["record"]["on_demand"] is False
    assert two_stage("lab-small", {"serve_mode": "add"}, 1)["launch"]["ranks"][0]["record"]["on_demand"] is False
    with pytest.raises(BadInput, match="serves as the primary"):
        two_stage("lab-tiny", {"serve_on_demand": ["lab-tiny"]})
    with pytest.raises(BadInput, match="serve_on_demand is not a list"):
        two_stage("lab-small", {"serve_mode": "add", "serve_on_demand": "lab-small"}, 1)


def test_stage_two_gives_each_rank_its_command_units_and_record():
    got = two_stage("lab-tiny")
    launch = got["launch"]
    leader, worker = launch["ranks"]
    # the leader waits for its worker's RPC port through the serve tool (as long as it takes), then becomes the engine
    assert leader["start"][:4] == [deployment.TOOLS["serve"], "run", "--timeout", "0"]
    assert leader["start"][leader["start"].index("--") + 1 :] == leader["exec"]
    waits = [a for a in leader["start"] if a.startswith("--wait-for=")]
    assert waits == [f"--wait-for={w}" for w in leader["wait_for"]]
    # the worker binds its cable address: it waits until the node holds it (after a boot, a pulled cable)
    assert worker["start"] == [
        deployment.TOOLS["serve"],
        "run",
        "--timeout",
        "0",
        f"--bind={worker['address']}",
        "--",
        *worker["exec"],
    ]
    # llama.cpp's leader restarts after a worker does (the watcher); the watchdog is the leader's
    assert leader["units"] == [
        "sparkplay-serve.service",
        "sparkplay-serve-watch.service",
        "sparkplay-serve-watchdog.service",
    ]
    assert worker["units"] == ["sparkplay-serve.service", "sparkplay-peer-firewall.service"]
    assert leader["record"]["plan_sha256"] == worker["record"]["plan_sha256"]
    assert leader["record"]["watchdog_state"] == "/var/lib/sparkplay/watchdog.json"
    assert worker["record"]["watchdog_unit"] is None and worker["record"]["role"] == "worker"
    assert launch["probe"] == {
        "url": "http://127.0.0.1:9931",
        "model": launch["served_name"],
        "prompt": launch["health"]["prompt"],
        "timeout_s": 120,
    }
    assert got["units"]["serve"] == launch["unit"]  # one name, stage one's
    assert leader["start_pre"] == [] and not launch["workers_follow_leader"]  # llama.cpp: the leader follows


@pytest.mark.parametrize(("name", "follow"), [("lab-vllm", True), ("glm53", True), ("glm53-atlas", False)])
def test_a_group_engines_leader_restarts_its_workers_before_each_start(name, follow):
    """vLLM's mp back end: one process group, which a headless worker of a dead leader never rejoins."""
    launch = two_stage(name)["launch"]
    leader, *workers = launch["ranks"]
    assert launch["workers_follow_leader"] is follow and not launch["leader_follows_workers"]
    expected = [
        deployment.TOOLS["serve"],
        "restart-workers",
        "--unit",
        launch["unit"],
        *(f"--peer={w['address']}" for w in workers),
    ]
    assert leader["start_pre"] == (expected if follow else [])
    assert all(w["start_pre"] == [] for w in workers)


def test_the_serve_settings_reach_stage_two():
    settings = {
        "serve_tool": "/opt/sp/serve",
        "serve_worker_wait": 45,
        "serve_watchdog_enabled": False,
        "serve_state_dir": "/srv/state/",
        "serve_port": 9500,
        "serve_health_timeout": 77,
    }
    got = two_stage("lab-tiny", settings)
    leader = got["launch"]["ranks"][0]
    assert leader["start"][:4] == ["/opt/sp/serve", "run", "--timeout", "45"]
    assert "sparkplay-serve-watchdog.service" not in leader["units"] and leader["record"]["watchdog_unit"] is None
    assert leader["record"]["state_dir"] == "/srv/state" and got["launch"]["home"] == "/srv/state/engine"
    assert leader["record"]["tool"] == "/opt/sp/serve"
    assert got["launch"]["api"]["port"] == got["api"]["port"] == 9500  # one answer, both stages
    assert got["launch"]["probe"]["timeout_s"] == 77
    # the worker wait is unbounded unless set (a peer that can come back is waited for)
    assert two_stage("lab-tiny", {"serve_health_timeout": 77})["launch"]["ranks"][0]["start"][3] == "0"
    # a claim the inventory states is the deployment's, for admission and the memory limit alike
    claim = two_stage("lab-tiny", {"serve_memory_claim_gib": 1.5})["launch"]["memory_claim"]
    assert claim["bytes"] == int(1.5 * 2**30) and "serve_memory_claim_gib" in claim["how"]
    assert two_stage("lab-tiny")["launch"]["memory_claim"] is None
    for hostile in ("nan", "inf", float("nan"), 1e400, -1, "x", 2**21):  # one line naming the knob, no traceback
        with pytest.raises(BadInput, match="serve_memory_claim_gib"):
            two_stage("lab-tiny", {"serve_memory_claim_gib": hostile})


@pytest.mark.parametrize(
    ("value", "wanted"),
    [
        (False, False),
        ("false", False),
        ("no", False),
        ("0", False),
        ("Off", False),
        (True, True),
        ("true", True),
        ("yes", True),
        (1, True),
    ],
)
def test_the_watchdog_switch_reads_what_extra_vars_pass(value, wanted):
    # `-e serve_watchdog_enabled=false` arrives as a string: it must turn the watchdog off, not on
    leader = two_stage("lab-tiny", {"serve_watchdog_enabled": value})["launch"]["ranks"][0]
    assert ("sparkplay-serve-watchdog.service" in leader["units"]) is wanted
    assert (leader["record"]["watchdog_unit"] is not None) is wanted


def test_a_watchdog_switch_that_is_neither_on_nor_off_is_refused_naming_it():
    with pytest.raises(BadInput, match=r"serve_watchdog_enabled is 'maybe', not on or off.*true or false"):
        two_stage("lab-tiny", {"serve_watchdog_enabled": "maybe"})


def test_stage_two_without_a_ranks_facts_names_the_host_and_the_fix():
    doc = recipe("lab-tiny")
    stage_one = deployment.compute(doc, {"rank0": 0, "rank1": 1})
    with pytest.raises(BadInput, match=r"rank1 has no fabric environment yet.*provision\.yml"):
        deployment.with_launch(stage_one, doc, {"rank0": facts_of(1)["rank0"]})


def test_the_printed_deployment_names_the_api_key_but_never_holds_it():
    doc = recipe("lab-tiny")
    doc["serve"]["args"] += ["--api-key", "sk-local-secret-1234"]
    stage_one = deployment.compute(doc, {"rank0": 0, "rank1": 1})
    full = deployment.with_launch(stage_one, doc, facts_of(2))
    assert full["launch"]["ranks"][0]["env"]["LLAMA_API_KEY"] == "sk-local-secret-1234"  # what the env file gets
    shown = deployment.public(full)
    assert "sk-local-secret-1234" not in json.dumps(shown)
    assert "LLAMA_API_KEY" in shown["launch"]["ranks"][0]["env"]


def test_the_serve_roles_settings_default_to_stage_twos():
    ansible = yaml.safe_load((PROJECT / "roles/serve/defaults/main.yml").read_text())
    given = {k: v for k, v in settings.LAUNCH_DEFAULTS.items() if k not in ("serve_knobs", "serve_watchdog_state")}
    assert {k: ansible[k] for k in given} == given
    assert ansible["serve_watchdog_state"] == "{{ serve_state_dir }}/watchdog.json"


def test_a_vllm_model_folder_is_staged_from_rank_0_and_is_the_models_folder():
    got = deployment.compute(recipe("lab-vllm"), {"n0": 0, "n1": 1}, {})
    root = settings.DEFAULTS["sparkplay_model_root"]
    assert [(c["name"], c["kind"], c["dest"]) for c in got["checkpoints"]] == [
        ("lab-vllm", "staged", f"{root}/lab-vllm")
    ]
    assert got["model"]["dir"] == f"{root}/lab-vllm"  # the folder itself (bench finds its tokenizer.json there)
    # the inventory staging the same folder does not stage it twice
    again = deployment.compute(
        recipe("lab-vllm"), {"n0": 0, "n1": 1}, {}, [{"name": "x", "staged": f"{root}/lab-vllm/"}]
    )
    assert [c["name"] for c in again["checkpoints"]] == ["x"]
    # llama.cpp's model.path is a file: its folder is the model's, and nothing is staged for it
    tiny = deployment.compute(recipe("lab-tiny"), {"n0": 0}, {})
    assert tiny["checkpoints"] == [] and tiny["model"]["dir"] == f"{root}/lab-tiny"


@pytest.mark.parametrize("path", [".", "./", "a/./b", "a//b", "..", "a/../b", "/etc"])
def test_a_vllm_model_folder_that_is_not_below_the_root_is_refused_before_anything_is_mirrored(path):
    doc = recipe("lab-vllm")
    doc["model"]["path"] = path
    if path.startswith("/"):  # a path inside a container: nothing is staged for it, the adapter refuses it
        assert deployment.compute(doc, {"n0": 0, "n1": 1}, {})["checkpoints"] == []
        return
    with pytest.raises(BadInput, match=r"model.path .* (is not a folder below|points outside) the model root"):
        deployment.compute(doc, {"n0": 0, "n1": 1}, {})


SETTINGS_SHOW = """
- name: Read the settings as the serve role's plan does
  hosts: localhost
  gather_facts: false
  vars_files:
    - {project}/roles/serve/defaults/main.yml
  tasks:
    - name: Show
      ansible.builtin.debug:
        msg: "SETTINGS={{{{ lookup('sparkplay.spark.sparkplay_settings', 'launch') | to_json }}}}"
"""


def test_stage_two_reads_every_setting_python_declares_as_the_role_has_it(tmp_path):
    """One lookup, one key list (settings.SETTINGS): the serve role's defaults, an override over them,
    templated; nothing else."""
    (tmp_path / "show.yml").write_text(SETTINGS_SHOW.format(project=PROJECT))
    extra = json.dumps({"serve_knobs": {"kv_shard": 2}, "serve_health_timeout": "{{ 60 * 2 }}", "serve_port": 1})
    argv = ["ansible-playbook", "-i", "localhost,", str(tmp_path / "show.yml"), "-e", extra]
    proc = subprocess.run(argv, cwd=PROJECT, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:]
    got = json.loads(re.search(r'"SETTINGS=(.*)"\n', proc.stdout).group(1).replace('\\"', '"'))
    assert tuple(got) == settings.SETTINGS["launch"]  # every declared key, in order, and only those
    assert got["serve_knobs"] == {"kv_shard": 2} and got["serve_health_timeout"] == 120
    assert got["serve_watchdog_state"] == "/var/lib/sparkplay/watchdog.json"  # the role's default, templated
    assert {
        k: v for k, v in got.items() if k not in ("serve_knobs", "serve_health_timeout", "serve_watchdog_state")
    } == {
        k: v
        for k, v in settings.LAUNCH_DEFAULTS.items()
        if k in got and k not in ("serve_knobs", "serve_health_timeout", "serve_watchdog_state")
    }


def test_the_first_byte_bound_reaches_the_record_and_the_gateways_routes(tmp_path):
    from sparkplay import served
    from sparkplay.nodetools.serve.gateway_files import Routes

    assert two_stage("lab-tiny")["launch"]["ranks"][0]["record"]["first_byte_s"] == 900  # the documented default
    leader = two_stage("lab-tiny", {"serve_first_byte_timeout": 45})["launch"]["ranks"][0]["record"]
    assert leader["first_byte_s"] == 45
    path = tmp_path / "routes.json"
    path.write_text(json.dumps(served.routes([{**leader, "host": "rank0"}])))
    assert Routes(path).parse(path.read_bytes())["models"]["lab-tiny"]["first_byte_s"] == 45.0
    for hostile in (0, -5, "x", "1e3", 86401, "nan"):
        with pytest.raises(BadInput, match="serve_first_byte_timeout"):
            two_stage("lab-tiny", {"serve_first_byte_timeout": hostile})
