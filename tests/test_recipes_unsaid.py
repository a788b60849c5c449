"""What a pasted text leaves to whoever runs it, read as a user expects and said: the image of an engine run from
the host's own install, a script's arguments, settings whose value the shell supplies, a JSON value written over
several lines, and the shapes of pages. Each case is a text of the kind found in real repositories (written
here, from bash's and Compose's rules); the hostile and unreadable ones are still refused."""

from __future__ import annotations

from pathlib import Path

import pytest

from sparkplay import importing
from sparkplay.engines import registry
from sparkplay.engines.plan import Options, build, stand_in_nodes
from sparkplay.errors import BadInput


def imported(tmp_path: Path, text: str, name: str = "run.sh") -> dict:
    (tmp_path / name).write_text(text)
    return importing.import_source(str(tmp_path / name))


def said(doc: dict, key: str, how: str) -> str:
    return "\n".join(p["detail"] for p in doc["provenance"] if p["key"] == key and p["how"] == how)


# -- the image of an engine the text runs from the host's own install -------------------------------------


@pytest.mark.parametrize(
    ("engine", "line"),
    [
        ("vllm", "vllm serve Qwen/Qwen3-8B --max-model-len 8192"),
        ("vllm", "source .venv/bin/activate\npython -m vllm.entrypoints.openai.api_server --model Qwen/Qwen3-8B"),
        ("sglang", "python3 -m sglang.launch_server --model-path Qwen/Qwen3-8B --context-length 8192"),
        ("trtllm", "trtllm-serve Qwen/Qwen3-8B --backend pytorch --max_seq_len 8192"),
    ],
)
def test_an_engine_run_outside_a_container_runs_in_its_pinned_default_image_said(tmp_path, engine, line):
    doc = imported(tmp_path, line + "\n")
    default = registry.spec(engine).defaults.image
    assert doc["engine"]["name"] == engine and doc["engine"]["image"] == default
    assert ":" in default and not default.endswith(":latest")  # pinned: every rank and run the same
    note = said(doc, "engine.image", "filled")
    assert f"the source names no image: {default}" in note and "--set engine.image=IMAGE" in note
    plan = build(doc, stand_in_nodes(1), Options(model_root="/m", allow=None))
    assert default in str(plan)


def test_a_default_image_is_one_the_inventory_trusts_without_asking():
    from sparkplay import boundary

    for engine in ("vllm", "sglang", "trtllm"):
        assert boundary.image_trusted(registry.spec(engine).defaults.image, boundary.TRUSTED_IMAGES)


def test_an_image_the_text_names_wins_and_llama_cpp_needs_none(tmp_path, monkeypatch):
    from sparkplay.recipes.importers.pasted import gguf_hub

    doc = imported(tmp_path, "docker run --gpus all vllm/vllm-openai:v0.11.2 Qwen/Qwen3-8B\n")
    assert doc["engine"]["image"] == "vllm/vllm-openai:v0.11.2" and not said(doc, "engine.image", "filled")
    monkeypatch.setattr(gguf_hub, "LISTER", lambda repo, rev: ("a" * 40, ["Qwen3-8B-Q4_K_M.gguf"]))
    native = imported(tmp_path, "llama-server -hf Qwen/Qwen3-8B-GGUF:Q4_K_M\n", "ll.sh")
    assert native["engine"]["runtime"] == "native" and native["engine"]["image"] is None


@pytest.mark.parametrize(
    ("text", "refusal"),
    [
        # an image that is no reference is the source's own mistake, refused as such
        ("docker run --gpus all 'bad image' vllm serve Qwen/Qwen3-8B\n", r"engine\.image"),
    ],
)
def test_an_image_the_text_means_but_does_not_name_is_still_asked_for(tmp_path, text, refusal):
    with pytest.raises(BadInput, match=refusal):
        imported(tmp_path, text)


def test_an_engine_run_in_a_container_the_text_does_not_start_runs_in_the_default_image_said(tmp_path):
    """`docker exec` into a container another page or script started: its image is not in the text, so the
    engine's default is used, as for an engine run from the host's own install, and said with the flag that
    names the container's own."""
    doc = imported(tmp_path, "docker exec -it vllm_node bash -c 'vllm serve Qwen/Qwen3-8B --max-model-len 8192'\n")
    assert doc["engine"]["image"] == registry.spec("vllm").defaults.image
    notes = said(doc, "engine.image", "derived") + said(doc, "engine.image", "filled")
    assert "the container vllm_node, which the text does not start: its image is not in the text" in notes
    assert "--set engine.image=IMAGE" in notes


def test_a_compose_service_that_builds_its_image_gets_no_default(tmp_path):
    text = "services:\n  vllm:\n    build: .\n    command: vllm serve Qwen/Qwen3-8B\n"
    with pytest.raises(BadInput, match=r"engine\.image cannot be determined"):
        imported(tmp_path, text, "compose.yaml")


# -- a script's arguments -----------------------------------------------------------------------------------


def test_a_script_is_read_as_run_with_no_arguments_its_defaults_taken_and_said(tmp_path):
    text = (
        "#!/bin/bash\n# Usage: ./run.sh [model] [extra vllm args]\n"
        'MODEL="${1:-Qwen/Qwen3-8B}"\nshift || true\nEXTRA="$@"\nTAG=${2:+--tag}\n'
        'docker run --gpus all vllm/vllm-openai:v0.11.2 "$MODEL" --max-model-len 8192 $EXTRA $TAG "$@"\n'
    )
    doc = imported(tmp_path, text)
    assert doc["model"]["repo"] == "Qwen/Qwen3-8B"
    assert "--tag" not in doc["serve"]["args"] and "$@" not in " ".join(doc["serve"]["args"])
    note = said(doc, "serve.args", "derived")
    assert "read as run with no arguments: ${1:-...} is 'Qwen/Qwen3-8B', $@ is empty" in note


@pytest.mark.parametrize("use", ['"$1"', '"${1}"', '"${1:?give a model}"'])
def test_an_argument_without_a_default_is_still_refused_naming_it(tmp_path, use):
    with pytest.raises(BadInput, match=r"uses \$1, which the text never sets"):
        imported(tmp_path, f"vllm serve {use} --max-model-len 8192\n")


# -- settings whose value the shell supplies ---------------------------------------------------------------


def test_an_environment_setting_the_shell_supplies_is_left_out_and_named(tmp_path):
    text = (
        "export HOST_UID=$(id -u)\n"
        "docker run --gpus all -e HOST_UID=$HOST_UID -e RANK_IP=$NODE_IP -e VLLM_LOGGING_LEVEL=INFO "
        "vllm/vllm-openai:v0.11.2 Qwen/Qwen3-8B\n"
    )
    doc = imported(tmp_path, text)
    assert doc["serve"]["env"] == {"VLLM_LOGGING_LEVEL": "INFO"}
    note = said(doc, "serve.env", "ignored")
    assert "HOST_UID=$(...): its value comes from the shell that runs the text" in note
    assert "RANK_IP=$NODE_IP" in note and "--set serve.env.RANK_IP=VALUE" in note


def test_a_cache_in_the_hosts_home_means_nothing_in_the_container(tmp_path):
    text = "export VLLM_CACHE_ROOT=${HOME}/.cache/vllm\nCUDA_VISIBLE_DEVICES=$GPU vllm serve Qwen/Qwen3-8B\n"
    doc = imported(tmp_path, text)
    assert doc["serve"]["env"] == {}
    note = said(doc, "serve.env", "ignored")
    assert "VLLM_CACHE_ROOT=$HOME/.cache/vllm: a path in the home of whoever ran the engine on the host" in note
    assert "CUDA_VISIBLE_DEVICES=$GPU: its value comes from the shell" in note


def test_a_secret_the_shell_supplies_is_the_secret_rules_and_a_flag_the_shell_supplies_is_refused(tmp_path):
    doc = imported(tmp_path, "HF_TOKEN=$HF_TOKEN vllm serve Qwen/Qwen3-8B\n")
    assert "HF_TOKEN" not in doc["serve"]["env"] and "a secret is never stored" in said(doc, "serve.env", "ignored")
    with pytest.raises(BadInput, match=r"uses \$PORT, which the text never sets"):
        imported(tmp_path, "vllm serve Qwen/Qwen3-8B --port $PORT\n", "port.sh")


def test_docker_compose_run_does_not_interpolate_what_the_shell_already_expanded(tmp_path):
    (tmp_path / "compose.yaml").write_text(
        "services:\n  vllm:\n    image: vllm/vllm-openai:v0.11.2\n    environment:\n      - A=${NOT_SET:-x}\n"
    )
    text = "docker compose run --rm -e PS1='a$b' vllm Qwen/Qwen3-8B --chat-template-content-format 'x$y'\n"
    doc = imported(tmp_path, text)
    assert "x$y" in doc["serve"]["args"] and doc["serve"]["env"]["PS1"] == "a$b"
    assert doc["serve"]["env"]["A"] == "x"  # the compose file's own text is interpolated, as Compose does


# -- a JSON value over several lines -----------------------------------------------------------------------


@pytest.mark.parametrize("form", ["--compilation-config '{json}'", "--compilation-config='{json}'"])
def test_a_json_value_written_over_several_lines_is_the_same_value_on_one(tmp_path, form):
    value = '{\n    "custom_ops": ["+quant_fp8", "+rms_norm"],\n    "cudagraph_mode": "FULL_DECODE_ONLY"\n}'
    text = "vllm serve Qwen/Qwen3-8B " + form.replace("{json}", value) + "\n"
    doc = imported(tmp_path, text)
    one = '{"custom_ops": ["+quant_fp8", "+rms_norm"], "cudagraph_mode": "FULL_DECODE_ONLY"}'
    assert one in doc["serve"]["args"] or f"--compilation-config={one}" in doc["serve"]["args"]
    assert "--compilation-config written on one line" in said(doc, "serve.args", "cleaned")


def test_a_value_over_several_lines_that_is_no_json_is_still_refused(tmp_path):
    with pytest.raises(BadInput, match=r"holds a control character or a line break"):
        imported(tmp_path, "vllm serve Qwen/Qwen3-8B --chat-template 'line one\nline two'\n")


# -- pages ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "head",
    [
        "# Results\n\nStatus: first row.\nTarget: gemma\n\n",  # `Key: value` lines read as YAML keys
        "---\ntitle: Serving Qwen\ndate: 2026-06-01\n---\n\n",  # a blog's front matter
    ],
)
def test_a_markdown_page_whose_lines_look_like_yaml_is_read_as_a_page(tmp_path, head):
    text = head + "Run it:\n\n```bash\nvllm serve Qwen/Qwen3-8B --max-model-len 8192\n```\n"
    doc = imported(tmp_path, text, "page.md")
    assert doc["source"]["kind"] == "page" and doc["model"]["repo"] == "Qwen/Qwen3-8B"


def test_a_markdown_page_with_no_code_block_says_so(tmp_path):
    text = "# Campaign log\n\n## 2026-06-07\n\n- Added **SGLang** as a runtime: see [notes](notes.md).\n- Tuned it.\n"
    with pytest.raises(BadInput, match=r"is a Markdown page with no code block"):
        imported(tmp_path, text, "log.md")


# -- what follows from the text alone: a case on a settled word, a pure command's output ----------------------

PRESETS = """#!/bin/bash
# Usage: ./serve.sh [preset]   (presets: nomic, nemotron, custom MODEL)
PRESET="${1:-nomic}"
case "$PRESET" in
  nomic|nomic-v1*)
    MODEL="nomic-ai/nomic-embed-text-v1.5"
    EXTRA="--runner pooling --served-model-name $(basename "$MODEL")"
    ;;
  "nemotron")
    MODEL="nvidia/llama-nemotron-embed-1b-v2"
    case "$MODEL" in nvidia/*) EXTRA="--trust-remote-code" ;; esac
    ;;
  custom) MODEL="${2:?Usage: $0 custom org/model}" ;;
  *) echo "unknown preset $PRESET"; exit 1 ;;
esac
vllm serve "$MODEL" --max-model-len 8192 $EXTRA
"""


def test_a_preset_script_runs_the_branch_its_default_preset_takes(tmp_path):
    doc = imported(tmp_path, PRESETS)
    assert doc["model"]["repo"] == "nomic-ai/nomic-embed-text-v1.5"
    assert doc["serve"]["args"][-4:] == ["--runner", "pooling", "--served-model-name", "nomic-embed-text-v1.5"]
    note = said(doc, "serve.args", "derived")
    assert "its case on 'nomic' took the branch nomic|nomic-v1*)" in note
    assert "${1:-...} is 'nomic'" in note and "without running its conditions" not in note


@pytest.mark.parametrize(
    ("preset", "repo", "extra"),
    [
        ("nemotron", "nvidia/llama-nemotron-embed-1b-v2", ["--trust-remote-code"]),  # a nested case, settled too
        ("nomic-v1.5", "nomic-ai/nomic-embed-text-v1.5", ["--runner", "pooling"]),  # a glob pattern
    ],
)
def test_each_preset_is_matched_as_bash_matches_it(tmp_path, preset, repo, extra):
    doc = imported(tmp_path, PRESETS.replace("${1:-nomic}", "${1:-" + preset + "}"))
    assert doc["model"]["repo"] == repo and doc["serve"]["args"][2 : 2 + len(extra)] == extra


def test_a_quoted_pattern_matches_only_itself_and_an_unsettled_case_is_skipped(tmp_path):
    quoted = 'P=n\ncase $P in "n*") M=wrong/glob ;; n*) M=right/glob ;; esac\nvllm serve $M\n'
    assert imported(tmp_path, quoted)["model"]["repo"] == "right/glob"
    with pytest.raises(BadInput, match=r"uses \$MODEL, which the text never sets"):  # no default: none taken
        imported(tmp_path, PRESETS.replace("${1:-nomic}", "$1"), "bare.sh")
    with pytest.raises(BadInput, match=r"uses \$2, which the text never sets"):  # the custom branch needs $2
        imported(tmp_path, PRESETS.replace("${1:-nomic}", "${1:-custom}"), "custom.sh")


@pytest.mark.parametrize(
    ("substitution", "value"),
    [
        ('$(basename "$M")', "x.gguf"),
        ("$(basename $M .gguf)", "x"),
        ("$(dirname $M)", "/models/org"),
        ("$(basename $(dirname $M))", "org"),
        ("$(echo served)", "served"),
    ],
)
def test_a_pure_command_on_settled_words_is_its_output(tmp_path, substitution, value):
    doc = imported(tmp_path, f"M=/models/org/x.gguf\nvllm serve Qwen/Qwen3-8B --served-model-name {substitution}\n")
    assert doc["model"]["served_name"] == value


@pytest.mark.parametrize(
    "substitution", ["$(id -u)", "$(echo $UNSET)", "$(echo a | tr a b)", "$(basename -a x y)", "$(echo -n x)"]
)
def test_any_other_substitution_is_still_refused(tmp_path, substitution):
    with pytest.raises(BadInput, match=r"command substitution"):
        imported(tmp_path, f"vllm serve Qwen/Qwen3-8B --served-model-name {substitution}\n")


# -- functions: a body read where the text calls it -----------------------------------------------------------

LAUNCHER = """#!/bin/bash
set -euo pipefail
MODEL="Qwen/Qwen3-8B"

log() { echo "[$(date)] $*"; }

start_server() {
    local port="${1:-8000}"
    log "starting on $port"
    docker run --gpus all vllm/vllm-openai:v0.11.2 "$MODEL" --port "$port" "${@:2}"
}

function unused {
    vllm serve some/other-model
}

main() {
    start_server 9000 --max-model-len 16384 --enable-prefix-caching
}

main "$@"
"""


def test_a_launcher_whose_engine_starts_in_a_function_reads_it_where_it_is_called(tmp_path):
    doc = imported(tmp_path, LAUNCHER)
    assert doc["model"]["repo"] == "Qwen/Qwen3-8B" and doc["serve"]["port"] == 9000
    assert doc["context_length"] == 16384 and "--enable-prefix-caching" in doc["serve"]["args"]
    note = said(doc, "serve.args", "derived")
    assert "the function start_server read where the text calls it" in note and "function main" in note
    assert "other-model" not in str(doc)  # a function never called is never read


def test_a_function_called_twice_is_two_launches_and_one_calling_itself_is_bounded(tmp_path):
    twice = LAUNCHER.replace('main "$@"', "start_server 9001\nstart_server 9002")
    (tmp_path / "twice.sh").write_text(twice)
    docs = importing.import_sources(str(tmp_path / "twice.sh"))  # one run after the other: two choices
    assert [d["serve"]["port"] for d in docs] == [9001, 9002] and len({d["name"] for d in docs}) == 2
    looping = 'f() { echo "$1"; f "x$1"; }\nf a\nvllm serve Qwen/Qwen3-8B\n'
    assert imported(tmp_path, looping, "loop.sh")["model"]["repo"] == "Qwen/Qwen3-8B"


# -- a launcher with its profile: the arguments a script is run with, the files it sources -------------------

LAUNCH = """#!/usr/bin/env bash
# Serve one model on this node.   scripts/launch.sh recipes/<model>.env
set -euo pipefail
cd "$(dirname "$0")/.."
[ -f .env ] && . ./.env
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
RECIPE=${1:?usage: launch.sh recipes/<model>.env}
SERVE_ARGS=() MODS=()
. "$RECIPE"
exec docker run --gpus all "$IMAGE" vllm serve "$MODEL" --port "$PORT" "${SERVE_ARGS[@]}" ${MODS[@]+"${MODS[@]}"}
"""
PROFILE = """# one small dense model
MODEL=Qwen/Qwen3-8B
SERVE_ARGS=(
  # a sizing knob, not a speed knob
  --gpu-memory-utilization 0.7
  --max-model-len 32768
)
"""


def repository(tmp_path: Path) -> Path:
    """A launcher repository as users keep one: scripts/, its helpers, recipes/ of profiles, a .env of secrets."""
    (tmp_path / "scripts" / "lib").mkdir(parents=True)
    (tmp_path / "recipes").mkdir()
    (tmp_path / "scripts" / "launch.sh").write_text(LAUNCH)
    (tmp_path / "scripts" / "lib" / "common.sh").write_text("IMAGE=vllm/vllm-openai:v0.11.2\nPORT=8011\n")
    (tmp_path / "recipes" / "qwen3-8b.env").write_text(PROFILE)
    (tmp_path / ".env").write_text("HF_TOKEN=hf_secret_from_dotenv\nPORT=9999\n")
    return tmp_path / "scripts" / "launch.sh"


def test_a_launcher_imports_as_run_with_its_profile_and_says_which_files_it_read(tmp_path):
    script = repository(tmp_path)
    doc = importing.import_source(str(script), arguments=["recipes/qwen3-8b.env"])
    assert doc["model"]["repo"] == "Qwen/Qwen3-8B" and doc["engine"]["image"] == "vllm/vllm-openai:v0.11.2"
    assert doc["serve"]["port"] == 8011 and doc["context_length"] == 32768  # not the .env's port: never read
    assert doc["knobs"]["gpu_memory_utilization"] == 0.7
    note = said(doc, "serve.args", "derived")
    assert "read scripts/lib/common.sh (sha256 " in note and "read recipes/qwen3-8b.env (sha256 " in note
    assert "read as run with the arguments recipes/qwen3-8b.env" in note
    assert "hf_secret" not in str(doc) and "read .env" not in note


def test_a_launcher_run_without_its_argument_says_which_one_it_needs(tmp_path):
    with pytest.raises(BadInput, match=r"--arg VALUE \(it needs \$1 \(usage: launch\.sh recipes/<model>\.env\)\)"):
        importing.import_source(str(repository(tmp_path)))


@pytest.mark.parametrize(
    "target",
    [
        "/etc/passwd",  # outside the repository
        "../outside.sh",  # above the script's folder's parent
        "recipes/.hidden.env",  # a hidden file
        ".ssh/profile.sh",  # in a hidden folder
        "recipes/link.env",  # a link out of the repository
        "recipes/big.env",  # larger than a profile is
        "recipes/binary.env",  # no text
    ],
)
def test_a_script_sources_only_small_text_files_of_its_own_repository(tmp_path, target):
    root = tmp_path / "repo"
    script = repository(root)
    (tmp_path / "outside.sh").write_text("MODEL=evil/outside\n")
    (root / "recipes" / ".hidden.env").write_text("MODEL=evil/hidden\n")
    (root / ".ssh").mkdir()
    (root / ".ssh" / "profile.sh").write_text("MODEL=evil/ssh\n")
    (root / "recipes" / "link.env").symlink_to(tmp_path / "outside.sh")
    (root / "recipes" / "big.env").write_text("MODEL=evil/big\n" + "#" * (300 * 1024))
    (root / "recipes" / "binary.env").write_bytes(b"MODEL=evil/binary\n\0\0")
    script.write_text(LAUNCH.replace('. "$RECIPE"', f'. "$RECIPE"\nsource {target}'))
    doc = importing.import_source(str(script), arguments=["recipes/qwen3-8b.env"])
    assert doc["model"]["repo"] == "Qwen/Qwen3-8B" and "evil" not in str(doc["model"])
    assert f"read {target}" not in said(doc, "serve.args", "derived")


def test_arguments_are_for_scripts_only(tmp_path):
    (tmp_path / "compose.yaml").write_text(
        "services:\n  v:\n    image: vllm/vllm-openai:v0.11.2\n    command: Qwen/Qwen3-8B\n"
    )
    with pytest.raises(BadInput, match=r"is no script: --arg gives a script its arguments"):
        importing.import_source(str(tmp_path / "compose.yaml"), arguments=["x"])


def test_the_cli_imports_a_launcher_with_its_profile(tmp_path):
    from tests.test_recipes import cli

    project = tmp_path / "project"
    (project / "playbooks").mkdir(parents=True)
    (project / "ansible.cfg").write_text("[defaults]\n")
    script = repository(tmp_path / "repo")
    proc = cli(project, "recipe", "import", str(script), "--arg", "recipes/qwen3-8b.env", "--name", "qwen")
    assert proc.returncode == 0, proc.stderr
    assert "Qwen/Qwen3-8B" in (project / "recipes" / "qwen.yml").read_text()


# -- tests, && / ||, if and for on values the text sets -----------------------------------------------------

FLOW = """#!/bin/bash
ENABLE_TOOLS="${ENABLE_TOOLS:-1}"
MODE=single
ARGS=(--max-model-len 16384)
if [ "${ENABLE_TOOLS}" = "1" ]; then
  ARGS+=(--enable-auto-tool-choice --tool-call-parser hermes)
else
  ARGS+=(--disable-tools)
fi
if [ "$MODE" = "cluster" ]; then
  ARGS+=(--tensor-parallel-size 2)
elif [[ $MODE == single ]]; then
  ARGS+=(--tensor-parallel-size 1)
  if [ 4 -gt 8 ]; then ARGS+=(--nope); fi
else
  ARGS+=(--nope-either)
fi
EXTRA=""
[ -z "$EXTRA" ] || ARGS+=(--never "$EXTRA")
[ -n "$ENABLE_TOOLS" ] && ARGS+=(--enable-prefix-caching)
ENVS=()
for kv in VLLM_LOGGING_LEVEL=INFO "VLLM_USE_V1=1"; do [ -z "$kv" ] || ENVS+=(-e "$kv"); done
MODS=()
for m in "${MODS[@]:-}"; do [ -z "$m" ] || ENVS+=(-v "$m:/mods"); done
docker run --gpus all "${ENVS[@]}" vllm/vllm-openai:v0.11.2 Qwen/Qwen3-8B "${ARGS[@]}"
"""


def test_conditions_and_loops_on_values_the_text_sets_run_as_bash_runs_them(tmp_path):
    doc = imported(tmp_path, FLOW)
    args = doc["serve"]["args"]
    assert "--enable-auto-tool-choice" in args and "--enable-prefix-caching" in args
    assert not {"--disable-tools", "--nope", "--nope-either", "--never"} & set(args)
    assert doc["topology"]["tensor_parallel"] == 1 and doc["context_length"] == 16384
    assert doc["serve"]["env"] == {"VLLM_LOGGING_LEVEL": "INFO", "VLLM_USE_V1": "1"}
    note = said(doc, "serve.args", "derived")
    assert "its tests on values it sets were followed: [ 1 = 1 ] is true" in note
    assert "its loop over VLLM_LOGGING_LEVEL=INFO VLLM_USE_V1=1 read once for each" in note
    assert "without running its conditions" not in note  # every one was settled


@pytest.mark.parametrize(
    "condition",
    ["[ -f /etc/vllm.conf ]", "command -v nvidia-smi", '[ "$GPU" = "gb10" ]', "[[ $MODE == s* ]]", "[ -n x -a -n y ]"],
)
def test_a_condition_the_text_cannot_settle_is_read_straight_through_and_said(tmp_path, condition):
    text = f"MODE=single\nA=--first\nif {condition}; then A=--then; else A=--else; fi\nvllm serve Qwen/Qwen3-8B $A\n"
    doc = imported(tmp_path, text)
    assert "--else" in doc["serve"]["args"]  # both branches read, in order: the last one set it
    assert "without running its conditions or loops" in said(doc, "serve.args", "derived")


def test_a_loop_over_what_the_text_cannot_settle_is_read_once(tmp_path):
    text = 'for f in /models/*.gguf; do M="$f"; done\nvllm serve Qwen/Qwen3-8B --served-model-name "$M"\n'
    with pytest.raises(BadInput, match=r"uses \$f|uses \$M"):
        imported(tmp_path, text)


def test_a_default_in_quotes_is_the_word_without_them(tmp_path):
    """bash removes the quotes of `${VAR:-"word"}`'s word (NVIDIA's txt2kg scripts write every default so):
    the value is 0.0.0.0, not "0.0.0.0" with its quotes."""
    text = (
        'VLLM_MODEL=${VLLM_MODEL:-"meta-llama/Llama-3.1-8B-Instruct"}\nHOST=${HOST:-"0.0.0.0"}\n'
        'DTYPE="${DTYPE:-\'auto\'}"\nNAME=${NAME:-"llama 8b"}\n'
        'vllm serve $VLLM_MODEL --host $HOST --kv-cache-dtype "$DTYPE" --served-model-name "$NAME"\n'
    )
    doc = imported(tmp_path, text)
    assert doc["model"]["repo"] == "meta-llama/Llama-3.1-8B-Instruct" and doc["model"]["served_name"] == "llama 8b"
    assert "'auto'" in doc["serve"]["args"]  # in double quotes a single quote is a character, as bash keeps it
    assert not any('"' in arg for arg in doc["serve"]["args"])


@pytest.mark.parametrize("line", ["vllm serve google/gemma-4-12b ...", "vllm serve … --max-model-len 8192"])
def test_a_command_that_leaves_out_the_rest_of_itself_is_refused_not_run_with_the_dots(tmp_path, line):
    page = f"# Serving\n\nThe rest as before:\n\n```bash\n{line}\n```\n"
    with pytest.raises(BadInput, match=r"holds (\.\.\.|…) where the text leaves out the rest of it; give the whole"):
        imported(tmp_path, page, "page.md")


# -- a compose project's .env ----------------------------------------------------------------------------------

COMPOSE_ENV = """services:
  vllm:
    image: ghcr.io/${GH_USER}/vllm-spark:${TAG:-v1}
    environment:
      - RAY_NODE_IP_ADDRESS=${NODE_IP}
      - HUGGING_FACE_HUB_TOKEN=${HF_TOKEN}
    command: vllm serve ${MODEL} --max-model-len ${MAX_LEN:-8192}
"""


def test_a_compose_file_is_interpolated_with_its_projects_env_as_compose_does(tmp_path):
    (tmp_path / "compose.yaml").write_text(COMPOSE_ENV)
    (tmp_path / ".env").write_text(
        "# the project's settings\nGH_USER=alice\nexport MODEL='Qwen/Qwen3-8B'\nMAX_LEN=\"16384\"\n"
        "NODE_IP=$(hostname -I)\nHF_TOKEN=hf_secret_value\n"
    )
    doc = importing.import_source(str(tmp_path / "compose.yaml"))
    assert doc["engine"]["image"] == "ghcr.io/alice/vllm-spark:v1" and doc["model"]["repo"] == "Qwen/Qwen3-8B"
    assert doc["context_length"] == 16384 and "hf_secret_value" not in str(doc)
    note = said(doc, "source", "derived")
    assert "GH_USER, MODEL, MAX_LEN), as Compose reads its project's .env" in note
    assert "not read from it: HF_TOKEN, NODE_IP" in note
    assert "RAY_NODE_IP_ADDRESS=$NODE_IP" in said(doc, "serve.env", "ignored")


def test_without_its_env_or_with_a_linked_one_the_compose_file_asks_for_what_it_names(tmp_path):
    (tmp_path / "compose.yaml").write_text(COMPOSE_ENV)
    with pytest.raises(BadInput, match=r"uses \$(MODEL|GH_USER), which the text never sets"):
        importing.import_source(str(tmp_path / "compose.yaml"))
    (tmp_path / "elsewhere.env").write_text("GH_USER=mallory\nMODEL=evil/model\n")
    (tmp_path / ".env").symlink_to(tmp_path / "elsewhere.env")
    with pytest.raises(BadInput, match=r"uses \$(MODEL|GH_USER), which the text never sets"):
        importing.import_source(str(tmp_path / "compose.yaml"))


# -- hostile scripts: what they would make the reader do is bounded ----------------------------------------------

WORDS = " ".join(f"w{i}" for i in range(60))


@pytest.mark.parametrize(
    ("text", "says"),
    [
        # an array that doubles in each of 60 passes: 2**60 elements
        (f'A=(x)\nfor i in {WORDS}; do A=("${{A[@]}}" "${{A[@]}}"); done\nvllm serve "${{A[0]}}"\n', "grows past"),
        # a text that doubles likewise
        (f'X=ab\nfor i in {WORDS}; do X="$X$X"; done\nvllm serve "$X"\n', "grows past"),
        # loops inside loops inside a function called from a loop: 60**4 passes
        (
            f"f() {{ for a in {WORDS}; do for b in {WORDS}; do for c in {WORDS}; do :; done; done; done; }}\n"
            f"for d in {WORDS}; do f; done\nvllm serve Qwen/Qwen3-8B\n",
            "takes more than 200000 words to read",
        ),
    ],
)
def test_a_script_that_would_run_away_is_refused_quickly(tmp_path, text, says):
    import time

    started = time.monotonic()
    with pytest.raises(BadInput, match=says):
        imported(tmp_path, text)
    assert time.monotonic() - started < 30  # the bound, not a speed target: a runaway never ends


def test_a_comment_that_ends_a_docker_run_line_ends_the_command_as_bash_reads_it(tmp_path):
    """`--network host   # required \\`: the backslash is the comment's, so bash runs `docker run ... --network
    host` with no image (luongnv89's start scripts): the refusal says where and why, not a guess at the rest."""
    text = (
        "exec docker run --rm \\\n  --network host   # required: host networking \\\n  --gpus all \\\n"
        "  vllm/vllm-openai:v0.11.2 Qwen/Qwen3-8B\n"
    )
    with pytest.raises(BadInput, match=r"docker run at line 1 names no image: the command ends after its options"):
        imported(tmp_path, text)


# -- a model on the writer's own disk, no repository named ----------------------------------------------------


def test_a_model_folder_on_the_writers_disk_is_that_folder_under_the_model_root_said(tmp_path):
    text = "docker run --gpus all -v /data/models:/models vllm/vllm-openai:v0.11.2 /models/Qwen3.6-35B-A3B-NVFP4 \\\n"
    doc = imported(tmp_path, text + "  --max-model-len 8192\n")
    assert doc["model"]["repo"] is None and doc["model"]["path"] == "Qwen3.6-35B-A3B-NVFP4"
    # the name clients ask for is the one the text served it as, not sparkplay's path
    assert doc["model"]["served_name"] == "/models/Qwen3.6-35B-A3B-NVFP4"
    note = said(doc, "model.path", "cleaned")
    assert "a folder on the machine the text was written for" in note and "mirrored to every rank" in note
    plan = build(doc, stand_in_nodes(1), Options(model_root="/m", allow=None))
    argv = plan["ranks"][0]["argv"]
    assert "/m/Qwen3.6-35B-A3B-NVFP4" in argv and argv[argv.index("--served-model-name") + 1] == (
        "/models/Qwen3.6-35B-A3B-NVFP4"
    )
    assert {"host": "rank0", "path": "/m/Qwen3.6-35B-A3B-NVFP4"}.items() <= plan["requires"][0].items()


@pytest.mark.parametrize("model", ["/", "/models/.cache", "/models/..", "/.hidden"])
def test_a_host_path_with_no_name_to_serve_it_by_is_still_refused(tmp_path, model):
    with pytest.raises(BadInput, match=r"is a path on the machine the recipe was written on|outside the model root"):
        imported(tmp_path, f"vllm serve {model} --max-model-len 8192\n")


def test_a_comment_beside_commands_is_a_comment_and_a_block_of_root_prompts_is_a_transcript(tmp_path):
    """A bare `# ` is a root prompt only in a block where every line has a prompt: beside plain commands it
    starts a comment (a runbook's `# check the flags (llama-server defaults to f16)` ran no llama-server)."""
    commented = (
        '```bash\nCFG=/etc/llama/config.yaml\ngrep -q matrix "$CFG" || echo missing\n'
        "# the gate (llama-server defaults to f16 when absent)\n```\n\n"
        "```bash\nvllm serve Qwen/Qwen3-8B --max-model-len 8192\n```\n"
    )
    doc = imported(tmp_path, commented, "runbook.md")
    assert doc["engine"]["name"] == "vllm" and doc["source"]["launch"] == "code block 2, line 1"
    root = "```\n# export HF_HOME=/srv/hf\n# vllm serve Qwen/Qwen3-8B --max-model-len 4096\n```\n"
    assert imported(tmp_path, root, "root.md")["context_length"] == 4096


def test_an_engine_run_from_a_folder_the_shell_supplies_is_read_by_its_name(tmp_path):
    doc = imported(tmp_path, '"$HOME/vllm-tp/bin/vllm" serve Qwen/Qwen3-8B --max-model-len 8192\n')
    assert doc["engine"]["name"] == "vllm" and doc["model"]["repo"] == "Qwen/Qwen3-8B"
    assert "the program $HOME/vllm-tp/bin/vllm runs from a folder the shell supplies: read as vllm" in said(
        doc, "serve.args", "derived"
    )
    with pytest.raises(BadInput, match=r"holds no engine command sparkplay can read \(it runs \$ENGINE\)"):
        imported(tmp_path, "$HOME/bin/$ENGINE serve Qwen/Qwen3-8B\n")


def test_a_compose_service_whose_launch_lives_in_its_image_is_refused_saying_so(tmp_path):
    text = "services:\n  vllm:\n    image: spark-vllm:latest\n    environment:\n      - MODEL=Qwen/Qwen3-8B\n"
    with pytest.raises(BadInput, match=r"service vllm runs what its image spark-vllm:latest starts \(the file gives"):
        imported(tmp_path, text, "compose.yaml")
    # beside a service that does run an engine, it is one of the services named as not applied
    both = text + "  chat:\n    image: vllm/vllm-openai:v0.11.2\n    command: Qwen/Qwen3-4B --max-model-len 4096\n"
    doc = imported(tmp_path, both, "compose.yaml")
    assert doc["model"]["repo"] == "Qwen/Qwen3-4B" and "vllm (spark-vllm:latest)" in said(
        doc, "extra.compose.services", "ignored"
    )


@pytest.mark.parametrize("engine", ["vllm", "sglang", "trtllm"])
def test_a_placeholder_tag_of_an_engines_default_image_is_that_defaults_pinned_tag(tmp_path, engine):
    default = registry.spec(engine).defaults.image
    line = {
        "vllm": "vllm serve Qwen/Qwen3-8B",
        "sglang": "python3 -m sglang.launch_server --model-path Qwen/Qwen3-8B",
        "trtllm": "trtllm-serve Qwen/Qwen3-8B",
    }[engine]
    repository = default.rsplit(":", 1)[0]
    doc = imported(tmp_path, f"docker run --gpus all {repository}:<latest_container_version> {line}\n")
    assert doc["engine"]["image"] == default
    assert f"{repository}:<latest_container_version> leaves its tag to the reader" in said(
        doc, "engine.image", "derived"
    )


def test_a_placeholder_tag_of_another_image_is_still_refused(tmp_path):
    with pytest.raises(BadInput, match=r"holds the placeholder <TAG>"):
        imported(tmp_path, "docker run --gpus all ghcr.io/someone/vllm:<TAG> vllm serve Qwen/Qwen3-8B\n")
