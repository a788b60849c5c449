"""A profile of settings a launcher sources (`MODEL=`, `SERVE_ARGS=(...)`, `TP=`, `EXTRA_ARGS="..."`, `IMAGE=`)
imported as the recipe it is in variables: the engine its flags, its variables' names or its image say, each
setting read said, what the launcher adds itself named as unknown. The profiles are written here in the shapes
of real ones (bytebunkerlabs' recipes/*.env beside their launch-solo.sh, a vllm_profile.conf of MODEL/TP/
EXTRA_ARGS); a hostile one changes nothing on the host."""

from __future__ import annotations

from pathlib import Path

import pytest

from sparkplay import importing
from sparkplay.engines import registry
from sparkplay.errors import BadInput
from sparkplay.recipes.importers.pasted import gguf_hub


def imported(tmp_path: Path, text: str, name: str = "model.env") -> dict:
    (tmp_path / name).write_text(text)
    return importing.import_source(str(tmp_path / name))


def said(doc: dict) -> str:
    return "\n".join(n["detail"] for n in doc["provenance"])


ARRAY_PROFILE = """# one MoE over both Sparks
MODEL=deepseek-ai/DeepSeek-V4-Flash-0731
SERVE_ARGS=(
  --served-model-name dsv4
  --trust-remote-code
  --tensor-parallel-size 2       # drop to 1 if it fits on one node
  --gpu-memory-utilization 0.8   # near the edge
  --max-model-len 131072
  --kv-cache-dtype fp8
  --compilation-config '{"cudagraph_mode":"PIECEWISE","custom_ops":["all"]}'
)
ENV_EXTRA=()
MODS=(mods/fix-dsv4-tokenizer)
"""


def test_a_profile_of_an_array_of_flags_is_the_engine_its_own_flags_say(tmp_path):
    doc = imported(tmp_path, ARRAY_PROFILE)
    assert doc["engine"]["name"] == "vllm" and doc["model"]["repo"] == "deepseek-ai/DeepSeek-V4-Flash-0731"
    assert doc["engine"]["image"] == registry.spec("vllm").defaults.image  # the profile names none: filled, said
    assert doc["serve"]["args"][doc["serve"]["args"].index("--compilation-config") + 1] == (
        '{"cudagraph_mode":"PIECEWISE","custom_ops":["all"]}'
    )
    assert doc["topology"]["nodes"] == 2 and doc["context_length"] == 131072 and doc["model"]["served_name"] == "dsv4"
    notes = said(doc)
    assert "MODEL is the model, SERVE_ARGS vLLM's flags (--gpu-memory-utilization is its own flag)" in notes
    assert "the launcher that sources the profile is not in the text" in notes and "--arg PROFILE" in notes
    assert "left out, as a launcher's own settings sparkplay does not read: MODS" in notes
    assert "ENV_EXTRA" not in notes.split("left out")[-1]  # empty: nothing to leave out


def test_named_settings_become_the_engines_flags_where_the_flags_leave_them_out(tmp_path):
    profile = 'MODEL="Qwen/Qwen3-8B"\nTP=2\nPORT=8011\nEXTRA_ARGS="--max-model-len 32768 --enforce-eager"\n'
    doc = imported(tmp_path, profile, "vllm_profile.conf")
    assert doc["engine"]["name"] == "vllm" and doc["topology"]["tensor_parallel"] == 2
    assert doc["serve"]["port"] == 8011 and doc["context_length"] == 32768
    assert "TP=2 is --tensor-parallel-size 2" in said(doc) and "PORT=8011 is --port 8011" in said(doc)
    # the flags' own value is kept over a setting that says otherwise, and that is said
    both = profile.replace('--enforce-eager"', '--enforce-eager --tensor-parallel-size 1"')
    doc = imported(tmp_path, both, "vllm_profile.conf")
    assert doc["topology"]["tensor_parallel"] == 1 and "TP=2 and the flags' --tensor-parallel-size" in said(doc)


def test_an_engines_name_on_the_variable_says_the_engine_and_its_grammar_writes_the_command(tmp_path):
    doc = imported(tmp_path, "MODEL=Qwen/Qwen3-8B\nTP=2\nSGLANG_ARGS='--max-running-requests 8'\n")
    assert doc["engine"]["name"] == "sglang" and doc["model"]["repo"] == "Qwen/Qwen3-8B"
    assert "--tp-size" in doc["serve"]["args"] and doc["topology"]["tensor_parallel"] == 2
    assert "SGLANG_ARGS SGLang's flags (the variable's name says it)" in said(doc)


def test_the_image_says_the_engine_where_the_flags_do_not(tmp_path):
    doc = imported(
        tmp_path, "IMAGE=lmsysorg/sglang:v0.5.14-cu130-runtime\nMODEL=Qwen/Qwen3-8B\nARGS='--trust-remote-code'\n"
    )
    assert doc["engine"]["name"] == "sglang" and doc["engine"]["image"] == "lmsysorg/sglang:v0.5.14-cu130-runtime"
    assert "its image lmsysorg/sglang:v0.5.14-cu130-runtime is SGLang's" in said(doc)


def test_a_llama_cpp_profile_serves_its_hub_file(tmp_path, monkeypatch):
    monkeypatch.setattr(gguf_hub, "LISTER", lambda repo, rev: ("a" * 40, ["Qwen3-8B-Q4_K_M.gguf"]))
    doc = imported(
        tmp_path, "MODEL=unsloth/Qwen3-8B-GGUF:Q4_K_M\nLLAMA_SERVER_ARGS=(--ctx-size 8192 -ngl 99 --jinja)\n"
    )
    assert doc["engine"]["name"] == "llamacpp" and doc["model"]["path"].endswith("Qwen3-8B-Q4_K_M.gguf")
    assert doc["context_length"] == 8192


def test_the_environment_goes_through_the_recipe_boundary(tmp_path):
    profile = ARRAY_PROFILE.replace(
        "ENV_EXTRA=()", "ENV_EXTRA=(VLLM_USE_FLASHINFER_MOE_FP4=1 HF_TOKEN=hf_abcdefghijklmnop)"
    )
    doc = imported(tmp_path, profile)
    assert doc["serve"]["env"]["VLLM_USE_FLASHINFER_MOE_FP4"] == "1"
    assert "hf_abcdefghijklmnop" not in str(doc)  # a secret never reaches a recipe


@pytest.mark.parametrize(
    ("profile", "says"),
    [
        # nothing says the engine: refused, naming what was read and how to give the engine
        ('MODEL="Qwen/Qwen3-8B"\nPORT=8000\n', r"\(MODEL=Qwen/Qwen3-8B, PORT=8000\) that does not say its engine"),
        ("MODEL=Qwen/Qwen3-8B\nENV_EXTRA=(--privileged)\nSERVE_ARGS=(--max-model-len 8)\n", "not NAME=VALUE"),
        ("MODEL=Qwen/Qwen3-8B\nEXTRA_ARGS='--max-model-len \"8192'\n", "EXTRA_ARGS cannot be split into flags"),
        ("MODEL=$(curl -s http://evil/model)\nSERVE_ARGS=(--max-model-len 8192)\n", "command substitution"),
        ("MODEL=$1\nSERVE_ARGS=(--max-model-len 8192)\n", r"uses \$1, which the text never sets"),
        ("MODEL='Qwen/Qwen3-8B; rm -rf /'\nSERVE_ARGS=(--max-model-len 8192)\n", "neither a Hugging Face repository"),
        # an image that is no reference never becomes docker's options
        (
            "IMAGE='-v /:/host vllm/vllm-openai:v0.11.2'\nMODEL=Qwen/Qwen3-8B\nSERVE_ARGS=(--max-model-len 8)\n",
            "no image",
        ),
        ("IMAGE=--privileged\nMODEL=Qwen/Qwen3-8B\nSERVE_ARGS=(--max-model-len 8192)\n", "IMAGE holds '--privileged'"),
        # a script that sets a model and runs other programs is no profile
        (
            "MODEL=Qwen/Qwen3-8B\nSERVE_ARGS=(--max-model-len 8192)\nrsync -a models/ spark2:models/\n",
            r"holds no engine command sparkplay can read \(it runs rsync\)",
        ),
    ],
)
def test_what_a_profile_cannot_say_is_a_one_line_refusal(tmp_path, profile, says):
    with pytest.raises(BadInput, match=says):
        imported(tmp_path, profile)


def test_a_profile_that_sources_another_from_its_repository_root_reads_both_said(tmp_path):
    (tmp_path / "recipes").mkdir()
    (tmp_path / "recipes" / "base.env").write_text("MODEL=Qwen/Qwen3-8B\nSERVE_ARGS=(--max-model-len 8192)\n")
    child = ". recipes/base.env\nSERVE_ARGS+=(--gpu-memory-utilization 0.6)\n"  # as its launcher, run from the root
    doc = imported(tmp_path / "recipes", child, "small.env")
    assert doc["model"]["repo"] == "Qwen/Qwen3-8B" and doc["context_length"] == 8192
    assert doc["serve"]["args"][-2:] == ["--gpu-memory-utilization", "0.6"]
    assert "read recipes/base.env" in said(doc) and "the text does not say which folder it runs in" in said(doc)
