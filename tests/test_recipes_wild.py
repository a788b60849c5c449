"""Recipes from the wild: every importer on recipes it was not written from, and what their plans carry.

The fixtures under tests/fixtures/sparkrun/ and the website JSON shapes below
were written for these tests (not copied from anyone's registry), in the
shapes the formats' public documentation describes, with the edges real
recipes have: templates and no template, node ranges, Ray, pipeline and data
parallel, draft models named only inside a flag's JSON, hub-offline
environments, secrets from the controller, launcher features sparkplay
cannot honour. No host is involved; the plans are pure functions.
"""

from __future__ import annotations

import copy
import json
import re
import shutil
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import yaml

from sparkplay import argv, importing
from sparkplay.engines.plan import Options, build
from sparkplay.errors import BadInput
from sparkplay.recipes import model
from sparkplay.recipes.store import apply as apply_mod
from sparkplay.recipes.store import catalog
from tests.conftest import PROJECT, run_cli
from tests.test_engines import ROOT, contains_run, nodes, vllm_rank_of

SPARKRUN = PROJECT / "tests" / "fixtures" / "sparkrun"


def imported(path: Path | str, *sets: str) -> dict:
    return importing.import_source(str(path), sets=sets)


def notes(doc: dict, how: str) -> dict[str, str]:
    return {n["key"]: n["detail"] for n in doc["provenance"] if n["how"] == how}


# -- sparkrun ------------------------------------------------------------------


def test_sparkrun_template_is_expanded_from_defaults_and_every_field_lands():
    doc = imported(SPARKRUN / "qwen3-30b-vllm-tp2.yaml")
    assert doc["source"]["kind"] == "sparkrun"
    assert doc["name"] == "qwen3-30b-a3b-fp8-vllm-tp2"
    assert doc["engine"]["name"] == "vllm" and doc["engine"]["image"] == "scitrera/dgx-spark-vllm:0.16.0-t5"
    assert doc["model"]["repo"] == "Qwen/Qwen3-30B-A3B-FP8"
    pin = "0123456789abcdef0123456789abcdef01234567"
    assert doc["model"]["revision"] == pin and doc["model"]["checkpoints"][0]["revision"] == pin
    assert doc["topology"]["nodes"] == 2 and doc["topology"]["tensor_parallel"] == 2
    assert doc["context_length"] == 65536 and doc["model"]["served_name"] == "qwen3-30b"
    assert contains_run(doc["serve"]["args"], ["--tool-call-parser", "hermes"])
    assert doc["serve"]["bind"] == "127.0.0.1"  # 0.0.0.0 in the recipe: narrowed, and said
    assert "serve.bind" in notes(doc, "narrowed")
    assert doc["serve"]["health_timeout_s"] == 2400
    # the controller's secret is never stored; the mod is reported and kept, not dropped
    assert "HF_TOKEN" not in doc["serve"]["env"] and "HF_TOKEN left out" in notes(doc, "derived")["serve.env"]
    assert doc["extra"]["sparkrun_not_honoured"]["mods"] == ["mods/qwen3-tool-parser"]
    assert "extra.sparkrun_not_honoured.mods" in notes(doc, "ignored")
    assert doc["notes"].startswith("Qwen3 30B A3B FP8")


def test_sparkrun_without_command_gets_the_engines_command_and_the_draft_becomes_a_checkpoint():
    doc = imported(SPARKRUN / "glm-vllm-ray-pp3-eagle.yaml")
    args = doc["serve"]["args"]
    for run in (["-pp", "3"], ["--max-model-len", "32768"], ["--kv-cache-dtype", "fp8"]):
        assert contains_run(args, run)
    assert "--enable-prefix-caching" in args and "--enforce-eager" not in args  # True a switch, False left out
    assert doc["serve"]["distributed_backend"] == "ray" and doc["serve"]["shm_size"] == "64g"
    assert doc["topology"] == {"nodes": 3, "tensor_parallel": 1, "pipeline_parallel": 3, "expert_parallel": 1}
    roles = {c["repo"]: c["role"] for c in doc["model"]["checkpoints"]}
    assert roles == {"zai-org/GLM-4.6-FP8": "target", "yuhuili/EAGLE3-GLM-4.6": "drafter"}
    assert doc["serve"]["env"]["HF_HUB_OFFLINE"] == "1"
    assert doc["extra"]["sparkrun_not_honoured"]["executor_config"] == {"privileged": True}


def test_sparkrun_draft_cached_by_path_is_pinned_and_node_range_follows_the_parallelism():
    doc = imported(SPARKRUN / "llama-3node-vllm-mp.yaml")
    draft = next(c for c in doc["model"]["checkpoints"] if c["role"] == "drafter")
    assert draft == {
        "role": "drafter",
        "repo": "meta-llama/Llama-3.2-1B-Instruct",
        "revision": "9213176726f574b556790deb65791e0c5aa438b6",
        "size_bytes": None,
        "mount": None,
        "license": None,
    }
    assert doc["topology"]["nodes"] == 3  # cluster_only: 2 or more; tensor 1 x pipeline 3
    assert doc["name"] == "llama-3node-vllm-mp"  # sparkrun names a recipe by its file


def test_sparkrun_atlas_without_command_maps_defaults_through_the_flag_map():
    doc = imported(SPARKRUN / "qwen35-atlas-solo.yaml")
    args = doc["serve"]["args"]
    assert doc["engine"]["name"] == "atlas" and doc["topology"]["nodes"] == 1
    for run in (["--max-seq-len", "8192"], ["--scheduling-policy", "slai"], ["--num-drafts", "2"]):
        assert contains_run(args, run)
    assert "--speculative" in args
    assert any(c["repo"] == "avarok/qwen3.5-35b-a3b-nvfp4-draft" for c in doc["model"]["checkpoints"])
    assert any(p.key == "engine.image" and p.severity == "warning" for p in model.problems(doc))  # :latest


def test_sparkrun_gguf_recipe_without_the_hub_needs_its_file_named_and_says_how():
    """model repo:QUANT with no command: llama.cpp's -hf rule picks the file from the hub's list
    (tests/test_gguf_hub.py); with no hub, the import says how to name the file."""
    with pytest.raises(BadInput, match=r"cannot list Qwen/Qwen3-1.7B-GGUF@main.*--set model.path="):
        imported(SPARKRUN / "qwen3-gguf-llamacpp.yaml")
    doc = imported(SPARKRUN / "qwen3-gguf-llamacpp.yaml", "model.path=Qwen--Qwen3-1.7B-GGUF/Qwen3-1.7B-Q8_0.gguf")
    assert doc["model"]["repo"] == "Qwen/Qwen3-1.7B-GGUF" and doc["model"]["quant"] == "q8_0"
    assert doc["engine"]["image"] is None  # llama.cpp runs from the node's packages: the container is reported
    assert "extra.sparkrun_not_honoured.container" in notes(doc, "ignored")
    assert contains_run(doc["serve"]["args"], ["--n-gpu-layers", "99"])


BASE = {"recipe_version": "2", "model": "Org/M", "runtime": "vllm", "container": "v/v:1", "defaults": {"port": 8000}}


@pytest.mark.parametrize(
    ("change", "says"),
    [
        ({"recipe_version": "seven"}, "recipe_version 'seven' is not a version"),
        ({"recipe_version": "0"}, "recipe_version '0' is not a version"),
        ({"runtime": "tgi"}, "unknown sparkrun runtime 'tgi'"),
        ({"min_nodes": 3, "max_nodes": 2}, "min_nodes 3 is more than max_nodes 2"),
        ({"max_nodes": 0}, "max_nodes must be a whole number of nodes"),
        ({"command": "vllm serve {model} --port {port} --x {nope}"}, "the command uses {nope}, which defaults"),
        ({"command": "cd /work; vllm serve {model}"}, "the command is a shell script"),
        ({"command": "vllm serve {model} > /tmp/log"}, "the command is a shell script"),
        ({"command": "export A=$HOME; vllm serve {model}"}, "the command is a shell script"),
        ({"command": "taskset -p 3 vllm serve {model}"}, "under taskset -p, which sparkplay does not read"),
        ({"command": "vllm serve {model} && echo done"}, "the command is a shell script"),
        ({"command": "llama-server -m x.gguf"}, "runtime vllm but the command starts llamacpp's server"),
        ({"defaults": {"a": "{b}", "b": "{a}"}, "command": "vllm serve {a}"}, "placeholders refer to each other"),
        ({"container": "--privileged"}, "engine.image cannot be determined"),
        ({"defaults": {"tensor_parallel": "two"}}, "defaults.tensor_parallel must be a whole number"),
        ({"env": ["A=1"]}, "defaults and env must be mappings"),
        ({"distribution_config": {"models": {"entries": [{"revision": "x"}]}}}, "a distribution_config model has"),
    ],
)
def test_bad_sparkrun_recipes_are_one_line_errors_naming_the_file(tmp_path, change, says):
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump({**BASE, **change}))
    with pytest.raises(BadInput) as caught:
        imported(path)
    assert says in str(caught.value) and "\n" not in str(caught.value)
    assert str(path) in str(caught.value)


def test_a_later_recipe_version_is_read_as_sparkrun_reads_it_and_said(tmp_path):
    """sparkrun reads every version but 1 alike (core/recipe.py); a registry's version 7 recipe imports so."""
    path = tmp_path / "later.yaml"
    path.write_text(yaml.safe_dump({**BASE, "recipe_version": "7", "command": "vllm serve {model} --port {port}"}))
    doc = imported(path)
    assert doc["engine"]["name"] == "vllm" and doc["model"]["repo"] == "Org/M"
    assert any("recipe_version 7 is none of those sparkplay knows" in n["detail"] for n in doc["provenance"])
    path.write_text(yaml.safe_dump({**BASE, "recipe_version": "4", "command": "vllm serve {model} --port {port}"}))
    assert not any("recipe_version" in n["detail"] for n in imported(path)["provenance"])


TRTLLM = {"recipe_version": "2", "model": "Org/M", "runtime": "trtllm", "container": "nvcr.io/nvidia/tensorrt-llm/x:1"}


def test_a_sparkrun_trtllm_recipe_imports_and_names_the_options_file_sparkrun_would_write(tmp_path):
    """sparkrun's trtllm runtime: a template is read as a trtllm-serve line; the defaults sparkrun writes to an
    LLM API options file of its own (free_gpu_memory_fraction, kv_cache_dtype, ...) are named as not applied."""
    path = tmp_path / "trt.yaml"
    recipe = {
        **TRTLLM,
        "min_nodes": 2,
        "defaults": {"tensor_parallel": 2, "free_gpu_memory_fraction": 0.8, "kv_cache_dtype": "fp8"},
        "command": "trtllm-serve {model} --tp_size {tensor_parallel} --max_seq_len 8192",
    }
    path.write_text(yaml.safe_dump(recipe))
    doc = imported(path)
    assert doc["engine"]["name"] == "trtllm" and doc["context_length"] == 8192
    said = {n["key"]: n["detail"] for n in doc["provenance"]}
    assert "free_gpu_memory_fraction" in said["extra.sparkrun_not_honoured.api_options"]
    assert "kv_cache_dtype" in said["extra.sparkrun_not_honoured.api_options"]
    plan = build(doc, nodes(2), Options(model_root=ROOT, allow=None))
    assert len(plan["ranks"]) == 2


def test_a_sparkrun_trtllm_recipe_without_a_command_is_built_by_sparkruns_flag_map(tmp_path):
    path = tmp_path / "trt.yaml"
    path.write_text(yaml.safe_dump({**TRTLLM, "defaults": {"max_model_len": 4096, "trust_remote_code": True}}))
    doc = imported(path)
    assert doc["serve"]["args"][:2] == ["--backend", "pytorch"]  # sparkrun's default back end, none named
    assert contains_run(doc["serve"]["args"], ["--trust_remote_code"]) and doc["context_length"] == 4096
    path.write_text(yaml.safe_dump({**TRTLLM, "defaults": {"backend": "tensorrt", "print_iter_log": True}}))
    doc = imported(path)
    assert doc["serve"]["args"] == ["--backend", "tensorrt"]
    said = {n["key"]: n["detail"] for n in doc["provenance"]}
    assert "print_iter_log" in said["extra.sparkrun_not_honoured.api_options"]
    assert "extra.sparkrun_not_honoured.defaults" not in said  # named once, as what it is


@pytest.mark.parametrize(
    "command",
    ["trtllm-serve Org/M --tp_size 1", "mpirun -n 1 --allow-run-as-root trtllm-serve Org/M --tp_size 1"],
)
def test_a_trtllm_command_with_no_runtime_is_trtllm_as_sparkrun_detects_it(tmp_path, command):
    path = tmp_path / "trt.yaml"
    path.write_text(yaml.safe_dump({"recipe_version": "2", "model": "Org/M", "container": "t/t:1", "command": command}))
    assert imported(path)["engine"]["name"] == "trtllm"


def test_a_templates_per_rank_flags_are_dropped_and_said_not_refused_at_plan(tmp_path):
    """A registry's two-node template that writes the leader's address (`--master-addr 192.168.100.1`): the
    ranks and the leader are the inventory's, as in a pasted multi-node guide."""
    path = tmp_path / "two.yaml"
    command = "vllm serve {model} -tp 2 --master-addr 10.99.0.7 --master-port 29501 --max-model-len 4096"
    path.write_text(yaml.safe_dump({**BASE, "runtime": "vllm-distributed", "min_nodes": 2, "command": command}))
    doc = imported(path)
    assert not argv.has_flag(doc["serve"]["args"], "--master-addr")
    assert not argv.has_flag(doc["serve"]["args"], "--master-port")
    assert any("--master-addr, --master-port: one node's flags" in n["detail"] for n in doc["provenance"])
    plan = build(doc, nodes(2), Options(model_root=ROOT, allow=None))
    assert "10.99.0.7" not in json.dumps(plan) and all(
        argv.flag_value(r["argv"], "--master-addr") != "10.99.0.7" for r in plan["ranks"]
    )


def test_shell_variables_are_not_placeholders_and_a_placeholder_may_hold_another():
    from sparkplay.recipes.importers.sparkrun.recipe import expand

    assert expand("a {x} ${HOME} {y}", {"x": "{y}", "y": 2}, "w") == "a 2 ${HOME} 2"
    assert expand("--c '{j}'", {"j": '{"method":"eagle3"}'}, "w") == """--c '{"method":"eagle3"}'"""


def test_the_importer_is_chosen_by_content_not_by_file_name(tmp_path):
    for text, kind in (
        ((SPARKRUN / "qwen3-30b-vllm-tp2.yaml").read_text(), "sparkrun"),
        (json.dumps({"title": "t", "command": "vllm serve o/m --port 1", "image": "v/v:1"}), "localairecipes"),
        ('engine = "vllm"\nmodel = "o/m"\ndocker_image = "v/v:1"\nargs = []\n', "launcher-toml"),
    ):
        path = tmp_path / "recipe.txt"  # a name that says nothing
        path.write_text(text)
        assert imported(path)["source"]["kind"] == kind
    path.write_text("just: some\nyaml: file\n")
    with pytest.raises(BadInput, match="is not a recipe sparkplay knows"):
        imported(path)


def test_set_refuses_unknown_fields_and_reads_values_as_yaml(tmp_path):
    path = SPARKRUN / "qwen3-30b-vllm-tp2.yaml"
    with pytest.raises(BadInput, match=r"the recipe has no field engine\.colour"):
        imported(path, "engine.colour=red")
    with pytest.raises(BadInput, match="is not KEY"):
        imported(path, "engine.image")
    doc = imported(path, "serve.port=9001", "model.revision=" + "a" * 40, "serve.bind=0.0.0.0")
    assert doc["serve"]["port"] == 9001 and doc["model"]["checkpoints"][0]["revision"] == "a" * 40
    assert doc["serve"]["bind"] == "0.0.0.0"  # noqa: S104 - the user asked, in so many words


def test_cli_import_reports_what_is_not_honoured_and_round_trips_show(tmp_path):
    project = tmp_path / "project"
    (project / "playbooks").mkdir(parents=True)
    (project / "ansible.cfg").write_text("[defaults]\n")
    proc = run_cli("recipe", "import", str(SPARKRUN / "qwen3-30b-vllm-tp2.yaml"), "--project-dir", str(project))
    assert proc.returncode == 0, proc.stderr
    assert "not honoured: extra.sparkrun_not_honoured.mods" in proc.stderr
    shown = run_cli("recipe", "show", "qwen3-30b-a3b-fp8-vllm-tp2", "--format", "json", "--project-dir", str(project))
    assert json.loads(shown.stdout)["extra"]["sparkrun_not_honoured"]["mods"] == ["mods/qwen3-tool-parser"]


# -- website JSON that drifts --------------------------------------------------------------


def web(tmp_path: Path, data: dict, *sets: str) -> dict:
    path = tmp_path / "site.json"
    path.write_text(json.dumps(data))
    return imported(path, *sets)


def test_command_under_an_unlisted_field_and_image_in_prose(tmp_path):
    doc = web(
        tmp_path,
        {
            "title": "Qwen3 on two Sparks",
            "launch": {"serve_cmdline": "vllm serve Qwen/Qwen3-8B --tensor-parallel-size 2 --max-model-len 8192"},
            "environment_notes": "IMAGE: NVCR.IO/NVIDIA/VLLM:25.11-py3. "
            "Revision 1a2b3c4d5e6f708192a3b4c5d6e7f8091a2b3c4d.",
        },
    )
    assert doc["engine"]["name"] == "vllm" and doc["model"]["repo"] == "Qwen/Qwen3-8B"
    assert doc["engine"]["image"] == "nvcr.io/nvidia/vllm:25.11-py3"
    assert doc["model"]["revision"] == "1a2b3c4d5e6f708192a3b4c5d6e7f8091a2b3c4d"
    assert doc["model"]["checkpoints"][0]["revision"] == doc["model"]["revision"]


def test_command_as_a_list_of_lines_in_any_field(tmp_path):
    doc = web(
        tmp_path,
        {
            "name": "gpt",
            "steps": ["docker pull vllm/vllm-openai:v0.11.0", "vllm serve openai/gpt-oss-120b --port 8001 -tp 2"],
            "docker": "vllm/vllm-openai:v0.11.0",
        },
    )
    assert doc["model"]["repo"] == "openai/gpt-oss-120b" and doc["serve"]["port"] == 8001
    assert doc["engine"]["image"] == "vllm/vllm-openai:v0.11.0"


def test_two_engine_commands_are_ambiguous(tmp_path):
    with pytest.raises(BadInput, match="more than one engine command"):
        web(tmp_path, {"a": "vllm serve o/a --port 1", "b": "llama-server -m b.gguf"})


def test_prose_image_that_is_not_a_reference_is_not_taken(tmp_path):
    doc = web(tmp_path, {"command": "vllm serve o/m", "notes": "Use the image: --privileged. Image nvcr.io/x/y:1."})
    assert doc["engine"]["image"] == "nvcr.io/x/y:1"


def test_one_letter_env_names_are_kept(tmp_path):
    doc = web(tmp_path, {"command": "vllm serve o/m", "image": "v/v:1", "env": "Set X=1 and NCCL_DEBUG=WARN."})
    assert doc["serve"]["env"] == {"X": "1", "NCCL_DEBUG": "WARN"}


@pytest.mark.parametrize(
    "prose",
    ["HF_HUB_OFFLINE=1 once the weights are cached", "only with HF_HUB_OFFLINE=1", "If you want, HF_HUB_OFFLINE=1"],
)
def test_conditional_prose_settings_are_never_applied(tmp_path, prose):
    doc = web(tmp_path, {"command": "vllm serve o/m", "image": "v/v:1", "env_notes": prose})
    assert "HF_HUB_OFFLINE" not in doc["serve"]["env"]


# -- the plans carry every parallelism and every model --------------------------------------


def plan_of(doc: dict, count: int) -> dict:
    # every image trusted: these tests are about the plan's rules, and their images are stand-ins (v/v:1)
    return build(doc, nodes(count), Options(model_root=ROOT, trusted_images=("*",)))


def test_golden_pipeline_parallel_plan_over_three_nodes():
    doc = imported(SPARKRUN / "llama-3node-vllm-mp.yaml")
    deployment = plan_of(doc, 3)
    target = f"{ROOT}/meta-llama--Llama-3.3-70B-Instruct"
    draft = f"{ROOT}/meta-llama--Llama-3.2-1B-Instruct"
    spec = json.dumps({"method": "draft_model", "model": draft, "num_speculative_tokens": 4}, separators=(",", ":"))
    assert deployment["parallel"] == {"tensor": 1, "pipeline": 3, "data": 1, "backend": "mp"}
    leader, w1, w2 = deployment["ranks"]
    assert leader["argv"] == [
        "serve",
        target,
        "-tp",
        "1",
        "-pp",
        "3",
        "--max-model-len",
        "16384",
        "--speculative-config",
        spec,
        # vLLM would serve the model as its argument, the repo id: sparkplay serves a path, so it names it
        "--served-model-name",
        "meta-llama/Llama-3.3-70B-Instruct",
        *vllm_rank_of(3, 0),
        "--host",
        "127.0.0.1",
        "--port",
        "8000",
    ]
    assert w2["argv"][-9:] == [
        "--nnodes",
        "3",
        "--node-rank",
        "2",
        "--master-addr",
        "192.168.100.10",
        "--master-port",
        "29501",
        "--headless",
    ]
    assert {r["path"] for r in deployment["requires"]} == {target, draft}
    assert contains_run(w1["container_options"], ["--entrypoint", "vllm"])


def test_golden_ray_plan_head_first_workers_join_it():
    doc = imported(SPARKRUN / "glm-vllm-ray-pp3-eagle.yaml")
    deployment = plan_of(doc, 3)
    head, *workers = deployment["ranks"]
    assert deployment["parallel"]["backend"] == "ray"
    assert contains_run(head["container_options"], ["--entrypoint", "/bin/bash"])
    assert head["argv"][:5] == ["-c", head["argv"][1], "ray-head", "6379", "serve"]
    assert "ray start --head" in head["argv"][1] and 'exec vllm "$@"' in head["argv"][1]
    server = head["argv"][4:]
    assert contains_run(server, ["-pp", "3"])  # sparkrun's flag map writes the short form
    assert contains_run(server, ["--distributed-executor-backend", "ray"])
    assert server[-4:] == ["--host", "127.0.0.1", "--port", "8000"]
    spec = json.loads(server[server.index("--speculative-config") + 1])
    assert spec["model"] == f"{ROOT}/yuhuili--EAGLE3-GLM-4.6"  # the mirrored draft: the hub is off
    assert {"address": "192.168.100.10", "port": 6379} in head["listen"]
    for worker in workers:
        assert worker["argv"] == ["-c", worker["argv"][1], "ray-worker", "192.168.100.10:6379"]
        assert "ray start --block" in worker["argv"][1]
        assert worker["wait_for"] == ["192.168.100.10:6379"] and worker["listen"] == []
        assert contains_run(worker["container_options"], ["--shm-size", "64g"])


def test_data_parallel_plan_one_replica_per_node():
    doc = imported(SPARKRUN / "qwen3-30b-vllm-tp2.yaml")
    doc["serve"]["args"] = ["--data-parallel-size", "2", "--enable-expert-parallel"]
    doc["topology"]["tensor_parallel"] = 1
    leader, worker = plan_of(doc, 2)["ranks"]
    assert contains_run(
        leader["argv"],
        [
            "--data-parallel-size-local",
            "1",
            "--data-parallel-address",
            "192.168.100.10",
            "--data-parallel-rpc-port",
            "29550",
        ],
    )
    assert "--data-parallel-start-rank" not in leader["argv"] and "--enable-expert-parallel" in leader["argv"]
    assert contains_run(worker["argv"], ["--data-parallel-start-rank", "1", "--headless"])
    assert "--nnodes" not in worker["argv"]


@pytest.mark.parametrize(
    ("args", "count", "says"),
    [
        (["-tp", "2"], 3, r"tensor 2 x pipeline 1 x data 1 = 2 GPUs\) does not match the 3 node"),
        (["--data-parallel-size", "2", "-tp", "2"], 4, "data parallel across nodes combined"),
        (["--distributed-executor-backend", "ray"], 2, "recipe says back end mp but its flags say"),
        (["--node-rank", "1"], 2, "--node-rank"),
        (["--data-parallel-address", "x"], 2, "--data-parallel-address"),
    ],
)
def test_vllm_plans_refuse_what_cannot_run(args, count, says):
    doc = imported(SPARKRUN / "qwen3-30b-vllm-tp2.yaml")
    doc["serve"]["args"] = args
    doc["serve"]["distributed_backend"] = "mp"
    doc["topology"]["tensor_parallel"] = 1 if "-tp" not in args else 2
    doc["topology"]["nodes"] = count
    with pytest.raises(BadInput, match=says):
        plan_of(doc, count)


def test_a_three_node_recipe_on_a_pair_says_so():
    doc = imported(SPARKRUN / "llama-3node-vllm-mp.yaml")
    with pytest.raises(BadInput, match=r"runs on 3 node\(s\) but the inventory has 2 in sparkplay_nodes"):
        plan_of(doc, 2)


def apply_project(tmp_path: Path) -> tuple[Path, Path]:
    """A bare project (no playbooks run) and a copy of the sample inventory, for `apply`."""
    project = tmp_path / "project"
    (project / "playbooks").mkdir(parents=True)
    (project / "ansible.cfg").write_text("[defaults]\n")
    inventory = tmp_path / "inv"
    shutil.copytree(PROJECT / "inventory" / "sample", inventory)
    return project, inventory


def test_apply_refuses_a_three_node_recipe_on_a_pair_and_writes_nothing(tmp_path):
    project, inventory = apply_project(tmp_path)
    before = sorted(p for p in inventory.rglob("*"))
    assert (
        run_cli(
            "recipe", "import", str(SPARKRUN / "llama-3node-vllm-mp.yaml"), "--project-dir", str(project)
        ).returncode
        == 0
    )
    proc = run_cli("apply", "llama-3node-vllm-mp", "-i", str(inventory), "--project-dir", str(project))
    assert proc.returncode == 2
    assert "recipe llama-3node-vllm-mp runs on 3 node(s) but the inventory has 2 in sparkplay_nodes" in proc.stderr
    assert sorted(p for p in inventory.rglob("*")) == before


# -- a floating tag is pinned to a digest at apply time --------------------------------------
# The registry cannot exist here: a local HTTP server on 127.0.0.1 stands in for one (a test
# double speaking the distribution API: a bearer challenge, a token service, a manifest HEAD).

DIGEST = "sha256:" + "ab" * 32


class _Registry(BaseHTTPRequestHandler):
    def log_message(self, *args: object) -> None:
        pass

    def do_GET(self) -> None:  # the token service
        if self.path.startswith("/token?") and "scope=repository%3Aorg%2Fengine%3Apull" in self.path:
            body = json.dumps({"token": "t0k"}).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        else:
            self.send_response(404)
            self.end_headers()

    def do_HEAD(self) -> None:  # the manifest
        port = self.server.server_address[1]
        if self.headers.get("Authorization") != "Bearer t0k":
            self.send_response(401)
            self.send_header("WWW-Authenticate", f'Bearer realm="http://127.0.0.1:{port}/token",service="test"')
        elif self.path == "/v2/org/engine/manifests/latest" and "oci.image.index" in self.headers.get("Accept", ""):
            self.send_response(200)
            self.send_header("Docker-Content-Digest", DIGEST)
        else:
            self.send_response(404)
        self.end_headers()


@pytest.fixture
def registry_port():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Registry)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server.server_address[1]
    server.shutdown()


def test_a_floating_tag_is_resolved_through_the_registrys_token_challenge(registry_port):
    from sparkplay.recipes.store import registry

    image = f"127.0.0.1:{registry_port}/org/engine:latest"
    mine = [f"127.0.0.1:{registry_port}/org/*"]  # the inventory names the registry on this machine
    assert registry.resolve(image, mine) == f"{image}@{DIGEST}"
    assert registry.resolve(f"127.0.0.1:{registry_port}/org/engine", mine) == f"{image}@{DIGEST}"
    with pytest.raises(registry.RegistryError, match="HTTP 404"):
        registry.resolve(f"127.0.0.1:{registry_port}/org/engine:v1", mine)
    assert registry.split("ubuntu") == ("registry-1.docker.io", "library/ubuntu", "latest")
    assert registry.split("nvcr.io/nvidia/vllm:25.11-py3") == ("nvcr.io", "nvidia/vllm", "25.11-py3")


def test_apply_records_the_digest_and_the_recipe_is_served_by_it(tmp_path, registry_port):
    project = tmp_path / "project"
    (project / "playbooks").mkdir(parents=True)
    (project / "ansible.cfg").write_text("[defaults]\n")
    image = f"127.0.0.1:{registry_port}/org/engine:latest"
    source = tmp_path / "r.yaml"
    source.write_text(
        yaml.safe_dump({**BASE, "container": image, "min_nodes": 2, "max_nodes": 2, "defaults": {"tensor_parallel": 2}})
    )
    assert run_cli("recipe", "import", str(source), "--name", "floaty", "--project-dir", str(project)).returncode == 0
    inventory = tmp_path / "inv"
    shutil.copytree(PROJECT / "inventory" / "sample", inventory)
    proc = run_cli("apply", "floaty", "-i", str(inventory), "--project-dir", str(project))
    assert proc.returncode == 0 and "which the inventory does not name" in proc.stderr + proc.stdout
    assert "sparkplay_image_pins" not in (inventory / "group_vars" / "all" / "sparkplay.yml").read_text()
    (inventory / "group_vars" / "all" / "registry.yml").write_text(
        yaml.safe_dump({"serve_trusted_images": [f"127.0.0.1:{registry_port}/org/*"]})
    )
    proc = run_cli("apply", "floaty", "-i", str(inventory), "--project-dir", str(project), "--yes")
    assert proc.returncode == 0, proc.stderr
    recorded = yaml.safe_load((inventory / "group_vars" / "all" / "sparkplay.yml").read_text())
    assert recorded["sparkplay_image_pins"] == {image: f"{image}@{DIGEST}"}
    doc = catalog.load_for_use(catalog.catalog_dir(project), "floaty")
    assert apply_mod.pin_image(doc, recorded["sparkplay_image_pins"])["engine"]["image"] == f"{image}@{DIGEST}"
    with pytest.raises(BadInput, match="not that image by digest"):
        apply_mod.pin_image(doc, {image: "other/image@" + DIGEST})


def test_apply_offline_keeps_the_earlier_pin_and_warns(tmp_path):
    doc = {"engine": {"runtime": "docker", "image": "127.0.0.1:9/org/engine:latest"}}
    earlier = {doc["engine"]["image"]: "127.0.0.1:9/org/engine:latest@" + DIGEST}
    pins, warning = apply_mod.resolve_pins(doc, earlier)
    assert pins == earlier and "could not pin" in warning and "keeping the digest recorded before" in warning


@pytest.mark.parametrize(
    ("data", "says"),
    [
        ({"title": "no command here", "notes": "run it as you like"}, "has no command line"),
        ({"command": "vllm serve 'o/m"}, "cannot be split into arguments"),
        ({"command": "text-generation-launcher --model-id o/m"}, "unknown engine"),
        ({"command": "vllm serve o/m", "image": "--privileged"}, "engine.image cannot be determined"),
        ({"command": "vllm serve o/m --speculative-config '{bad'", "image": "v/v:1"}, "is not valid JSON"),
        ({"command": "vllm serve o/m --max-model-len lots", "image": "v/v:1"}, "value the engine does not read"),
    ],
)
def test_bad_website_recipes_name_the_file_and_write_nothing(tmp_path, data, says):
    path = tmp_path / "site.json"
    path.write_text(json.dumps(data))
    with pytest.raises(BadInput) as caught:
        imported(path)
    assert str(caught.value).startswith(f"{path}: ") and says in str(caught.value)


def test_launcher_toml_with_pipeline_parallel_ray_and_a_health_timeout(tmp_path):
    path = tmp_path / "recipe.toml"
    path.write_text(
        'engine = "vllm"\nname = "pp2"\ndocker_image = "vllm/vllm-openai:v0.11.0"\nmodel = "Org/Big-FP8"\n'
        'required_nodes = 2\ntensor_parallel_size = 1\npipeline_parallel_size = 2\ndistributed_backend = "ray"\n'
        "healthcheck_timeout = 5400\n"
        'args = ["--speculative-config", \'{"method": "eagle3", "model": "Org/Big-Eagle3", '
        '"num_speculative_tokens": 2}\']\n[env]\nHF_HUB_OFFLINE = "1"\n'
    )
    doc = imported(path)
    assert doc["serve"]["health_timeout_s"] == 5400 and "healthcheck_timeout" not in doc["extra"]
    assert [c["repo"] for c in doc["model"]["checkpoints"]] == ["Org/Big-FP8", "Org/Big-Eagle3"]
    deployment = plan_of(doc, 2)
    assert deployment["parallel"] == {"tensor": 1, "pipeline": 2, "data": 1, "backend": "ray"}
    assert deployment["health"]["timeout_s"] == 5400
    server = deployment["ranks"][0]["argv"]
    assert contains_run(server, ["--pipeline-parallel-size", "2"])
    assert "--tensor-parallel-size" not in server  # 1: vLLM's own default


# -- shapes nobody here wrote the importers from -------------------------------------------

SHAPES = PROJECT / "tests" / "fixtures" / "localairecipes" / "shapes"


def test_an_api_wrapped_recipe_with_steps_reads_like_a_flat_one():
    # {"data": {"recipe": {...}}}, the command among a step's lines after an export, the image in a sentence
    # that names "the container" before "docker pull", the revision and settings in a setup paragraph
    doc = imported(SHAPES / "nested-steps-api.json")
    assert doc["name"] == "qwen3-coder-vllm" and doc["title"] == "Qwen3 Coder on one Spark"
    assert doc["engine"]["image"] == "nvcr.io/nvidia/vllm:25.11-py3"
    assert doc["model"]["revision"] == "1f2e3d4c5b6a79881f2e3d4c5b6a79881f2e3d4c"
    assert doc["serve"]["env"] == {"VLLM_ATTENTION_BACKEND": "FLASHINFER"}  # the snippet's export
    ignored = [p["detail"] for p in doc["provenance"] if p["how"] == "ignored"]
    # an unconditional setting outside the environment fields is reported, not applied; conditional ones neither
    assert len(ignored) == 1 and "TOKENIZERS_PARALLELISM=false" in ignored[0]
    assert "NCCL_IB_DISABLE" not in ignored[0] and "VLLM_SLEEP" not in ignored[0]
    assert "data" not in doc["extra"] and doc["extra"]["rating"] == 4.5
    fixed = imported(SHAPES / "nested-steps-api.json", "serve.env.TOKENIZERS_PARALLELISM=false")
    assert fixed["serve"]["env"]["TOKENIZERS_PARALLELISM"] == "false"  # text, as an environment holds


def test_a_command_deep_in_the_object_is_found(tmp_path):
    deep = {"cmd": "vllm serve o/m --port 8002"}
    for key in "hgfedcba":
        deep = {key: deep}
    assert web(tmp_path, {**deep, "image": "v/v:1"})["serve"]["port"] == 8002


def test_an_export_whose_value_the_shell_would_expand_is_not_carried(tmp_path):
    doc = web(tmp_path, {"title": "t", "image": "v/v:1", "run": "export HF_HOME=$(pwd)/hf\nvllm serve o/m --port 8000"})
    assert doc["serve"]["env"] == {}


def test_a_hostile_title_and_env_names_are_made_safe_and_reported(tmp_path):
    doc = web(
        tmp_path,
        {
            "title": "evil\n---\nschema: x\u0000 {{ lookup('pipe','id') }}\u2028end",
            "command": "vllm serve org/model --port 8000",
            "image": "nvcr.io/nvidia/vllm:25.11-py3",
            "env": {"A": "1", "BAD NAME": "x", "X": "$(id)"},
        },
    )
    assert doc["title"] == "evil --- schema: x {{ lookup('pipe','id') }} end"
    assert model.from_yaml(model.to_yaml(doc), "t") == doc  # the file loads back
    assert doc["serve"]["env"] == {"A": "1", "X": "$(id)"}  # the value is text: nothing runs it
    assert any(p["how"] == "ignored" and "'BAD NAME'" in p["detail"] for p in doc["provenance"])


@pytest.mark.parametrize(
    ("data", "says"),
    [
        ({"env": {"A": "1\nB=2"}}, r"serve.env.A holds a control character"),
        ({"command": "vllm serve o/m --served-model-name 'a\nb'"}, r"serve.args\[1\] holds a control character"),
        ({"command": "vllm serve o/m --nnodes 2"}, "cannot be planned as written: .*--nnodes"),
    ],
)
def test_what_could_never_start_is_refused_at_import(tmp_path, data, says):
    path = tmp_path / "site.json"
    path.write_text(json.dumps({"command": "vllm serve o/m", "image": "v/v:1", **data}))
    with pytest.raises(BadInput, match=says) as caught:
        imported(path)
    assert str(caught.value).startswith(f"{path}: ")


def test_launcher_toml_states_data_and_expert_parallel_as_keys(tmp_path):
    path = tmp_path / "recipe.toml"
    path.write_text(
        'engine = "vllm"\nname = "dp2"\ndocker_image = "v/v:1"\nmodel = "Qwen/Qwen3-30B-A3B-FP8"\n'
        "required_nodes = 2\ntensor_parallel_size = 1\ndata_parallel_size = 2\nenable_expert_parallel = true\n"
    )
    doc = imported(path)
    assert doc["serve"]["args"] == ["--data-parallel-size", "2", "--enable-expert-parallel"]
    assert doc["topology"]["expert_parallel"] == 2 and "data_parallel_size" not in doc["extra"]
    leader, worker = plan_of(doc, 2)["ranks"]
    assert contains_run(leader["argv"], ["--data-parallel-size-local", "1"])
    assert contains_run(worker["argv"], ["--data-parallel-start-rank", "1", "--headless"])
    path.write_text(path.read_text().replace("data_parallel_size = 2\n", ""))
    with pytest.raises(BadInput, match=r"cannot be planned as written: .*does not match the 2 node"):
        imported(path)  # two nodes and nothing to spread over them


def test_sparkrun_expert_parallel_spans_data_parallel_and_the_speculator_is_mirrored():
    doc = imported(SPARKRUN / "qwen3-235b-dp2-ep-eagle.yaml")
    # sparkrun's vLLM flag map has no enable_expert_parallel: sparkrun leaves it out, so does sparkplay, and says so
    assert doc["topology"]["nodes"] == 2 and doc["topology"]["expert_parallel"] == 1
    assert "--enable-expert-parallel" not in doc["serve"]["args"]
    assert [c["role"] for c in doc["model"]["checkpoints"]] == ["target", "drafter"]
    left = doc["extra"]["sparkrun_not_honoured"]
    assert set(left) == {"mods", "build_args", "defaults"} and left["defaults"] == {"enable_expert_parallel": True}
    spec = plan_of(doc, 2)["ranks"][0]["argv"]
    assert f"{ROOT}/RedHatAI--Qwen3-235B-A22B-speculator.eagle3" in spec[spec.index("--speculative-config") + 1]


def test_a_gguf_path_on_the_authors_machine_is_the_file_in_the_mirrored_checkpoint():
    doc = imported(SPARKRUN / "gpt-oss-gguf-container-path.yaml")
    assert doc["model"]["path"] == "ggml-org--gpt-oss-20b-GGUF/gpt-oss-20b-mxfp4.gguf"
    assert any(p["key"] == "model.path" and p["how"] == "cleaned" for p in doc["provenance"])
    (leader,) = plan_of(doc, 1)["ranks"]
    assert f"{ROOT}/ggml-org--gpt-oss-20b-GGUF/gpt-oss-20b-mxfp4.gguf" in leader["argv"]


BOMB = "a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{n}: &{n} [{', '.join([f'*{p}'] * 10)}]\n" for p, n in zip("abcdefgh", "bcdefghi", strict=True)
)  # a billion values in 400 bytes


@pytest.mark.parametrize(
    ("name", "text", "says"),
    [
        ("deep.json", '{"command": "vllm serve o/m", "n": ' + "[" * 50_000 + "]" * 50_000 + "}", "nested too deeply"),
        ("deep.toml", 'engine = "vllm"\nn = ' + "[" * 50_000 + "]" * 50_000 + "\n", "nested too deeply"),
        ("deep.yaml", 'recipe_version: "2"\nn: ' + "[" * 50_000 + "]" * 50_000 + "\n", "nested too deeply"),
        ("bomb.yaml", 'recipe_version: "2"\nmodel: o/m\nruntime: vllm\ncontainer: v/v:1\n' + BOMB, "more than 100000"),
    ],
)
def test_documents_built_to_exhaust_the_parser_are_one_line_errors(tmp_path, name, text, says):
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(BadInput, match=says) as caught:
        imported(path)
    assert str(caught.value).startswith(f"{path} ")


def test_a_catalog_file_that_expands_without_end_is_named_not_loaded(tmp_path):
    (tmp_path / "bomb.yml").write_text(f"schema: {model.SCHEMA_ID}\nname: bomb\n{BOMB}")
    with pytest.raises(BadInput, match=r"bomb.yml is not a recipe: it holds more than"):
        catalog.load(tmp_path, "bomb")


@pytest.mark.parametrize(
    ("fixture", "image", "env", "port"),
    [
        # Kubernetes-like: argv words in a container spec, env as [{name, value}], the image beside them
        ("container-spec.json", "vllm/vllm-openai:v0.11.0", {"VLLM_LOGGING_LEVEL": "DEBUG"}, 8003),
        # Compose-like: the command under a service, its image and environment beside it
        ("compose-services.json", "nvcr.io/nvidia/vllm:25.11-py3", {"HF_HUB_ENABLE_HF_TRANSFER": "1"}, 8004),
    ],
)
def test_image_and_env_are_read_beside_a_nested_command(fixture, image, env, port):
    doc = imported(SHAPES / fixture)
    assert doc["engine"]["image"] == image and doc["serve"]["env"] == env and doc["serve"]["port"] == port


def test_env_as_a_list_of_assignments(tmp_path):
    doc = web(tmp_path, {"command": "vllm serve o/m", "image": "v/v:1", "env": ["A=1", "B=x=y"]})
    assert doc["serve"]["env"] == {"A": "1", "B": "x=y"}


def test_apply_asks_when_the_chosen_recipe_changed_since_it_was_applied(tmp_path):
    project, inventory = apply_project(tmp_path)
    source = tmp_path / "site.json"
    source.write_text(
        json.dumps({"title": "t", "command": "vllm serve o/m -tp 2 --max-model-len 8192", "image": "v/v:1"})
    )
    assert run_cli("recipe", "import", str(source), "--name", "mine", "--project-dir", str(project)).returncode == 0
    first = run_cli("apply", "mine", "-i", str(inventory), "--project-dir", str(project), "--dry-run")
    target = inventory / "group_vars" / "all" / "sparkplay.yml"
    target.parent.mkdir(parents=True, exist_ok=True)  # what apply records before it runs the playbooks
    target.write_text(apply_mod.render(catalog.load(project / "recipes", "mine"), {}))
    assert first.returncode == 0
    same = run_cli("apply", "mine", "-i", str(inventory), "--project-dir", str(project), "--dry-run")
    assert "unchanged" in same.stdout, same.stdout + same.stderr
    source.write_text(source.read_text().replace("8192", "16384"))
    assert (
        run_cli("recipe", "import", str(source), "--name", "mine", "--yes", "--project-dir", str(project)).returncode
        == 0
    )
    changed = run_cli("apply", "mine", "-i", str(inventory), "--project-dir", str(project), "--dry-run")
    assert changed.returncode == 0 and "recipe mine: its content changed since it was applied" in changed.stdout
    assert "comments" not in changed.stdout


# -- the registries' grammar, as their owners apply it ---------------------------------------------------------


def test_eugrs_version_1_template_is_str_format_so_doubled_braces_are_literal_json():
    """eugr's run-recipe.py fills the command with str.format: `{{...}}` is JSON with single braces. The image
    it builds itself (build-and-copy.sh) is said to be built, never taken for a published image."""
    doc = imported(SPARKRUN / "eugr-v1-escaped-braces.yaml")
    args = doc["serve"]["args"]
    assert json.loads(argv.flag_value(args, "--compilation-config")) == {
        "cudagraph_mode": "FULL_AND_PIECEWISE",
        "custom_ops": ["all"],
    }
    assert json.loads(argv.flag_value(args, "--default-chat-template-kwargs")) == {"thinking": True}
    assert doc["speculative"] == {"method": "mtp", "num_tokens": 3, "draft_model": None}
    assert doc["context_length"] == 65536 and doc["topology"]["nodes"] == 2 and doc["topology"]["tensor_parallel"] == 2
    assert doc["knobs"] == {"gpu_memory_utilization": 0.8}
    assert "build it under that tag on every node" in notes(doc, "ignored")["engine.image"]
    assert "Dockerfile.mxfp4" in notes(doc, "ignored")["engine.image"]
    assert doc["serve"]["bind"] == "127.0.0.1" and "serve.bind" in notes(doc, "narrowed")
    # the engine is told the name it would have served the model under (sparkplay serves it from a path)
    leader = plan_of(doc, 2)["ranks"][0]["argv"]
    assert contains_run(leader, ["--served-model-name", "example-org/gemma-like-26b-it"])


@pytest.mark.parametrize(
    ("template", "values", "expected"),
    [
        ("--c '{{\"a\": {n}}}'", {"n": 1}, "--c '{\"a\": 1}'"),  # doubled braces, a field inside
        ("-x {v!r} {w:>3}", {"v": "s", "w": 7}, "-x 's'   7"),  # conversions and specs, as str.format
        ("--flag {on}", {"on": True}, "--flag True"),  # str.format's own rendering of a boolean
    ],
)
def test_the_version_1_template_follows_str_format(template, values, expected):
    from sparkplay.recipes.importers.sparkrun.recipe import expand

    assert expand(template, values, "w", "1") == expected


@pytest.mark.parametrize(
    ("template", "expected"),
    [
        (
            "--c '{\"a\": 1}' --n {n}",
            "--c '{\"a\": 1}' --n 2",
        ),  # single-brace JSON: eugr's runner fails, sparkrun fills
        ("--c '{' --n {n}", "--c '{' --n 2"),  # a lone brace: str.format cannot parse it; sparkrun leaves it
        ("--c '{{\"a\": {n}}}' '{\"b\": 1}'", "--c '{\"a\": 2}' '{\"b\": 1}'"),  # both conventions: sparkrun's
    ],
)
def test_a_version_1_template_str_format_cannot_fill_is_filled_as_sparkrun_runs_it(template, expected):
    """Version 1 recipes live in sparkrun's registries too (runtime vllm-distributed and the like): what eugr's
    str.format cannot fill, sparkrun's rule does, as sparkrun runs it; the import says which rule filled it."""
    from sparkplay.recipes.importers.sparkrun.recipe import expand

    assert expand(template, {"model": "o/m", "n": 2}, "w", "1") == expected


@pytest.mark.parametrize("template", ["--x {model.__class__}", "--x {nope}", "--c '{\"a\": 1}' {nope}"])
def test_a_version_1_placeholder_nothing_defines_is_refused_by_either_rule(template):
    from sparkplay.recipes.importers.sparkrun.recipe import expand

    with pytest.raises(BadInput, match=r"the command uses \{(model\.__class__|nope)\}, which defaults does not define"):
        expand(template, {"model": "o/m"}, "w", "1")


def test_a_version_1_recipe_written_for_sparkrun_imports_and_says_which_rule_filled_it(tmp_path):
    source = tmp_path / "r.yaml"
    command = 'vllm serve {model} --port {port} --speculative-config \'{"method":"mtp","num_speculative_tokens":2}\''
    source.write_text(
        yaml.safe_dump({**BASE, "recipe_version": "1", "runtime": "vllm-distributed", "command": command})
    )
    doc = imported(source)
    assert doc["speculative"] == {"method": "mtp", "num_tokens": 2, "draft_model": None}
    said = [p["detail"] for p in doc["provenance"] if p["key"] == "serve.args"]
    assert any("filled by sparkrun's rule" in d for d in said)


def test_sparkruns_own_placeholders_take_any_key_and_leave_json_alone():
    """sparkrun (render_template over vpd's arg_substitute): a `{key}` span with no brace inside, key stripped
    of braces, filled where defined, repeatedly; hyphens in a key are fine; JSON stays JSON, and a placeholder
    nested in it resolves."""
    from sparkplay.recipes.importers.sparkrun.recipe import expand

    values = {"max-model-len": 8192, "a.b": "x", "nested": "{max-model-len}", "n": 3}
    assert expand("--l {max-model-len} {a.b} {nested}", values, "w") == "--l 8192 x 8192"
    assert expand("""-j '{"t": 0.6}' -k '{"a":{"b":{n}}}'""", values, "w") == """-j '{"t": 0.6}' -k '{"a":{"b":3}}'"""
    assert expand("awk '{print $1}' ${HOME} {", values, "w") == "awk '{print $1}' ${HOME} {"  # lone braces
    with pytest.raises(BadInput, match=re.escape("uses {max-len}")):
        expand("--l {max-len}", values, "w")


@pytest.mark.parametrize("version", ["2", "3", "4"])
def test_a_template_holding_doubled_braces_is_in_the_escape_convention_whatever_its_version(version):
    """sparkrun reads the convention off the template (`{{` cannot occur in JSON): each `{{`/`}}` is one brace,
    a placeholder inside the escaped JSON still resolves, and the plain JSON beside it keeps its braces."""
    from sparkplay.recipes.importers.sparkrun.recipe import expand

    template = """--s '{{"method":"dspark","num_speculative_tokens":{k},"a":1}}' -j '{"t": 0.6}'"""
    got = expand(template, {"k": 5}, "w", version)
    assert got == """--s '{"method":"dspark","num_speculative_tokens":5,"a":1}' -j '{"t": 0.6}'"""


def test_a_default_in_the_escape_convention_has_its_braces_collapsed(tmp_path):
    source = tmp_path / "r.yaml"
    source.write_text(
        yaml.safe_dump(
            {
                **BASE,
                "defaults": {"port": 8000, "cc": '{{"mode": "FULL"}}'},
                "command": "vllm serve {model} --port {port} --compilation-config '{cc}'",
            }
        )
    )
    args = imported(source)["serve"]["args"]
    assert json.loads(argv.flag_value(args, "--compilation-config")) == {"mode": "FULL"}


@pytest.mark.parametrize("version", ["2", "3", "4"])
def test_sparkrun_versions_2_to_4_read_alike(version, tmp_path):
    text = (
        (SPARKRUN / "sparkrun-v3-hyphen-path.yaml")
        .read_text()
        .replace('recipe_version: "3"', f'recipe_version: "{version}"')
    )
    path = tmp_path / "embedder.yaml"
    path.write_text(text)
    doc = imported(path)
    # a placeholder with a hyphen is filled; a small memory fraction (a shared node) is the engine's to take
    assert doc["context_length"] == 8192 and doc["knobs"] == {"gpu_memory_utilization": 0.3}
    # the command serves a local path: the recipe's `model` is the repository, served under the path's name
    assert doc["model"]["repo"] == "example-org/embedder-8b"
    assert doc["model"]["served_name"] == "/models/embedder"
    assert "serves the local path /models/embedder" in notes(doc, "derived")["model.repo"]
    assert json.loads(argv.flag_value(doc["serve"]["args"], "--override-generation-config")) == {"temperature": 0.0}
    leader = plan_of(doc, 1)["ranks"][0]["argv"]
    assert leader[1] == f"{ROOT}/example-org--embedder-8b"
    assert contains_run(leader, ["--served-model-name", "/models/embedder"])


def test_a_hub_cache_snapshot_path_names_and_pins_the_repository(tmp_path):
    doc = imported(SPARKRUN / "sparkrun-v4-hf-snapshot.yaml")
    assert doc["model"]["repo"] == "example-org/coder-30b"
    assert doc["model"]["revision"] == "0123456789abcdef0123456789abcdef01234567"
    assert doc["model"]["checkpoints"][0]["revision"] == doc["model"]["revision"]
    assert doc["model"]["served_name"] == "coder"
    path = tmp_path / "pinned-otherwise.yaml"
    path.write_text((SPARKRUN / "sparkrun-v4-hf-snapshot.yaml").read_text() + "model_revision: fedcba9876543210\n")
    with pytest.raises(BadInput, match="at commit 0123456789abcdef0123456789abcdef01234567 but the recipe pins"):
        imported(path)


@pytest.mark.parametrize(
    ("command", "env", "pinning"),
    [
        (
            "export VLLM_X=1 HF_HUB_OFFLINE=1; exec vllm serve {model} --port {port}",
            {"VLLM_X": "1", "HF_HUB_OFFLINE": "1"},
            None,
        ),
        (
            "export VLLM_X=1 &&\nNCCL_DEBUG=WARN\nvllm serve {model} --port {port}",
            {"VLLM_X": "1", "NCCL_DEBUG": "WARN"},
            None,
        ),
        ("taskset -c 0-9 vllm serve {model} --port {port}", {}, "taskset -c 0-9"),
        ("numactl --cpunodebind=0 -m 0 vllm serve {model} --port {port}", {}, "numactl --cpunodebind=0 -m 0"),
    ],
)
def test_an_exported_preamble_is_the_environment_and_cpu_pinning_is_named(tmp_path, command, env, pinning):
    path = tmp_path / "pre.yaml"
    path.write_text(yaml.safe_dump({**BASE, "command": command}))
    doc = imported(path)
    assert {k: doc["serve"]["env"].get(k) for k in env} == env
    assert doc["model"]["repo"] == BASE["model"] and doc["serve"]["port"] == 8000
    if pinning:
        assert f"under `{pinning}`" in notes(doc, "ignored")["serve.args"]
    else:
        assert "serve.args" not in notes(doc, "ignored")


@pytest.mark.parametrize(
    ("config", "method"),
    [
        ({"model": "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B", "num_speculative_tokens": 3}, "eagle3"),
        ({"model": "yuhuili/EAGLE-LLaMA3-Instruct-8B", "num_speculative_tokens": 3}, "eagle"),
        ({"model": "Org/small-draft", "num_speculative_tokens": 4}, "auto"),  # the draft's own config decides
    ],
)
def test_a_speculative_config_without_a_method_is_read_as_vllm_detects_it(tmp_path, config, method):
    path = tmp_path / "spec.yaml"
    command = f"vllm serve {{model}} --port {{port}} --speculative-config '{json.dumps(config)}'"
    path.write_text(yaml.safe_dump({**BASE, "command": command}))
    doc = imported(path)
    assert doc["speculative"] == {
        "method": method,
        "num_tokens": config["num_speculative_tokens"],
        "draft_model": config["model"],
    }
    assert config["model"] in [c["repo"] for c in doc["model"]["checkpoints"]]
    assert "names no method" in notes(doc, "derived")["speculative.method"]
    planned = json.loads(argv.flag_value(plan_of(doc, 1)["ranks"][0]["argv"], "--speculative-config"))
    assert "method" not in planned and planned["model"].startswith(ROOT + "/")  # as written, from the mirror
    path.write_text(
        yaml.safe_dump({**BASE, "command": command.replace(json.dumps(config), '{"num_speculative_tokens": 2}')})
    )
    with pytest.raises(BadInput, match="neither a method nor a draft model: vLLM refuses it too"):
        imported(path)


@pytest.mark.parametrize(
    ("defaults", "method", "tokens"),
    [
        ({"speculative": True}, "mtp", None),
        ({"speculative": True, "num_drafts": 2}, "mtp", 2),
        ({"ngram_speculative": True}, "ngram", None),
        ({"speculative": False}, None, None),
    ],
)
def test_atlas_speculative_switches_show_in_the_recipe(tmp_path, defaults, method, tokens):
    """An Atlas recipe's `speculative: true` is a switch the engine gets; `show` and `diff` read it too."""
    path = tmp_path / "atlas.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "recipe_version": "2",
                "model": "Org/M-FP8",
                "runtime": "atlas",
                "container": "avarok/atlas-gb10:2026.11",
                "max_nodes": 1,
                "defaults": {"port": 8888, "max_model_len": 65536, **defaults},
            }
        )
    )
    doc = imported(path)
    if method is None:
        assert doc["speculative"] is None and "--speculative" not in doc["serve"]["args"]
    else:
        assert doc["speculative"] == {"method": method, "num_tokens": tokens, "draft_model": None}


# -- Atlas: the image family decides how ranks start ------------------------------------------------------------


def test_the_atlas_gb10_family_starts_every_rank_with_rank_flags_and_reads_the_mirror_as_a_hub_cache():
    doc = imported(SPARKRUN / "atlas-gb10-ep2.yaml")
    assert doc["topology"]["nodes"] == 2 and doc["model"]["served_name"] == "moe-230b"
    assert "fabric_siblings" not in doc["knobs"]  # the SparkGLM profile's knobs are not this family's
    deployment = plan_of(doc, 2)
    leader, worker = deployment["ranks"]
    for rank in (leader, worker):
        assert contains_run(rank["container_options"], ["--entrypoint", "spark"])
        assert rank["argv"][:2] == ["serve", "example-org/moe-230b-nvfp4"]
        assert rank["argv"][-8:] == [
            "--rank",
            str(rank["rank"]),
            "--world-size",
            "2",
            "--master-addr",
            "192.168.100.10",
            "--master-port",
            "29500",
        ]
        assert rank["env"]["HF_HUB_OFFLINE"] == "1" and rank["env"]["HF_HOME"] == "/sparkplay-hf"
        snapshot = next(m for m in rank["mounts"] if "/snapshots/" in m["target"])
        assert snapshot == {
            "source": f"{ROOT}/example-org--moe-230b-nvfp4",
            "readonly": True,
            "target": "/sparkplay-hf/hub/models--example-org--moe-230b-nvfp4/snapshots/sparkplay-mirror",
        }
    # only rank 0 serves HTTP, on the port the plan says; the other binds none (sparkrun's --port 0)
    assert contains_run(leader["argv"], ["--host", "127.0.0.1", "--port", "8888"]) and leader["listen"]
    assert contains_run(worker["argv"], ["--port", "0"]) and worker["listen"] == []
    assert "--host" not in worker["argv"]
    assert leader["peer_ports"] == [29500] and worker["peer_ports"] == []
    assert leader["files"] == [
        {
            "path": "/etc/sparkplay/atlas-hf-ref.example-org--moe-230b-nvfp4",
            "content": "sparkplay-mirror",
            "mode": "0644",
        }
    ]


def test_an_atlas_gb10_recipe_without_a_served_name_answers_under_its_model_and_solo_has_no_rank_flags():
    doc = imported(SPARKRUN / "qwen35-atlas-solo.yaml")
    assert doc["model"]["served_name"] == "Sehyo/Qwen3.5-35B-A3B-NVFP4"
    (leader,) = plan_of(doc, 1)["ranks"]
    assert contains_run(leader["argv"], ["--model-name", "Sehyo/Qwen3.5-35B-A3B-NVFP4"])
    assert "--rank" not in leader["argv"]
    drafts = [m["target"] for m in leader["mounts"] if "qwen3.5-35b-a3b-nvfp4-draft" in m["target"]]
    assert len(drafts) == 2  # the draft model is a cache entry too (snapshot and ref)


@pytest.mark.parametrize(
    ("image", "knobs", "says"),
    [
        ("ghcr.io/enntity/atlas-sparkglm:1", {}, "is an Atlas sparkglm image, but the recipe's command is the gb10"),
        ("avarok/atlas-gb10:2026.11", {"kv_shard": True}, "knob kv_shard is read by the SparkGLM Atlas images"),
    ],
)
def test_an_atlas_image_of_the_other_family_or_a_profile_knob_elsewhere_is_refused(image, knobs, says):
    doc = imported(SPARKRUN / "atlas-gb10-ep2.yaml")
    doc["engine"]["image"] = image
    with pytest.raises(BadInput, match=says):
        build(doc, nodes(2), Options(model_root=ROOT, knobs=knobs, trusted_images=("*",)))


def test_an_atlas_image_from_another_namespace_is_its_commands_family_and_set_trips_on_nothing():
    """Issue 40: recognised by what it is (`spark serve`: the GB10 family), not by a list of repositories;
    --set engine.image changes no field the import derived (no SparkGLM profile knob was filled)."""
    other = "ghcr.io/atlas-inf/atlas-gb10:sha-5d1c0a7"
    doc = imported(SPARKRUN / "atlas-gb10-ep2.yaml", f"engine.image={other}")
    assert doc["engine"]["family"] == "gb10" and "fabric_siblings" not in doc["knobs"]
    deployment = build(doc, nodes(2), Options(model_root=ROOT, trusted_images=("*",)))
    assert other in json.dumps(deployment) and len(deployment["ranks"]) == 2


# -- SGLang ----------------------------------------------------------------------------------------------------


def test_golden_sglang_plan_over_two_nodes():
    """Every rank runs the same launch_server line with --nnodes/--node-rank/--dist-init-addr; rank 0 alone
    answers the API; the model is the mirrored checkpoint, served under the name SGLang would give it."""
    doc = imported(SPARKRUN / "sglang-2node-tp2.yaml")
    assert doc["engine"]["name"] == "sglang" and doc["engine"]["image"] == "scitrera/dgx-spark-sglang:0.5.9"
    assert doc["topology"]["nodes"] == 2 and doc["topology"]["tensor_parallel"] == 2
    assert doc["context_length"] == 32768 and doc["knobs"] == {"gpu_memory_utilization": 0.8}
    assert doc["model"]["served_name"] == "example-org/moe-120b-nvfp4"
    deployment = plan_of(doc, 2)
    target = f"{ROOT}/example-org--moe-120b-nvfp4"
    leader, worker = deployment["ranks"]
    common = [
        "-m",
        "sglang.launch_server",
        "--model-path",
        target,
        "--mem-fraction-static",
        "0.8",
        "--context-length",
        "32768",
        "--tp",
        "2",
        "--cuda-graph-bs",
        "1",
        "2",
        "4",
        "8",
        "--trust-remote-code",
        "--served-model-name",
        "example-org/moe-120b-nvfp4",
    ]
    for rank, planned in enumerate((leader, worker)):
        where = ["--nnodes", "2", "--node-rank", str(rank), "--dist-init-addr", "192.168.100.10:25000"]
        assert planned["argv"] == [*common, "--host", "127.0.0.1", "--port", "8000", *where]
    assert contains_run(leader["container_options"], ["--entrypoint", "python3"])
    assert leader["listen"] == [{"address": "127.0.0.1", "port": 8000}] and worker["listen"] == []
    assert leader["peer_ports"] == [25000] and worker["peer_ports"] == []
    assert leader["env"]["HF_HUB_OFFLINE"] == "1" and leader["env"]["TORCH_NCCL_ASYNC_ERROR_HANDLING"] == "1"
    assert deployment["parallel"] == {"tensor": 2, "pipeline": 1, "data": 1, "backend": "sglang"}
    assert {r["path"] for r in deployment["requires"]} == {target}
    # executor_config user: root is the container's user, mapped (not left unsaid)
    assert doc["serve"]["container_user"] == "root" and "extra.sparkrun_not_honoured.executor_config" not in notes(
        doc, "ignored"
    )
    assert contains_run(leader["container_options"], ["--user", "root"])


def test_golden_sglang_plan_on_one_node_from_defaults_with_a_mirrored_draft():
    doc = imported(SPARKRUN / "sglang-solo-defaults.yaml")
    assert doc["speculative"] is None  # no algorithm named: SGLang speculates only when told to
    assert any(c["repo"] == "example-org/dense-8b-eagle3" for c in doc["model"]["checkpoints"])
    (leader,) = plan_of(doc, 1)["ranks"]
    assert leader["argv"][:4] == ["-m", "sglang.launch_server", "--model-path", f"{ROOT}/example-org--dense-8b"]
    assert contains_run(leader["argv"], ["--speculative-draft-model-path", f"{ROOT}/example-org--dense-8b-eagle3"])
    assert contains_run(leader["argv"], ["--mem-fraction-static", "0.5"])
    assert contains_run(leader["argv"], ["--served-model-name", "dense"]) and "--nnodes" not in leader["argv"]
    doc["knobs"]["gpu_memory_utilization"] = 0.3  # the knob sets SGLang's own fraction, in place
    (leader,) = plan_of(doc, 1)["ranks"]
    assert argv.flag_value(leader["argv"], "--mem-fraction-static") == "0.3"


@pytest.mark.parametrize(
    ("change", "says"),
    [
        (["--nnodes", "3"], "set --nnodes, which sparkplay sets per rank"),
        (["--tp-size", "4"], "tensor 4 x pipeline 1 = 4 GPUs) does not match the 2 node(s)"),
        (["--api-key", "sk-1"], "--api-key on the command line"),
    ],
)
def test_an_sglang_recipe_sparkplay_cannot_start_as_written_is_refused(change, says):
    doc = imported(SPARKRUN / "sglang-2node-tp2.yaml")
    doc["serve"]["args"] = [a for a in doc["serve"]["args"] if a not in ("--tp", "2")] + change
    with pytest.raises(BadInput, match=re.escape(says)):
        plan_of(doc, 2)


@pytest.mark.parametrize(
    ("text", "length"),
    [("32768", 32768), ("32k", 32000), ("32K", 32768), ("25.6k", 25600), ("1M", 1048576), ("auto", None), ("-1", None)],
)
def test_vllms_context_flag_is_read_by_vllms_own_grammar(tmp_path, text, length):
    """vLLM reads --max-model-len as a human-readable integer, or auto/-1 (as long as memory allows)."""
    path = tmp_path / "ctx.yaml"
    path.write_text(yaml.safe_dump({**BASE, "command": f"vllm serve {{model}} --port {{port}} --max-model-len {text}"}))
    doc = imported(path)
    assert doc["context_length"] == length
    if length is None:
        assert "sizes the context to the memory" in notes(doc, "derived")["context_length"]
        assert argv.flag_value(plan_of(doc, 1)["ranks"][0]["argv"], "--max-model-len") == text  # as written
    for bad in ("32.5K", "lots"):
        path.write_text(yaml.safe_dump({**BASE, "command": f"vllm serve {{model}} --max-model-len {bad}"}))
        with pytest.raises(BadInput, match="--max-model-len has a value the engine does not read"):
            imported(path)


def test_every_served_name_is_kept_and_shown(tmp_path):
    """vLLM's --served-model-name takes several names and answers to each: the recipe keeps them all, and a
    changed second name shows in the diff."""
    from sparkplay.recipes.diff import semantic_diff

    path = tmp_path / "names.yaml"
    command = "vllm serve {model} --served-model-name coder coder-latest gpt-4o-mini --port {port}"
    path.write_text(yaml.safe_dump({**BASE, "command": command}))
    doc = imported(path)
    assert doc["model"]["served_name"] == "coder"
    assert doc["model"]["served_aliases"] == ["coder-latest", "gpt-4o-mini"]
    leader = plan_of(doc, 1)["ranks"][0]["argv"]
    assert contains_run(leader, ["--served-model-name", "coder", "coder-latest", "gpt-4o-mini"])
    changed = copy.deepcopy(doc)
    changed["model"]["served_aliases"] = ["coder-latest"]
    assert any("served_aliases" in line for line in semantic_diff(doc, changed))


@pytest.mark.parametrize(
    "names",
    [["dense", "dense-latest"], ["dense", "a", "b"]],
)
def test_sglang_serves_one_name_and_the_others_a_source_lists_are_named_as_left_out(tmp_path, names):
    """SGLang's --served-model-name is one string (ServerArgs.served_model_name): its parser refuses a second
    name as an unrecognised argument. The first is served, the rest named, none kept as an alias or in argv."""
    path = tmp_path / "sglang-names.yaml"
    command = (
        f"python3 -m sglang.launch_server --model-path {{model}} --served-model-name {' '.join(names)} --port 30000"
    )
    path.write_text(yaml.safe_dump({**BASE, "runtime": "sglang", "command": command}))
    doc = imported(path)
    assert doc["model"]["served_name"] == "dense" and "served_aliases" not in doc["model"]
    said = notes(doc, "cleaned")["model.served_name"]
    assert f"lists {len(names)} names" in said and all(repr(n) in said for n in names[1:])
    (leader,) = plan_of(doc, 1)["ranks"]
    at = leader["argv"].index("--served-model-name")
    assert leader["argv"][at + 1] == "dense" and not set(names[1:]) & set(leader["argv"])
    assert leader["argv"][at + 2].startswith("--")


def test_a_benchmark_block_is_the_recipes_own_bench_profile():
    """sparkrun's benchmark block (explicit args, other keys swept in) becomes the recipe's bench profile,
    what the bench playbook measures unless told otherwise; what sparkplay's bench does not take is named."""
    from sparkplay.bench import profile_variables
    from tests.role_render import render, role_vars

    doc = imported(SPARKRUN / "with-benchmark-block.yaml")
    assert doc["bench"] == {"pp": [2048], "tg": [32, 128], "concurrency": [1, 2, 5], "depth": [0]}
    assert "latency_mode" in notes(doc, "ignored")["extra.sparkrun_not_honoured.benchmark"]
    assert profile_variables(doc["bench"], "w") == {
        "bench_pp": [2048],
        "bench_tg": [32, 128],
        "bench_concurrency": [1, 2, 5],
        "bench_depth": [0],
    }
    given = role_vars("bench", sparkplay_recipe_plan=doc)
    assert [render(given[k], given) for k in ("bench_pp", "bench_tg", "bench_depth")] == [[2048], [32, 128], [0]]
    given = role_vars("bench", sparkplay_recipe_plan={**doc, "bench": None})  # no block: the defaults
    assert render(given["bench_concurrency"], given) == [1, 2, 4, 8]
    assert int(render(given["bench_runs"], given)) == 3


def test_an_atlas_gb10_plan_puts_no_recipe_text_in_its_cache_paths():
    """The hub cache a gb10 rank reads is named by sparkplay alone: a hostile pinned revision stays the
    checkpoint tool's business (the hub checks it), never a path in a mount or a file on the host."""
    doc = imported(SPARKRUN / "atlas-gb10-ep2.yaml")
    doc["model"]["checkpoints"][0]["revision"] = "../../../../usr/bin"
    leader = plan_of(doc, 2)["ranks"][0]
    assert all(".." not in m["target"] and ".." not in m["source"] for m in leader["mounts"])
    assert [f["content"] for f in leader["files"]] == ["sparkplay-mirror"]


def test_distribution_config_entries_are_names_or_mappings_and_templates_like_the_command(tmp_path):
    """sparkrun's DistributionConfig: an entry is a string or {name, revision}, and its name is rendered with the
    recipe's values ({model}, {container}, defaults), so "{model}" is the target, not a repository named so."""
    source = tmp_path / "r.yaml"
    entries = ["{model}", {"name": "{draft}", "revision": "abc123"}, "Org/Extra", "Org/Extra"]
    source.write_text(
        yaml.safe_dump(
            {
                **BASE,
                "defaults": {"port": 8000, "draft": "Org/Draft"},
                "distribution_config": {"models": {"entries": entries}},
            }
        )
    )
    got = [(c["repo"], c["revision"]) for c in imported(source)["model"]["checkpoints"]]
    assert got == [("Org/M", None), ("Org/Draft", "abc123"), ("Org/Extra", None)]


def test_a_continuation_broken_by_trailing_blanks_is_repaired_as_sparkrun_does(tmp_path):
    """`\\<blanks><newline>` would end the command in bash; sparkrun repairs it (utils/text.py) before the run,
    so the flags after it are the command's too. A line with no backslash at all stays a second command."""
    source = tmp_path / "r.yaml"
    command = "vllm serve {model} \\  \n  --port {port} \\\t\n  --max-num-seqs 4 \\\n  --enforce-eager\n"
    source.write_text(yaml.safe_dump({**BASE, "command": command}))
    args = imported(source)["serve"]["args"]
    assert contains_run(args, ["--max-num-seqs", "4"]) and "--enforce-eager" in args
    source.write_text(yaml.safe_dump({**BASE, "command": "vllm serve {model} --port {port}\n  --max-num-seqs 4\n"}))
    with pytest.raises(BadInput, match="the command ends before --max-num-seqs: a line without a trailing backslash"):
        imported(source)


def test_a_field_the_importer_does_not_read_is_said_on_one_line_unless_it_only_describes(tmp_path):
    """A registry's own fields (eugr's vetted_local_code, bind mounts under volumes, sparkrun's include) ask for
    something sparkplay does not apply: the import says so, naming the field; words about the recipe do not."""
    source = tmp_path / "r.yaml"
    source.write_text(
        yaml.safe_dump(
            {
                **BASE,
                "vetted_local_code": "../vetted/m",
                "volumes": ["~/m:/m:ro"],
                "executor": "docker",
                "description": "words",
                "maintainer": "me",
            }
        )
    )
    doc = imported(source)
    said = notes(doc, "ignored")
    assert "sparkplay does not read sparkrun's 'vetted_local_code'" in said["extra.vetted_local_code"]
    assert "~/m:/m:ro" in said["extra.volumes"]
    assert not {"extra.executor", "extra.description", "extra.maintainer"} & set(said)
    assert doc["extra"]["volumes"] == ["~/m:/m:ro"]  # kept, for the user to see


def test_container_settings_sparkplay_already_makes_are_not_reported_the_rest_mapped_or_said():
    """sparkrun's executor_config: what every sparkplay GPU container has (host network and IPC, all GPUs, the RDMA
    devices, IPC_LOCK, unlimited memlock) needs nothing, ssh is how sparkrun reaches hosts; resource limits and the
    user are mapped; a privileged container, another capability, device or mount is said, on one line."""
    from sparkplay.recipes.importers.sparkrun import executor as sparkrun_executor

    executor = {
        "shm_size": "64g",
        "ssh": {"user": "me"},
        "ulimit": ["memlock=-1:-1", "nofile=262144:262144"],
        "cap_add": ["IPC_LOCK"],
        "user": "root",
        "entrypoint": "",
        "auto_remove": False,
        "gpus": "all",
        "ipc": "host",
        "network": "host",
        "devices": ["/dev/infiniband:/dev/infiniband"],
    }
    read = sparkrun_executor.read(executor, "vllm")
    assert (read.ulimits, read.user, read.left) == (["nofile=262144:262144"], "root", {})
    hostile = {
        "privileged": True,
        "cap_add": ["IPC_LOCK", "SYS_ADMIN"],
        "ulimit": ["cpu=1"],
        "devices": ["/dev/kfd"],
        "user": "x;rm",
        "volumes": ["/:/host"],
    }
    read = sparkrun_executor.read(hostile, "atlas")
    assert read.left == {
        "privileged": True,
        "cap_add": ["SYS_ADMIN"],
        "ulimit": ["cpu=1"],
        "devices": ["/dev/kfd"],
        "user": "x;rm",
        "volumes": ["/:/host"],
    }
    assert sparkrun_executor.read({"user": "root", "shm_size": "8g"}, "llamacpp").left == {"user": "root"}  # native
