"""sparkrun's own rules, where a recipe's meaning depends on them (read from sparkrun 0.4.2's source and checked
against its rendering of the public registries: scripts/sparkrun_diff.py). Recipes here were written for these
tests; each case is a shape seen in the registries. Nothing touches a host: imports and plans are pure.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from sparkplay import importing
from sparkplay.engines.plan import Options, build, stand_in_nodes
from sparkplay.errors import BadInput
from sparkplay.recipes.importers.sparkrun import flags as sparkrun_flags
from tests.test_engines import contains_run


def recipe(tmp_path: Path, **fields: object) -> dict:
    path = tmp_path / "r.yaml"
    fields.setdefault("container", "vllm/vllm-openai:v0.20.0")
    path.write_text(yaml.safe_dump({"recipe_version": "2", **fields}, sort_keys=False))
    return importing.import_source(str(path))


def across_two(tmp_path: Path, command: str, **fields: object) -> dict:
    """A vllm-distributed recipe of org/m on two nodes running COMMAND."""
    return recipe(tmp_path, model="org/m", runtime="vllm-distributed", min_nodes=2, command=command, **fields)


def leader(doc: dict) -> dict:
    ranks = build(doc, stand_in_nodes(int(doc["topology"]["nodes"] or 1)), Options(model_root="/m", allow=None))
    return next(r for r in ranks["ranks"] if r["role"] == "leader")


def notes(doc: dict, how: str) -> dict[str, str]:
    return {n["key"]: n["detail"] for n in doc["provenance"] if n["how"] == how}


# -- a recipe with no command: sparkrun's flag maps ------------------------------------------------------------


def test_vllm_defaults_follow_sparkruns_map_switches_negation_and_json():
    args, unmapped = sparkrun_flags.generated_flags(
        "vllm",
        {
            "tensor_parallel": 2,
            "enable_prefix_caching": False,  # on by default in vLLM: sparkrun writes --no-
            "enforce_eager": False,  # off by default: nothing written
            "trust_remote_code": "yes",
            "speculative_config": {"method": "mtp", "num_speculative_tokens": 2},
            "compilation_config": ' {"cudagraph_mode": "FULL"} ',
            "spec_method": "dflash",  # no such key in sparkrun's map: left out, reported
        },
    )
    assert contains_run(args, ["-tp", "2"]) and "--no-enable-prefix-caching" in args
    assert "--enforce-eager" not in args and "--trust-remote-code" in args
    assert contains_run(args, ["--speculative-config", '{"method":"mtp","num_speculative_tokens":2}'])
    assert contains_run(args, ["--compilation-config", '{"cudagraph_mode": "FULL"}'])
    assert unmapped == ["spec_method"] and not any("spec" in a for a in args if a.startswith("--spec-"))


def test_llamacpp_atlas_and_sglang_defaults_as_sparkrun_writes_them():
    args, unmapped = sparkrun_flags.generated_flags(
        "llamacpp", {"max_model_len": 8192, "flash_attn": True, "mmap": False, "jinja": True}
    )
    assert contains_run(args, ["--ctx-size", "8192"]) and contains_run(args, ["--split-mode", "layer"])
    assert contains_run(args, ["--flash-attn", "on"]) and "--no-mmap" in args and "--jinja" in args
    assert unmapped == []
    args, _ = sparkrun_flags.generated_flags("atlas", {"exact_verify": True, "speculative": True, "auth_token": "t"})
    assert contains_run(args, ["--exact-verify", "true"]) and "--speculative" in args
    assert contains_run(args, ["--auth-token", "t"])  # sparkrun folds auth_token into api_key
    args, unmapped = sparkrun_flags.generated_flags("sglang", {"tensor_parallel": 2, "enable_dp_attention": 0})
    assert contains_run(args, ["--tp-size", "2"]) and "--enable-dp-attention" not in args and unmapped == []


@pytest.mark.parametrize(
    ("value", "meant"),
    [("true", True), ("off", False), ("auto", True), ("", False), ("0", False), (1, True), ("no", False)],
)
def test_a_switch_reads_its_value_as_sparkrun_does(value, meant):
    assert sparkrun_flags.truthy(value) is meant


def test_a_default_sparkrun_has_no_flag_for_is_not_passed_and_the_import_says_so(tmp_path):
    doc = recipe(tmp_path, model="org/m", runtime="vllm", defaults={"spec_tokens": 15, "max_model_len": 4096})
    assert "--spec-tokens" not in doc["serve"]["args"] and contains_run(
        doc["serve"]["args"], ["--max-model-len", "4096"]
    )
    assert doc["extra"]["sparkrun_not_honoured"]["defaults"] == {"spec_tokens": 15}
    assert "sparkrun leaves them out" in notes(doc, "ignored")["extra.sparkrun_not_honoured.defaults"]


# -- vLLM's back end and defaults -------------------------------------------------------------------------------


def test_ray_runtime_on_one_node_adds_no_ray_backend(tmp_path):
    doc = recipe(
        tmp_path, model="org/m", runtime="vllm-ray", min_nodes=1, max_nodes=1, command="vllm serve {model} --port 8000"
    )
    assert "--distributed-executor-backend" not in leader(doc)["argv"]


def test_a_backend_default_wins_over_the_commands_literal_flag(tmp_path):
    doc = across_two(
        tmp_path,
        "vllm serve {model} -tp 2 --distributed-executor-backend ray",
        defaults={"distributed_executor_backend": "mp"},
    )
    assert contains_run(doc["serve"]["args"], ["--distributed-executor-backend", "mp"])
    assert contains_run(leader(doc)["argv"], ["--nnodes", "2"])


def test_tensor_parallel_one_is_left_to_the_engine(tmp_path):
    doc = recipe(tmp_path, model="org/m", runtime="vllm", command="vllm serve {model} --max-model-len 4096")
    argv = leader(doc)["argv"]
    assert "--tensor-parallel-size" not in argv and "-tp" not in argv


# -- what the plan sets itself is said at import ----------------------------------------------------------------


def test_environment_the_plan_sets_per_node_is_noted_and_the_rest_passes(tmp_path):
    doc = across_two(
        tmp_path,
        "vllm serve {model} -tp 2",
        env={"NCCL_SOCKET_IFNAME": "enp1s0f0np0", "VLLM_HOST_IP": "10.0.0.1", "NCCL_DEBUG": "INFO"},
    )
    said = notes(doc, "overridden")
    assert set(said) == {"serve.env.NCCL_SOCKET_IFNAME", "serve.env.VLLM_HOST_IP"}
    assert "'enp1s0f0np0'" in said["serve.env.NCCL_SOCKET_IFNAME"]
    assert leader(doc)["env"]["NCCL_DEBUG"] == "INFO"


def test_atlas_profile_settings_reach_the_engine_through_its_profile_and_are_not_noted():
    doc = importing.import_source(str(Path(__file__).parents[1] / "recipes" / "glm53-atlas.yml"))
    assert not notes(doc, "overridden")


def test_llamacpp_metrics_flag_the_plan_adds_is_noted_once(tmp_path):
    doc = recipe(
        tmp_path,
        model="org/m-GGUF",
        runtime="llama-cpp",
        container=None,
        command="llama-server -m /models/m.gguf --port 8080",
    )
    assert "--metrics" in notes(doc, "added")["serve.args"] and "--metrics" in leader(doc)["argv"]
    doc = recipe(
        tmp_path,
        model="org/m-GGUF",
        runtime="llama-cpp",
        container=None,
        command="llama-server -m /models/m.gguf --port 8080 --metrics",
    )
    assert not notes(doc, "added") and leader(doc)["argv"].count("--metrics") == 1


def test_a_line_without_its_backslash_is_refused_naming_the_flags_cut_off(tmp_path):
    command = "vllm serve {model} \\\n  --max-model-len 4096\n  --enable-prefix-caching \\\n  --port 8000"
    with pytest.raises(BadInput, match=r"the command ends before --enable-prefix-caching: a line without"):
        recipe(tmp_path, model="org/m", runtime="vllm", command=command)


# -- the container's settings ------------------------------------------------------------------------------------


def test_resource_limits_and_user_reach_every_ranks_container_and_a_bent_one_is_refused(tmp_path):
    doc = across_two(
        tmp_path,
        "vllm serve {model} -tp 2",
        executor_config={
            "ulimit": ["memlock=-1:-1", "nofile=262144:262144", "stack=67108864"],
            "user": "root",
            "privileged": True,
        },
    )
    assert doc["serve"]["ulimits"] == ["nofile=262144:262144", "stack=67108864"]
    assert doc["extra"]["sparkrun_not_honoured"]["executor_config"] == {"privileged": True}
    assert "never privileged" in notes(doc, "ignored")["extra.sparkrun_not_honoured.executor_config"]
    ranks = build(doc, stand_in_nodes(2), Options(model_root="/m", allow=None))["ranks"]
    for rank in ranks:
        options = rank["container_options"]
        assert contains_run(options, ["--ulimit", "nofile=262144:262144"]) and "--privileged" not in options
        assert contains_run(options, ["--user", "root"]) and contains_run(options, ["--ulimit", "memlock=-1"])
        assert contains_run(rank["exec"], ["--ulimit", "stack=67108864"])
    for field, value in (("ulimits", ["nofile=1;reboot"]), ("container_user", "root --privileged")):
        bent = {**doc, "serve": {**doc["serve"], field: value}}
        with pytest.raises(BadInput, match=f"serve.{field}"):
            build(bent, stand_in_nodes(2), Options(model_root="/m", allow=None))


# -- issue 40: sparkrun's rules found wanting in recipes nobody here had seen ---------------------------------


@pytest.mark.parametrize(
    ("runtime", "container", "command", "flag"),
    [
        (
            "sglang",
            "lmsysorg/sglang:v0.5.9",
            "python3 -m sglang.launch_server --model-path {model} --tp 1",
            "--served-model-name",
        ),
        ("vllm", "vllm/vllm-openai:v0.20.0", "vllm serve {model} -tp 1", "--served-model-name"),
        ("llama-cpp", None, "llama-server -m /models/m.gguf -c 4096", "--alias"),
    ],
)
def test_a_served_name_in_defaults_is_appended_to_a_command_that_lacks_it(tmp_path, runtime, container, command, flag):
    """sparkrun's RuntimePlugin._augment_served_model_name: every runtime, fill policy."""
    fields = {"model": "org/m", "runtime": runtime, "defaults": {"served_model_name": "short"}, "command": command}
    if container:
        fields["container"] = container
    else:
        fields["container"] = "scitrera/dgx-spark-llama-cpp:1"
        fields["model"] = "org/m-GGUF"
    path = tmp_path / "r.yaml"
    path.write_text(yaml.safe_dump({"recipe_version": "2", **fields}, sort_keys=False))
    try:
        doc = importing.import_source(str(path))
    except BadInput as error:  # llama.cpp's -m on the author's disk: the alias was still read first
        assert runtime == "llama-cpp" and "model" in str(error)
        return
    assert contains_run(doc["serve"]["args"], [flag, "short"]) and doc["model"]["served_name"] == "short"
    assert "sparkrun appends" in notes(doc, "derived")["model.served_name"]


def test_a_served_name_the_command_states_is_kept(tmp_path):
    doc = recipe(
        tmp_path,
        model="org/m",
        runtime="vllm",
        defaults={"served_model_name": "short"},
        command="vllm serve {model} --served-model-name mine",
    )
    assert doc["model"]["served_name"] == "mine" and doc["serve"]["args"].count("--served-model-name") == 1


@pytest.mark.parametrize(
    ("runtime", "image"),
    [
        ("vllm", "ghcr.io/spark-arena/dgx-vllm-eugr-nightly-tf5:latest"),
        ("sglang", "scitrera/dgx-spark-sglang:latest"),
        ("trtllm", "nvcr.io/nvidia/tensorrt-llm/release:latest"),
    ],
)
def test_a_recipe_with_model_and_runtime_alone_runs_in_sparkruns_default_image_said(tmp_path, runtime, image):
    """sparkrun runs a recipe with no container in its DGX Spark platform's default for the runtime
    (platforms/dgx_spark.py): so does the import, saying so (a moving tag: apply pins its digest)."""
    path = tmp_path / "r.yaml"
    path.write_text(f"model: Qwen/Qwen3-8B\nruntime: {runtime}\ndefaults:\n  max_model_len: 8192\n")
    doc = importing.import_source(str(path))
    assert doc["source"]["kind"] == "sparkrun" and doc["context_length"] == 8192 and doc["engine"]["image"] == image
    filled = [p["detail"] for p in doc["provenance"] if p["key"] == "engine.image" and p["how"] == "filled"]
    assert filled == [
        f"the recipe names no container: sparkrun runs {runtime} on DGX Spark in {image} (a moving "
        "tag: apply pins its digest)"
    ]
    doc = importing.import_source(str(path), sets=["engine.image=vllm/vllm-openai:v0.20.0"])
    assert doc["engine"]["image"] == "vllm/vllm-openai:v0.20.0"


@pytest.mark.parametrize(
    "marks", ["runtime: vllm\nbuilder: eugr\n", "recipe_version: '1'\n", "runtime: vllm\nbuild_args: [--use-wheels]\n"]
)
def test_a_recipe_whose_launcher_builds_its_image_and_names_none_is_asked_for_it(tmp_path, marks):
    path = tmp_path / "r.yaml"
    path.write_text(f"model: Qwen/Qwen3-8B\n{marks}defaults:\n  max_model_len: 8192\n")
    with pytest.raises(BadInput, match=r"engine\.image cannot be determined.*--set engine\.image="):
        importing.import_source(str(path))


@pytest.mark.parametrize(
    ("container", "build_args", "built"),
    [
        ("ghcr.io/spark-arena/dgx-vllm-eugr-nightly-tf5:20260810", None, False),  # pullable: sparkrun pulls it
        ("ghcr.io/spark-arena/dgx-vllm-eugr-nightly-tf5:20260810", ["--tf5"], False),  # a pull-compatible flag
        ("ghcr.io/spark-arena/dgx-vllm-eugr-nightly:latest", ["--use-wheels"], True),  # a wheels build
        ("vllm-node-tf5", None, True),  # builder: eugr and a bare local tag: only build-and-copy.sh makes it
    ],
)
def test_an_eugr_image_is_built_only_when_sparkrun_would_build_it(tmp_path, container, build_args, built):
    fields = {
        "model": "org/m",
        "runtime": "vllm",
        "container": container,
        "command": "vllm serve {model}",
        "builder": "eugr",
    }
    if build_args:
        fields["build_args"] = build_args
    doc = recipe(tmp_path, **fields)
    said = "build-and-copy.sh" in notes(doc, "ignored").get("engine.image", "")
    assert said == built
