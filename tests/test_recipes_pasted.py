"""Recipes as users paste them: command lines, docker run/exec, scripts, compose files and pages.

The fixtures under tests/fixtures/pasted/ were written for these tests from the engines' and docker's own
documentation (vLLM's `vllm serve` and api_server, SGLang's launch_server, llama.cpp's llama-server, docker's
run/exec options, the Compose Specification, Markdown and HTML code blocks) in the shapes guides, forums and
playbook pages use, with hostile ones beside them. No host is involved; the hub is a test double
(tests/fake_hub.py) where one is used.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

from sparkplay import boundary, checkpoints, importing
from sparkplay.engines import registry
from sparkplay.engines.plan import Options, build
from sparkplay.errors import BadInput, SparkplayError
from sparkplay.recipes.importers.pasted import gguf_hub, shell
from sparkplay.recipes.store import catalog, choices
from tests import test_recipes
from tests.conftest import PROJECT
from tests.fake_hub import FakeHub
from tests.test_ckpt_tool import TOOL
from tests.test_engines import ROOT, nodes
from tests.test_recipes import cli as run_cli
from tests.test_recipes_wild import notes, plan_of

PASTED = PROJECT / "tests" / "fixtures" / "pasted"
VLLM = "engine.image=vllm/vllm-openai:v0.11.2"


project = test_recipes.project  # the fixture: an empty sparkplay project


def imported(name: str, *sets: str, pick: int | None = None) -> dict:
    return importing.import_source(str(PASTED / name), sets=sets, pick=pick)


def all_notes(doc: dict) -> str:
    return "\n".join(f"{n['key']} {n['how']} {n['detail']}" for n in doc["provenance"])


# -- command lines -----------------------------------------------------------------


def test_a_plain_vllm_serve_line_imports_with_its_flags_in_the_image_set():
    doc = imported("vllm-serve.txt", VLLM)
    assert doc["engine"]["image"] == "vllm/vllm-openai:v0.11.2"
    assert doc["source"]["kind"] == "command" and doc["source"]["launch"] == "line 1"
    assert doc["model"]["repo"] == "Qwen/Qwen3-30B-A3B-Instruct-2507-FP8"
    assert doc["topology"]["nodes"] == 2 and doc["topology"]["tensor_parallel"] == 2
    assert doc["context_length"] == 65536 and doc["knobs"]["gpu_memory_utilization"] == 0.85
    assert doc["serve"]["bind"] == "127.0.0.1" and "serve.bind" in notes(doc, "narrowed")


def test_vllm_reads_underscored_flags_and_so_does_the_import():
    doc = imported("api-server-underscores.sh", VLLM)
    assert doc["context_length"] == 15000 and doc["serve"]["port"] == 9003
    assert doc["model"]["served_name"] == "llama31" and doc["name"] == "llama31"
    assert "--max-model-len=15000" in doc["serve"]["args"] and "--max_model_len=15000" not in doc["serve"]["args"]
    assert "dashes" in notes(doc, "cleaned")["serve.args"]
    assert doc["serve"]["env"] == {"CUDA_VISIBLE_DEVICES": "0"}


def test_a_prompt_before_a_copied_command_is_no_part_of_it(monkeypatch):
    from sparkplay.recipes.importers.pasted import gguf_hub

    commit = "f" * 40
    monkeypatch.setattr(gguf_hub, "LISTER", lambda repo, rev: (commit, ["gpt-oss-20b-mxfp4.gguf", "README.md"]))
    doc = imported("llama-server-hf.txt")
    assert doc["engine"]["name"] == "llamacpp" and doc["model"]["revision"] == commit
    # the import says which commit -hf was pinned to (the CLI prints it)
    assert commit in notes(doc, "pinned")["model.revision"]


# -- docker run, docker exec, bash -c, ssh -----------------------------------------------


def test_docker_run_around_vllm_maps_docker_options_and_names_the_rest():
    doc = imported("docker-run-vllm-openai.sh")
    assert doc["engine"]["image"] == "vllm/vllm-openai:v0.11.2"
    assert doc["model"]["repo"] == "Qwen/Qwen3-VL-30B-A3B-Instruct"  # ${MODEL:-...} from the script itself
    assert doc["serve"]["shm_size"] == "16g" and doc["serve"]["ulimits"] == ["stack=67108864"]
    assert doc["serve"]["port"] == 8080 and doc["serve"]["bind"] == "127.0.0.1"  # -p 127.0.0.1:8080:8000
    assert doc["serve"]["env"] == {"VLLM_USE_FLASHINFER_SAMPLER": "1"}  # HF_TOKEN never lands in a recipe
    assert "--api-key" not in doc["serve"]["args"]  # ${API_KEY:+...} with API_KEY unset is nothing
    text = all_notes(doc)
    assert "HF_TOKEN left out" in text and "Hugging Face cache" in text and "docker rm -f qwen-vl" in text
    assert doc["extra"]["docker"]["volume"] == ["$HOME/.cache/huggingface:/root/.cache/huggingface"]


def test_the_revision_flag_pins_the_download_and_the_plan_serves_the_mirror():
    doc = imported("docker-run-vllm-openai.sh")
    pin = "5a42f3c9a8f2e3d4b5c6d7e8f90a1b2c3d4e5f60"
    assert doc["model"]["revision"] == pin and doc["model"]["checkpoints"][0]["revision"] == pin
    assert "--revision" in notes(doc, "derived")["model.revision"]
    (leader,) = plan_of(doc, 1)["ranks"]
    argv = leader["argv"]
    assert "--revision" not in argv and "--model" not in argv  # the mirror is that revision, at its own path
    assert any(a.endswith("/Qwen--Qwen3-VL-30B-A3B-Instruct") for a in argv)


def test_sglang_in_docker_with_its_revision():
    doc = imported("sglang-docker.sh")
    assert doc["engine"]["name"] == "sglang" and doc["engine"]["image"] == "lmsysorg/sglang:spark"
    assert doc["model"]["revision"] == "0f2a1e9b8c7d6e5f4a3b2c1d0e9f8a7b6c5d4e3f"
    assert doc["context_length"] == 32768 and doc["serve"]["shm_size"] == "32g" and doc["serve"]["port"] == 30000
    assert "HF_TOKEN" not in doc["serve"]["env"]
    (leader,) = plan_of(doc, 1)["ranks"]
    assert "--revision" not in leader["argv"]


def test_a_bash_c_inside_the_container_carries_what_it_runs_first_as_a_privileged_request():
    doc = imported("nvcr-bash-c.sh")
    assert doc["engine"]["image"] == "nvcr.io/nvidia/vllm:25.11-py3"
    assert doc["engine"]["preamble"]["commands"] == ["pip install --no-cache-dir fastsafetensors"]
    asked = [r.name for r in boundary.requests(doc)]
    assert f"preamble:{doc['name']}@{doc['engine']['preamble']['sha256']}" in asked


def test_docker_exec_after_a_comment_into_a_container_the_text_does_not_start():
    default = imported("docker-exec-comment.sh")  # the container's image is not in the text: the default's
    assert default["engine"]["image"] == registry.spec("vllm").defaults.image
    doc = imported("docker-exec-comment.sh", VLLM)
    assert doc["serve"]["env"] == {"VLLM_MARLIN_USE_ATOMIC_ADD": "1"}  # exported inside bash -c
    assert doc["topology"]["nodes"] == 4 and doc["serve"]["distributed_backend"] is None
    assert "which the text does not start" in all_notes(doc)


def test_eugr_launch_cluster_gives_nodes_image_and_names_its_mods():
    doc = imported("eugr-launch-cluster.sh")
    assert doc["topology"]["nodes"] == 2 and doc["engine"]["image"] == "vllm-node-tf5"
    assert "build-and-copy.sh" in notes(doc, "ignored")["engine.image"]
    assert "--apply-mod mods/fix-Salyut1-GLM-4.7-NVFP4" in notes(doc, "ignored")["engine.mods"]


def test_ssh_around_docker_run_on_another_host():
    doc = imported("ssh-docker.sh")
    assert doc["engine"]["image"] == "vllm/vllm-openai:cu130-nightly"  # the entrypoint is vllm serve
    assert doc["model"]["repo"] == "Qwen/Qwen3.5-35B-A3B-FP8" and doc["serve"]["shm_size"] == "16g"
    assert "over ssh" in all_notes(doc)


def test_a_launch_script_of_eugrs_launch_cluster_runs_in_its_image_and_says_so():
    """The file launch-cluster.sh --launch-script runs (its `# PROFILE:` header): a bare vllm serve line that
    runs in the runner's own image, vllm-node, which eugr's build-and-copy.sh builds on each node."""
    doc = imported("eugr-launch-script.sh")
    assert doc["engine"]["image"] == "vllm-node" and doc["topology"]["nodes"] == 2
    assert doc["model"]["repo"] == "Qwen/Qwen3-30B-A3B-Instruct-2507-FP8" and doc["context_length"] == 32768
    said = notes(doc, "ignored")["engine.image"]
    assert "PROFILE: Qwen3 30B A3B FP8 on two Sparks" in said and "build-and-copy.sh" in said
    assert doc["serve"]["env"]["VLLM_USE_DEEP_GEMM"] == "0"


def test_a_bare_line_without_the_profile_header_runs_in_the_engines_default_image(tmp_path):
    text = (PASTED / "eugr-launch-script.sh").read_text().replace("# PROFILE:", "# Profile")
    (tmp_path / "bare.sh").write_text(text)
    doc = importing.import_source(str(tmp_path / "bare.sh"))
    assert doc["engine"]["image"] == registry.spec("vllm").defaults.image
    assert "the source names no image" in notes(doc, "filled")["engine.image"]


def test_a_script_opening_with_a_test_and_comments_inside_arrays_reads_as_bash_reads_it():
    """`[ -f .env ]` first is a shell test, not JSON; a comment inside an array or $(...) is prose, its
    quotes and brackets too."""
    doc = imported("array-comments.sh")
    assert doc["engine"]["image"] == "vllm/vllm-openai:v0.11.0" and doc["model"]["repo"] == "Qwen/Qwen3-8B"
    assert doc["context_length"] == 16384 and doc["knobs"]["gpu_memory_utilization"] == 0.7
    assert doc["serve"]["env"] == {"HF_HUB_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1"}


def test_a_pages_script_block_keeps_its_comments_and_a_console_block_loses_its_prompts():
    """`# ` opens a comment in a script (a #! first line) and a root prompt in a console transcript."""
    doc = imported("page-script-block.md", VLLM)
    assert doc["model"]["repo"] == "Qwen/Qwen3-8B" and doc["context_length"] == 8192


def test_an_engine_asked_for_its_version_or_help_is_no_launch(tmp_path, monkeypatch):
    """A page checks the build (`llama-server --version`, `vllm serve --help`) before it serves: one launch."""
    monkeypatch.setattr(gguf_hub, "LISTER", lambda repo, rev: ("a" * 40, ["Qwen3-8B-Q4_K_M.gguf"]))
    text = "llama-server --version\nvllm serve --help\nllama-server -hf Qwen/Qwen3-8B-GGUF:Q4_K_M --port 8080\n"
    (tmp_path / "check.sh").write_text(text)
    doc = importing.import_source(str(tmp_path / "check.sh"))
    assert doc["model"]["repo"] == "Qwen/Qwen3-8B-GGUF"
    assert doc["serve"]["args"][:2] == ["-hf", "Qwen/Qwen3-8B-GGUF:Q4_K_M"]


def test_a_pages_one_compose_block_imports_every_service_as_the_file_would(tmp_path):
    """A compose block's services run side by side: all imported, as from the file; a page that also holds a
    shell launch is a page of choices again (--pick)."""
    docs = importing.import_sources(str(PASTED / "page-compose-block.md"))
    assert [(d["name"], d["model"]["repo"], d["serve"]["port"]) for d in docs] == [
        ("chat", "Qwen/Qwen3-8B", 8001),
        ("router", "Qwen/Qwen3-0.6B", 8002),
    ]
    text = (PASTED / "page-compose-block.md").read_text().replace("vllm serve --help", "vllm serve Qwen/Qwen3-4B")
    (tmp_path / "page.md").write_text(text)
    docs = importing.import_sources(str(tmp_path / "page.md"))
    assert [d["model"]["repo"] for d in docs] == ["Qwen/Qwen3-8B", "Qwen/Qwen3-0.6B", "Qwen/Qwen3-4B"]
    assert all(choices.is_choice(d) for d in docs)
    assert importing.import_sources(str(tmp_path / "page.md"), pick=3)[0]["model"]["repo"] == "Qwen/Qwen3-4B"


def test_markdown_prose_with_no_code_block_is_named_as_such_not_as_a_broken_quote(tmp_path):
    notes = "# Changelog\n\n- **Added** the `vllm serve` profile: it's [documented](docs/x.md).\n"
    (tmp_path / "CHANGELOG.md").write_text(notes)
    with pytest.raises(BadInput, match="is a Markdown page with no code block"):
        importing.import_source(str(tmp_path / "CHANGELOG.md"))
    # a script whose comments look like Markdown still gets the shell's own complaint
    (tmp_path / "run.sh").write_text("# **Run** it\n# - on one Spark\nvllm serve Qwen/Qwen3-8B --x 'open\n")
    with pytest.raises(BadInput, match="an unbalanced ' on line 3"):
        importing.import_source(str(tmp_path / "run.sh"))


TWO_SPARKS = """# Two Sparks over Ray

```bash
export VLLM_IMAGE=nvcr.io/nvidia/vllm:26.05-py3
bash run_cluster.sh $VLLM_IMAGE 192.168.100.10 --head ~/.cache/huggingface -e VLLM_HOST_IP=192.168.100.10
```

```bash
export VLLM_CONTAINER=$(docker ps --format '{{.Names}}' | grep -E '^node-[0-9]+$')
docker exec -it $VLLM_CONTAINER /bin/bash -c '
  vllm serve Qwen/Qwen3-30B-A3B --tensor-parallel-size 2 --distributed-executor-backend ray'
```

## Four Sparks, a newer image

```bash
export VLLM_IMAGE=nvcr.io/nvidia/vllm:26.06-py3
bash run_cluster.sh $VLLM_IMAGE 192.168.100.10 --head ~/.cache/huggingface
docker exec -it $VLLM_CONTAINER /bin/bash -c 'vllm serve Qwen/Qwen3-235B-A22B-FP8 --tensor-parallel-size 4'
```
"""


@pytest.mark.parametrize(
    ("pick", "image", "nodes"), [(1, "nvcr.io/nvidia/vllm:26.05-py3", 2), (2, "nvcr.io/nvidia/vllm:26.06-py3", 4)]
)
def test_docker_exec_into_a_ray_node_runs_in_the_image_run_cluster_started_last(tmp_path, pick, image, nodes):
    """NVIDIA's multi-Spark guides: `bash run_cluster.sh IMAGE ...` starts the node, `docker exec` into the
    container `docker ps` finds runs the engine in it; each section's own image."""
    (tmp_path / "page.md").write_text(TWO_SPARKS)
    doc = importing.import_source(str(tmp_path / "page.md"), pick=pick)
    assert doc["engine"]["image"] == image and doc["topology"]["nodes"] == nodes
    assert "the Ray node run_cluster.sh starts from" in all_notes(doc)


INSIDE = """Open a shell in the container:

```bash
docker run --gpus all -it --rm -p 30000:30000 lmsysorg/sglang:v0.5.9-cu130 bash
```

Inside the container, start the server:

```bash
python3 -m sglang.launch_server --model-path Qwen/Qwen3-8B --port 30000 &
```
"""


def test_an_engine_typed_in_the_shell_a_page_opens_in_a_container_runs_in_that_image(tmp_path):
    (tmp_path / "page.md").write_text(INSIDE)
    doc = importing.import_source(str(tmp_path / "page.md"))
    assert doc["engine"]["image"] == "lmsysorg/sglang:v0.5.9-cu130" and doc["model"]["repo"] == "Qwen/Qwen3-8B"
    assert "opens a shell in lmsysorg/sglang:v0.5.9-cu130" in all_notes(doc)
    # the shell's `exit` ends it: what follows runs on the host, with no image named (SGLang's default, said)
    (tmp_path / "exited.md").write_text(INSIDE.replace("```bash\npython3", "```bash\nexit\npython3"))
    exited = importing.import_source(str(tmp_path / "exited.md"))
    assert exited["engine"]["image"] == registry.spec("sglang").defaults.image
    assert "outside a container" in notes(exited, "derived")["engine.image"]


def test_llama_cpps_own_flags_say_the_server_of_an_image_sparkplay_does_not_know(tmp_path, monkeypatch):
    """A locally built llama.cpp image whose entrypoint is llama-server: its arguments are llama.cpp's alone
    (--n-gpu-layers, -ngl, --ctx-size), so the server is llama-server, and the import says so."""
    monkeypatch.setattr(gguf_hub, "LISTER", lambda repo, rev: ("a" * 40, ["Qwen3-8B-Q4_K_M.gguf"]))
    text = "docker run --gpus all spark/llama-cpp:local -hf Qwen/Qwen3-8B-GGUF:Q4_K_M -ngl 99 --ctx-size 8192\n"
    (tmp_path / "run.sh").write_text(text)
    doc = importing.import_source(str(tmp_path / "run.sh"))
    assert doc["engine"]["name"] == "llamacpp" and doc["context_length"] == 8192
    (tmp_path / "plain.sh").write_text("docker run --gpus all spark/llama-cpp:local -m /m/x.gguf --n-gpu-layers 99\n")
    doc = importing.import_source(str(tmp_path / "plain.sh"))
    assert doc["engine"]["name"] == "llamacpp" and doc["model"]["path"] == "m/x.gguf"  # its folder under the root
    (tmp_path / "root.sh").write_text("docker run --gpus all spark/llama-cpp:local -m /x.gguf --n-gpu-layers 99\n")
    with pytest.raises(BadInput, match=r"model\.path '/x\.gguf' is a path on the machine the recipe was written"):
        importing.import_source(str(tmp_path / "root.sh"))  # a file in no folder: nothing to name it by


def test_a_launcher_script_with_defaults_arrays_and_argument_parsing():
    doc = imported("launcher-script.sh", VLLM)
    assert doc["model"]["repo"] == "nvidia/Qwen3-235B-A22B-FP4"  # the default, not the case branch's $2
    assert doc["context_length"] == 131072 and doc["topology"]["nodes"] == 2
    assert doc["knobs"]["gpu_memory_utilization"] == 0.88  # ARGS+=(...)
    assert doc["serve"]["env"] == {"NCCL_IB_GID_INDEX": "3"} and doc["model"]["served_name"] == "qwen3-235b"
    assert "conditions or loops" in all_notes(doc) and "journal" in all_notes(doc)


def test_llama_cpp_in_docker_runs_from_the_nodes_packages_and_says_so(monkeypatch):
    from sparkplay.recipes.importers.pasted import gguf_hub

    monkeypatch.setattr(gguf_hub, "LISTER", lambda repo, rev: ("a" * 40, ["Qwen3-8B-Q4_K_M.gguf"]))
    doc = imported("llama-docker.sh")
    assert doc["engine"]["runtime"] == "native" and doc["engine"]["image"] is None
    assert doc["model"]["checkpoints"][0]["files"] == ["Qwen3-8B-Q4_K_M.gguf"] and doc["context_length"] == 16384
    assert "from the node's packages" in notes(doc, "ignored")["engine.image"]


# -- what the boundary keeps out -----------------------------------------------------


def test_hostile_docker_options_are_named_and_never_reach_the_plan():
    doc = imported("hostile-docker.sh")
    left = doc["extra"]["docker"]
    assert left["privileged"] == ["true"] and left["pid"] == ["host"] and "/:/host" in left["volume"]
    assert left["cap_add"] == ["SYS_ADMIN"] and left["devices"] == ["/dev/mem"]
    asked = [r.name for r in boundary.requests(doc, ("*",))]
    assert "env:LD_PRELOAD" in asked  # env that loads code: a privileged request, as for any recipe
    allowed = Options(model_root=ROOT, trusted_images=("*",), allow=("env:LD_PRELOAD",))
    (leader,) = build(doc, nodes(1), allowed)["ranks"]
    text = json.dumps(leader)
    for word in ("--privileged", "SYS_ADMIN", "/dev/mem", "seccomp=unconfined", "/:/host", "--pid"):
        assert word not in text


@pytest.mark.parametrize(
    ("fixture", "says"),
    [
        ("pipe-before-engine.sh", "uses a pipe, a redirect or & before the engine"),
        ("after-engine.sh", "runs after the engine"),
        ("script-file.sh", "runs the script /serve.sh inside the container, which the text does not hold"),
        ("compose-entrypoint-script.yml", "service llm runs the script /workspace/start-vllm.sh inside the container"),
        ("docker-run-script.sh", "runs the script /opt/launch/serve-model.bash inside the container"),
        ("unset-model.sh", r"uses \$MODEL_ID, which the text never sets"),
        ("substitution.sh", "command substitution"),
        ("run-recipe.sh", r"runs run-recipe on the recipe recipes/glm-4.7-nvfp4.yaml, which is not beside.*import the"),
        ("eugr-checkout/serve-missing.sh", r"the recipe no-such-recipe, which is not beside.*then in recipes/"),
        ("compose-checkout/missing.sh", r"runs docker compose on nothere.yml, which is not beside"),
        ("compose-checkout/wrong-service.sh", r"runs the service nosuch, which .*docker-compose.yml does not define"),
        ("eugr-checkout/serve-escape.sh", r"the recipe ../../../../../etc/passwd, which is not beside"),
        (
            "profile.conf",
            r"a profile of settings \(MODEL=Qwen/Qwen3-8B, PORT=8000, TP=2\) that does not say its engine",
        ),
        ("compose-unset.yml", r"service vllm uses \$MODEL, which the text never sets"),
        ("compose-no-engine.yml", r"is a compose file, not a recipe, and holds no engine command.*webui"),
        ("page-no-code.md", "is a Markdown page, not a recipe, and holds no engine command"),
    ],
)
def test_what_cannot_be_imported_is_one_line_naming_the_input_and_nothing_is_written(project, fixture, says):
    (project / "recipes").mkdir(exist_ok=True)
    before = sorted(p.name for p in (project / "recipes").iterdir())
    proc = run_cli(project, "recipe", "import", str(PASTED / fixture), "--yes")
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert str(PASTED / fixture) in proc.stderr
    assert __import__("re").search(says, proc.stderr), proc.stderr
    assert sorted(p.name for p in (project / "recipes").iterdir()) == before


def test_pick_chooses_one_of_several():
    doc = imported("two-commands.sh", VLLM, pick=2)
    assert doc["model"]["repo"] == "Qwen/Qwen3-0.6B" and doc["name"] == "small" and doc["serve"]["port"] == 8002
    with pytest.raises(BadInput, match=r"--pick 3: .* holds 2 engine command"):
        imported("two-commands.sh", VLLM, pick=3)


def test_one_nodes_command_of_a_multi_node_page_gives_the_node_count_not_its_rank():
    for pick in (1, 2):  # either node's command: the same recipe
        doc = imported("page-sglang-two-nodes.md", pick=pick)
        assert doc["topology"]["nodes"] == 2 and doc["topology"]["tensor_parallel"] == 2
        for flag in ("--nnodes", "--node-rank", "--dist-init-addr"):
            assert flag not in doc["serve"]["args"]
        assert "one node's flags" in notes(doc, "cleaned")["serve.args"]
    ranks = plan_of(doc, 2)["ranks"]
    assert [r["argv"][r["argv"].index("--node-rank") + 1] for r in ranks] == ["0", "1"]


def test_a_script_saved_on_windows_and_uv_run():
    doc = imported("crlf-uv-run.sh", VLLM)
    assert doc["context_length"] == 8192 and doc["serve"]["port"] == 8003
    assert doc["serve"]["env"] == {"VLLM_API_KEY_FILE": "/dev/null"}


def test_a_typographic_dash_from_a_web_page_is_named():
    with pytest.raises(BadInput, match="typographic"):
        imported("typographic-dash.txt", VLLM)


def test_a_website_json_whose_command_is_a_docker_run_or_a_commented_docker_exec():
    shapes = PROJECT / "tests" / "fixtures" / "localairecipes" / "shapes"
    doc = importing.import_source(str(shapes / "docker-run-command.json"))
    assert doc["source"]["kind"] == "localairecipes" and doc["engine"]["image"] == "vllm/vllm-openai:v0.11.2"
    assert doc["model"]["repo"] == "Qwen/Qwen3-8B" and doc["context_length"] == 16384
    assert doc["serve"]["env"] == {"VLLM_USE_V1": "1"}
    doc = importing.import_source(str(shapes / "comment-then-docker-exec.json"))
    assert doc["model"]["repo"] == "zai-org/GLM-4.6-FP8" and doc["topology"]["nodes"] == 2
    assert doc["engine"]["image"] == "vllm/vllm-openai:v0.11.2"  # the JSON's own image field


# -- compose files -----------------------------------------------------------------


def test_a_compose_file_is_one_recipe_per_engine_service(project):
    docs = importing.import_sources(str(PASTED / "compose-two-models.yml"))
    coder, chat = docs
    assert [coder["name"], chat["name"]] == ["coder", "chat"]
    assert coder["engine"]["image"] == chat["engine"]["image"] == "vllm/vllm-openai:v0.11.2"  # ${VLLM_TAG:-...}
    assert coder["model"]["served_name"] == "coder" and coder["serve"]["port"] == 8001
    assert coder["context_length"] == 65536 and coder["knobs"]["gpu_memory_utilization"] == 0.45
    assert chat["model"]["repo"] == "openai/gpt-oss-20b" and chat["serve"]["port"] == 8002
    for doc in docs:  # the x- anchor's settings, merged into each service
        assert doc["serve"]["shm_size"] == "16gb" and doc["serve"]["ulimits"] == ["stack=67108864"]
        assert doc["serve"]["env"] == {"VLLM_ATTENTION_BACKEND": "FLASHINFER"}
        assert "webui" in notes(doc, "ignored")["extra.compose.services"]
    proc = run_cli(project, "recipe", "import", str(PASTED / "compose-two-models.yml"), "--yes")
    assert proc.returncode == 0, proc.stderr
    assert "sparkplay up coder -i INVENTORY, then sparkplay up chat --add -i INVENTORY" in proc.stdout
    assert (project / "recipes" / "coder.yml").is_file() and (project / "recipes" / "chat.yml").is_file()


def test_a_compose_service_with_entrypoint_long_ports_and_volumes():
    doc = imported("compose-sglang-entrypoint.yaml")
    assert doc["engine"]["name"] == "sglang" and doc["context_length"] == 40960
    assert doc["serve"]["port"] == 30001 and doc["serve"]["bind"] == "127.0.0.1"
    assert doc["serve"]["env"] == {"HF_HUB_ENABLE_HF_TRANSFER": "1", "SGLANG_ENABLE_JIT_DEEPGEMM": "false"}
    assert doc["extra"]["docker"]["cap_add"] == ["SYS_PTRACE"] and doc["extra"]["docker"]["privileged"] == ["true"]


def test_a_compose_file_in_json_and_a_model_file_on_the_authors_disk():
    """A file on the author's disk, no repository named: the file of that name in a folder of that name under
    the model root, which rank 0 must hold; said, with how to download it instead."""
    doc = imported("compose-llamacpp.json")
    path = doc["model"]["path"]
    assert not path.startswith("/") and path.count("/") == 1 and path.endswith(".gguf")
    note = [n["detail"] for n in doc["provenance"] if n["key"] == "model.path" and n["how"] == "cleaned"]
    assert f"sparkplay serves {path} under the model root, which rank 0 must hold" in note[0]
    assert "--set model.repo=ORG/NAME" in note[0]


# -- pages -------------------------------------------------------------------------


def test_a_playbook_page_reads_only_its_code_blocks_in_order():
    doc = imported("page-playbook.md")
    assert doc["source"]["kind"] == "page" and doc["source"]["launch"] == "code block 3, line 1"
    # the image from block 2's docker run, its tag from block 1's export; the prose's command never read
    assert doc["engine"]["image"] == "nvcr.io/nvidia/vllm:25.11-py3"
    assert doc["model"]["repo"] == "Qwen/Qwen2.5-Math-1.5B-Instruct" and doc["context_length"] == 4096
    assert "evil" not in json.dumps(doc)


def test_an_html_page_lists_its_commands_and_pick_chooses():
    with pytest.raises(
        BadInput,
        match=r"holds 2 engine launches \(1\) qwen3-4b-instruct-2507-1; 2\) qwen3-4b-instruct-2507-2\).*--pick N",
    ):
        imported("page-two-choices.html")  # one recipe asked for: the choices named
    first, second = imported("page-two-choices.html", pick=1), imported("page-two-choices.html", pick=2)
    assert first["engine"]["name"] == "vllm" and first["context_length"] == 16384
    assert second["engine"]["name"] == "sglang" and second["engine"]["image"] == "lmsysorg/sglang:spark"
    assert "prose/ignored" not in json.dumps([first, second])


@pytest.mark.parametrize("page", ["page-hidden-code.html", "page-hidden-code.md"])
def test_a_page_imports_only_what_its_reader_sees(page):
    """Issue 54: code in HTML comments, hidden or invisible elements, <template>, <script>, <noscript> (or a
    Markdown page's raw HTML of those) is not what a reader runs: a hidden `MODEL=` line never changes what
    is served, before or after the visible block."""
    doc = imported(page)
    assert doc["model"]["repo"] == "Qwen/Qwen3-4B-Instruct-2507" and doc["context_length"] == 8192
    assert "evil" not in json.dumps(doc)


def test_the_visible_test_pages_still_read_the_same():
    """The hiding rules leave a plain page alone: a `<details>` block is shown on a click, a `hidden`-free
    element is shown."""
    from sparkplay.recipes.importers.pasted import page

    html = (
        "<details><summary>more</summary><pre>vllm serve a/b</pre></details><div class='hiddenish'><pre>x</pre></div>"
    )
    assert [body for _, body in page.blocks(html, html=True)] == ["vllm serve a/b", "x"]


def test_a_compose_serve_command_on_an_image_sparkplay_does_not_know_is_read_as_vllm_and_said_so():
    """Issue 56: `serve --model ...` (or `serve MODEL ...`) on a locally built or community vLLM image is vLLM's
    own subcommand and flags; the service running a script the file does not hold is named, not read."""
    with pytest.raises(BadInput, match=r"holds 2 engine launches \(1\) vllm-local; 2\) vllm-community\)"):
        imported("compose-serve-unknown-image.yml")
    local = imported("compose-serve-unknown-image.yml", pick=1)
    assert local["engine"]["name"] == "vllm" and local["engine"]["image"] == "spark-vllm:latest"
    assert local["model"]["repo"] == "Qwen/Qwen3-4B-Instruct-2507" and local["context_length"] == 8192
    assert "`vllm`" in all_notes(local)  # the entrypoint taken, said
    community = imported("compose-serve-unknown-image.yml", pick=2)
    assert community["model"]["repo"] == "Qwen/Qwen3-8B" and community["context_length"] == 16384
    assert community["engine"]["image"] == "ghcr.io/someone/vllm-spark:0.12"


def test_the_tensorrt_llm_page_names_the_heredoc_its_container_shell_runs_before_the_engine():
    """Issue 56: NVIDIA's TensorRT-LLM page runs `trtllm-serve` inside `bash -c`, after a heredoc that writes
    its LLM API file in the container: TensorRT-LLM is an engine now (issue 58), and the refusal names what
    stops the import, the file the shell writes before the engine."""
    with pytest.raises(BadInput, match=r"runs more than the engine: 'cat' uses a pipe, a redirect or & before"):
        imported("page-trtllm.md")


def test_standard_input_is_a_source(project):
    text = (PASTED / "sglang-docker.sh").read_text()
    proc = subprocess.run(
        [sys.executable, "-m", "sparkplay", "recipe", "import", "-", "--yes", "--project-dir", str(project)],
        input=text,
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert (project / "recipes" / "qwen3-8b.yml").is_file()


# -- the shell reader ----------------------------------------------------------------


def test_the_shell_reader_expands_as_the_shell_does():
    script = shell.read(
        'A="x y"\nB=(1 "2 3")\nC=${UNSET:-d}\nprint $A "$A" "${B[@]}" ${B[*]} $C ${C:+alt} ${UNSET:+no} \'$A\' "\\$A"'
    )
    (statement,) = script.statements
    assert statement.words == ["print", "x", "y", "x y", "1", "2 3", "1", "2", "3", "d", "alt", "$A", "$A"]


# -- the revision pin, downloaded --------------------------------------------------------


def test_the_revision_from_the_command_is_the_commit_mirrored(tmp_path):
    """The download is the checkpoint tool's, against the stand-in hub whose main has moved on."""
    old, new = b'{"weights": "old"}', b'{"weights": "new"}'
    pin = "1" * 40
    hub = FakeHub(
        {"org/tiny": {"config.json": new}}, commit="2" * 40, history={"org/tiny": {pin: {"config.json": old}}}
    )
    source = tmp_path / "cmd.sh"
    source.write_text(f"docker run --gpus all vllm/vllm-openai:v0.11.2 --model org/tiny --revision {pin}\n")
    doc = importing.import_source(str(source))
    (ckpt,) = checkpoints.sources(doc, "/models")
    assert ckpt["revision"] == pin and ckpt["pinned"]
    tool = TOOL
    env = {**os.environ, "HF_ENDPOINT": hub.url, "HF_HUB_DISABLE_XET": "1", "HF_HOME": str(tmp_path / "hf")}
    dest = tmp_path / "models" / "org--tiny"
    try:
        for args in (
            ["download", "--repo", ckpt["repo"], "--revision", ckpt["revision"], "--dest", str(dest)],
            ["manifest", str(dest), "--revision", ckpt["revision"]],
        ):
            proc = subprocess.run(
                [sys.executable, str(tool), *args], capture_output=True, text=True, check=False, env=env, timeout=120
            )
            assert proc.returncode == 0, proc.stderr
    finally:
        hub.close()
    assert (dest / "config.json").read_bytes() == old  # the pinned commit's bytes, not main's
    marker = json.loads(Path(json.loads(proc.stdout)["marker"]).read_text())
    assert marker["revision"] == pin  # the mirror is marked complete for the recipe's pin
    assert any(pin in path for _, path, _ in hub.requests)


# -- no input produces a traceback ----------------------------------------------------


def test_mangled_inputs_are_imports_or_one_line_errors():
    """Every fixture cut short, with quotes, brackets and operators sprinkled in: never anything but BadInput."""
    rng = random.Random(40)  # noqa: S311 - a fixed sequence of test inputs, not a secret
    noise = ["'", '"', "\\", "$(", "${", "`", "(", ")", "|", "&&", ";", "<<EOF\n", "\n", "#", "=", "--", "<x>", "~"]
    for path in sorted(p for p in PASTED.rglob("*") if p.is_file()):
        text = path.read_text()
        for _ in range(25):
            cut = text[: rng.randrange(len(text) + 1)]
            for _ in range(rng.randrange(4)):
                at = rng.randrange(len(cut) + 1)
                cut = cut[:at] + rng.choice(noise) + cut[at:]
            with contextlib.suppress(SparkplayError):
                # in its own folder: a profile's model is its folder's name
                catalog.read_all(cut.encode(), str(path.with_name(f"{path.name}-mangled")), "0" * 64, None)


@pytest.mark.parametrize(
    "text",
    [
        "A=(" * 3000 + "x" + ")" * 3000,  # arrays in arrays: no bash has them
        "ssh a " * 5000 + "vllm serve o/m",  # commands in commands, past any real nesting
        "sudo " * 50000 + "vllm serve o/m --port 1",  # wrappers: read in one pass
        "${" * 50000,
        "$(" * 50000,
        "cat <<EOF\n" + "x\n" * 1000,
        "vllm serve o/m\x00 --port 1",
        bytes(range(256)).decode("latin-1") * 50,
        "```\n" * 5000,
        "<pre>" * 5000 + "vllm serve o/m",
    ],
    ids=[
        "nested-arrays",
        "ssh-chain",
        "sudo-chain",
        "braces",
        "substitutions",
        "open-heredoc",
        "nul",
        "binary",
        "fences",
        "pre",
    ],
)
def test_inputs_built_to_exhaust_the_reader_end_quickly_in_an_answer(text):
    try:
        catalog.read_all(text.encode(), "hostile", "0" * 64, None, "", (), None)
    except SparkplayError as error:
        assert "\n" not in str(error)


def test_an_empty_source_and_control_characters_in_what_is_named(tmp_path):
    empty = tmp_path / "empty.sh"
    empty.write_text(" \n\t\n")
    with pytest.raises(BadInput, match=r"empty\.sh is empty"):
        importing.import_source(str(empty))
    binary = tmp_path / "binary.bin"
    binary.write_bytes(b"\xff\xfe\x00\x1b[31mbad\n")
    with pytest.raises(BadInput) as caught:
        importing.import_source(str(binary))
    assert not any(c in str(caught.value) for c in "\x00\x1b\ufffd")


@pytest.mark.parametrize(
    ("pasted", "as_vllm_reads_it"),
    [
        ("--max_model_len", "--max-model-len"),
        ("--max_model_len=8192", "--max-model-len=8192"),
        ("--default-chat-template-kwargs.reasoning_effort", "--default-chat-template-kwargs.reasoning_effort"),
        ("--compilation_config.cudagraph_mode=FULL", "--compilation-config.cudagraph_mode=FULL"),
        ("--compilation-config.pass_config.fuse_allreduce_rms", "--compilation-config.pass_config.fuse_allreduce_rms"),
        ("--speculative_config.num_speculative_tokens=3", "--speculative-config.num_speculative_tokens=3"),
        ("--json_arg.key4+=a_b,c_d", "--json-arg.key4+=a_b,c_d"),  # a list element, and a value with underscores
        ("--served_model_name=my_model.v2", "--served-model-name=my_model.v2"),  # a dot in the value is the value
        ("-tp", "-tp"),
        ("my_model", "my_model"),
    ],
)
def test_vllm_dashes_only_the_options_name_before_its_first_dot(pasted, as_vllm_reads_it):
    """vLLM's FlexibleArgumentParser (vllm/utils/argparse_utils.py) dashes what lies between `--` and the first
    `.`; a dotted JSON key after it is the option's value's key and must reach the engine byte for byte."""
    from sparkplay.engines.vllm.spec import option_spelling as vllm_option_spelling

    assert vllm_option_spelling(pasted) == as_vllm_reads_it


def test_a_pasted_line_with_dotted_json_options_keeps_each_key_and_says_what_it_dashed():
    doc = imported("vllm-dotted-keys.sh", VLLM)
    args = doc["serve"]["args"]
    for kept in (
        "--default-chat-template-kwargs.reasoning_effort",
        "--compilation-config.cudagraph_mode=FULL_AND_PIECEWISE",
        "--compilation-config.pass_config.fuse_allreduce_rms",
        "--speculative-config.num_speculative_tokens=3",
        "--speculative-config.method",
    ):
        assert kept in args, (kept, args)
    assert not any("reasoning-effort" in a or "cudagraph-mode" in a or "num-speculative" in a for a in args), args
    assert doc["context_length"] == 131072 and doc["topology"]["tensor_parallel"] == 2
    said = notes(doc, "cleaned")["serve.args"]
    for dashed in ("--max_model_len", "--compilation_config.cudagraph_mode", "--speculative_config"):
        assert dashed in said, said
    assert "reasoning_effort" not in said  # nothing was changed there, so nothing is said
    assert json.loads(args[args.index("--override-generation-config") + 1]) == {"max_new_tokens": 4096, "top_k": 20}


def test_a_one_node_llama_server_line_imports_as_one_node_and_says_why():
    doc = imported("llama-server-hf.txt", "model.path=gpt-oss-20b-mxfp4.gguf")
    assert doc["topology"]["nodes"] == 1
    assert "no --rpc worker" in notes(doc, "derived")["topology.nodes"]


def test_a_llama_server_with_its_own_rpc_workers_is_refused_naming_the_flag_sparkplay_sets():
    with pytest.raises(BadInput, match=r"--rpc, which sparkplay sets per rank"):
        imported("llama-server-rpc.txt")


def test_spec_type_none_is_no_speculation():
    from sparkplay.recipes import flags
    from sparkplay.recipes.raw import RawRecipe

    raw = RawRecipe(name="x", title="x", source={}, engine="llamacpp", model=None, args=["--spec-type", "none"])
    assert flags.speculative(raw) is None
    raw.args = ["--spec-type=ngram-mod,draft-mtp", "--draft-max", "8"]
    assert flags.speculative(raw) == {"method": "ngram-mod,draft-mtp", "num_tokens": 8, "draft_model": None}
    raw.args = ["-md", "draft.gguf"]  # a draft model and no type: llama.cpp's plain draft
    assert flags.speculative(raw) == {"method": "draft", "num_tokens": None, "draft_model": "draft.gguf"}


def test_llama_cpps_spec_type_is_its_speculative_method_with_its_draft_length():
    """llama.cpp's own MTP head (--spec-type draft-mtp): the flags reach the engine, and the recipe says so."""
    doc = imported("llama-server-mtp.txt", "model.path=Qwen3.6-27B-MTP-Q8_0.gguf")
    assert doc["speculative"] == {"method": "draft-mtp", "num_tokens": 3, "draft_model": None}
    args = doc["serve"]["args"]
    assert args[args.index("--spec-type") + 1] == "draft-mtp" and args[args.index("--spec-draft-n-max") + 1] == "3"
    assert doc["topology"]["nodes"] == 1 and doc["context_length"] == 32768


# -- a secret in the pasted text never lands in a recipe, a unit or an argv (issue 54) -------------

SECRET_VALUE = "hf_SeCrEtVaLuE0123456789"  # noqa: S105 - a made-up token the test looks for


@pytest.mark.parametrize(
    "text",
    [
        f"vllm serve Qwen/Qwen3-0.6B --hf-token {SECRET_VALUE} --max-model-len 4096",
        f"vllm serve Qwen/Qwen3-0.6B --hf-token={SECRET_VALUE} --api-key {SECRET_VALUE}",
        f"vllm serve Qwen/Qwen3-0.6B --api-key={SECRET_VALUE} --hf_token {SECRET_VALUE}",
        "vllm serve Qwen/Qwen3-0.6B --hf-token $HF_TOKEN --api-key ${KEY}",  # the reader's shell: left out, too
        f"docker run --gpus all -e HF_TOKEN={SECRET_VALUE} vllm/vllm-openai:v0.11.2 Qwen/Qwen3-0.6B "
        f"--hf-token {SECRET_VALUE}",
        f"llama-server -hf ggml-org/gemma-3-1b-it-GGUF -hff gemma-3-1b-it-Q4_K_M.gguf -hft {SECRET_VALUE} "
        f"--api-key {SECRET_VALUE}",
        f"python3 -m sglang.launch_server --model-path Qwen/Qwen3-0.6B --api-key {SECRET_VALUE} "
        f"--admin-api-key {SECRET_VALUE}",
    ],
)
def test_a_pasted_secret_flag_is_left_out_named_and_never_reaches_the_recipe_or_the_plan(tmp_path, text):
    source = tmp_path / "pasted.sh"
    source.write_text(text + "\n")
    pinned = ("model.revision=" + "a" * 40, "model.path=gemma-3-1b-it-Q4_K_M.gguf")  # no hub in tests
    sets = (VLLM,) if text.startswith("vllm") else pinned if "-hf " in text else ()
    if text.startswith("python3"):
        sets = ("engine.image=lmsysorg/sglang:spark",)
    doc = importing.import_source(str(source), sets=sets)
    assert SECRET_VALUE not in json.dumps(doc) and "$HF_TOKEN" not in json.dumps(doc["serve"])
    assert not any(a.startswith(("--hf", "-hft", "--api", "--admin")) for a in doc["serve"]["args"])
    text_notes = all_notes(doc)
    assert "left out: a secret is never stored in a recipe" in text_notes
    if any(f in text for f in ("--hf", "-hft ", "HF_TOKEN")):
        assert "checkpoint_hf_token" in text_notes  # where sparkplay takes the hub's token from instead
    if "api-key" in text:
        assert "0600 env file" in text_notes and "serve_api_key" not in text_notes


def test_the_secret_flag_rule_leaves_flags_that_only_look_alike():
    from sparkplay.recipes import secrets

    kept = ["--max-tokens", "4", "--tokenizer", "t", "--skip-tokenizer-init", "--max-num-batched-tokens", "8"]
    assert secrets.without_flags(kept) == (kept, [])
    args, out = secrets.without_flags(["--hf-token", "x", "--port", "1", "--API-KEY=y", "--auth-token", "z"])
    assert args == ["--port", "1"] and out == ["--hf-token", "--API-KEY", "--auth-token"]


@pytest.mark.parametrize(
    ("name", "named", "not_named"),
    [
        ("page-volume-plugin.md", ["--reasoning-parser-plugin /tmp/my_parser.py: a file in the volume /tmp"], []),
        (
            "compose-volume-template.yml",
            ["--chat-template /templates/chat.jinja: a file in the volume /templates"],
            ["/opt/image/plugin.py"],  # no volume holds it: the image may
        ),
        (
            "docker-mount-plugin.sh",
            ["--reasoning-parser-plugin /parsers/think.py: a file in the volume /parsers"],
            ["/usr/local/lib/plugins/tools.py"],
        ),
    ],
)
def test_a_flag_naming_a_file_in_a_volume_sparkplay_does_not_mount_is_said_at_import(name, named, not_named):
    """A page's `-v /tmp:/tmp` was named as not applied, but the plugin file in it was kept without a word:
    the engine would fail at its start, long after the import said nothing."""
    doc = imported(name)
    text = all_notes(doc)
    for line in named:
        assert line in text and "will not find it and will not start" in text, text
    for path in not_named:
        assert f"{path}: a file in the volume" not in text
    assert "the Hugging Face cache" in text or name != "compose-volume-template.yml"


def test_a_llama_cpp_line_without_an_alias_says_the_plan_gives_it_the_recipes_name(tmp_path):
    """The plan adds `--alias NAME` to llama-server's argv; a source that named none was not told so."""
    pinned = ("model.revision=" + "a" * 40, "model.path=gemma-3-1b-it-Q4_K_M.gguf")
    source = tmp_path / "line.sh"
    source.write_text("llama-server -hf ggml-org/gemma-3-1b-it-GGUF -c 4096\n")
    doc = importing.import_source(str(source), sets=pinned)
    said = notes(doc, "derived")["model.served_name"]
    assert "no --alias" in said and f"({doc['name']}, --alias)" in said
    source.write_text("llama-server -hf ggml-org/gemma-3-1b-it-GGUF -c 4096 --alias gemma\n")
    doc = importing.import_source(str(source), sets=pinned)
    assert doc["model"]["served_name"] == "gemma" and "no --alias" not in all_notes(doc)


# -- a model's vllm_profile.conf (dgx-spark-vllm's runner: PROFILE_* variables, the model from its folder) ------


def test_a_vllm_profile_imports_as_its_runner_starts_it_with_the_model_from_its_folder():
    doc = imported("profiles/nvidia--Fixture-Model-NVFP4/vllm_profile.conf")
    assert doc["engine"]["name"] == "vllm" and doc["engine"]["image"] == "vllm/vllm-openai:v0.18.0"
    assert doc["model"]["repo"] == "nvidia/Fixture-Model-NVFP4" and doc["context_length"] == 65536
    args = doc["serve"]["args"]
    # the runner's order: the model, --trust-remote-code, then a flag per variable, its defaults, the extra args
    assert args[:1] == ["--trust-remote-code"]
    for flag, value in (("--gpu-memory-utilization", "0.9"), ("--max-num-seqs", "8"), ("--kv-cache-dtype", "fp8")):
        assert args[args.index(flag) + 1] == value, flag
    assert {
        "--enforce-eager",
        "--enable-prefix-caching",
        "--enable-chunked-prefill",
        "--enable-auto-tool-choice",
    } <= set(args)
    assert args[args.index("--tool-call-parser") + 1] == "hermes"
    assert args[args.index("--reasoning-parser") + 1] == "deepseek_r1"
    # a bash array of extra arguments, its JSON kept byte for byte
    assert args[args.index("--speculative-config") + 1] == '{"method":"mtp","num_speculative_tokens":2}'
    assert doc["serve"]["env"]["VLLM_ENGINE_CORE_STARTUP_TIMEOUT"] == "300"
    notes = all_notes(doc)
    assert "model from the profile's folder: nvidia/Fixture-Model-NVFP4" in notes
    assert "/hf_models/nvidia--Fixture-Model-NVFP4" in notes  # what the runner would have served it as
    assert "PROFILE_USE_V2_MODEL_RUNNER" in notes  # a variable the runner read does not use: named, not silent


def test_a_profile_that_says_little_gets_the_runners_own_defaults_and_says_whose_image():
    doc = imported("profiles/acme--Tiny-Defaults/vllm_profile.conf")
    args = doc["serve"]["args"]
    assert doc["engine"]["image"] == "vllm/vllm-openai:v0.19.0" and doc["model"]["repo"] == "acme/Tiny-Defaults"
    assert args[args.index("--gpu-memory-utilization") + 1] == "0.85" and doc["context_length"] == 32768
    assert args[args.index("--max-num-seqs") + 1] == "4" and "--trust-remote-code" not in args
    assert "the runner's own default, vllm/vllm-openai:v0.19.0" in all_notes(doc)


@pytest.mark.parametrize(
    ("fixture", "says"),
    [
        ("profiles/acme--Not-Vllm/vllm_profile.conf", r"does not run on vLLM.*needs kernels vLLM lacks"),
        ("profiles/vllm_profile.conf", r"names no model: its runner serves the folder.*<owner>--<name>"),
        ("profiles/acme--Hostile-Env/vllm_profile.conf", r"PROFILE_DOCKER_ENV holds '--privileged', not NAME=VALUE"),
        (
            "profiles/acme--Hostile-Image/vllm_profile.conf",
            r"PROFILE_DOCKER_IMAGE holds '-v /:/host .*no image reference",
        ),
    ],
)
def test_a_profile_that_cannot_be_served_is_one_line_naming_why(fixture, says):
    with pytest.raises(BadInput, match=says):
        imported(fixture)


# -- eugr's run-recipe.sh: the recipe it names, beside it, with its overrides --------------------------------


def test_a_run_recipe_wrapper_imports_its_recipe_with_the_overrides_run_recipe_applies():
    doc = imported("eugr-checkout/serve-solo.sh")
    assert doc["source"]["kind"] == "sparkrun" and doc["source"]["location"].endswith("eugr-checkout/serve-solo.sh")
    assert doc["source"]["launch"].endswith("eugr-checkout/recipes/gemma-like.yaml")  # the file it runs
    assert doc["topology"]["nodes"] == 1 and doc["topology"]["tensor_parallel"] == 1  # --solo: TP 1 without --tp
    args = doc["serve"]["args"]
    assert doc["serve"]["port"] == 9000 and args[args.index("--gpu-memory-utilization") + 1] == "0.7"
    assert "--distributed-executor-backend" not in args  # as run-recipe.py strips it in solo mode
    assert doc["serve"]["env"]["NCCL_DEBUG"] == "INFO" and doc["model"]["served_name"] == "my-api"
    # the recipe's JSON flags as the recipe wrote them, its doubled braces collapsed once
    assert args[args.index("--speculative-config") + 1] == '{"method":"mtp","num_speculative_tokens":3}'
    notes = all_notes(doc)
    assert "the wrapper sets port=9000, gpu_memory_utilization=0.7, tensor_parallel=1" in notes
    assert "the wrapper appends to the command: --served-model-name my-api" in notes


def test_a_cluster_wrapper_keeps_its_ray_back_end_and_names_the_options_sparkplay_decides():
    doc = imported("eugr-checkout/serve-cluster.sh")
    args = doc["serve"]["args"]
    assert doc["topology"]["nodes"] == 2 and args[args.index("--distributed-executor-backend") + 1] == "ray"
    assert doc["context_length"] == 32768
    assert "not applied, as sparkplay decides them" in all_notes(doc) and "-n 10.0.0.1,10.0.0.2" in all_notes(doc)
    assert "--setup" in all_notes(doc)


@pytest.mark.parametrize(
    ("words", "says"),
    [
        (["r", "--port"], "--port needs a value"),
        (["r", "--tp", "two"], "--tp 'two' is not a number"),
        (["r", "-e", "NOT AN ENV"], "is not VAR=VALUE"),
    ],
)
def test_a_wrapper_line_it_cannot_read_is_one_line(words, says):
    from sparkplay.recipes.importers.pasted import wrapper

    with pytest.raises(BadInput, match=says):
        wrapper.parse(words, "line 1")


# -- a script that runs `docker compose run|up SERVICE`: the service, from the compose file beside it ---------


def test_docker_compose_run_in_a_script_imports_its_service_with_runs_command_and_environment():
    doc = imported("compose-checkout/start.sh")
    assert doc["source"]["kind"] == "compose" and doc["source"]["launch"] == "service vllm"
    assert doc["model"]["repo"] == "Qwen/Qwen3-8B" and doc["context_length"] == 8192  # run's command replaces
    assert doc["serve"]["env"] == {"VLLM_ATTENTION_BACKEND": "FLASHINFER", "HF_HUB_OFFLINE": "1"}
    notes = all_notes(doc)
    assert "docker compose run vllm from" in notes and "command replaces the service's" in notes
    assert "not applied, as sparkplay's units decide them: --rm, -d, -p 8000:8000" in notes


def test_compose_v1s_up_of_one_service_imports_that_service_as_the_file_has_it():
    doc = imported("compose-checkout/up.sh")
    assert doc["model"]["repo"] == "Qwen/Qwen3-8B" and doc["context_length"] == 32768
    assert "extra.compose.services" not in all_notes(doc)  # the web UI is not what the script starts


def test_a_shell_in_a_container_sees_the_containers_environment_and_nothing_more(tmp_path):
    """`docker exec -e NAME=VALUE CONTAINER bash -c '... $NAME ...'` (NVIDIA's playbooks run their servers so):
    the shell starts with the container's environment, from docker run's -e and exec's; a name neither sets
    is still refused, naming it."""
    text = (
        "docker run -d --name eng --gpus all -e TP=2 vllm/vllm-openai:v0.11.0 sleep infinity\n"
        "docker exec -e MODEL=example-org/m-7b eng bash -c 'vllm serve $MODEL --tensor-parallel-size $TP'\n"
    )
    (tmp_path / "exec.sh").write_text(text)
    doc = importing.import_source(str(tmp_path / "exec.sh"))
    assert doc["model"]["repo"] == "example-org/m-7b" and doc["topology"]["tensor_parallel"] == 2
    (tmp_path / "unset.sh").write_text(text.replace("$TP", "$PP"))
    with pytest.raises(BadInput, match=r"uses \$PP, which the text never sets"):
        importing.import_source(str(tmp_path / "unset.sh"))
