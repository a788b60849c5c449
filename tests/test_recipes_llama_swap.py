"""llama-swap's config read as llama-swap reads it (mostlygeek/llama-swap internal/config: macros.go,
commands.go): each model's cmd one recipe. The fixture was written for these tests from the format's own
example (config.example.yaml); the Hugging Face hub is a stand-in (it cannot be reached from here)."""

from __future__ import annotations

import pytest
import yaml

from sparkplay import argv, importing
from sparkplay.engines.plan import Options, build
from sparkplay.errors import BadInput
from sparkplay.recipes.importers.pasted import gguf_hub
from tests.conftest import PROJECT
from tests.test_engines import ROOT, nodes

CONFIG = PROJECT / "tests" / "fixtures" / "pasted" / "llama-swap.yaml"


@pytest.fixture(autouse=True)
def stand_in_hub(monkeypatch):
    """The hub's listing of a GGUF repository: a Q4_K_M and a Q8_0 file of the repository's name."""
    files = lambda repo, _rev: ("c" * 40, [f"{repo.split('/')[-1]}-{q}.gguf" for q in ("Q4_K_M", "Q8_0")])  # noqa: E731
    monkeypatch.setattr(gguf_hub, "LISTER", files)


def said(doc: dict, key: str) -> str:
    return "\n".join(n["detail"] for n in doc["provenance"] if n["key"] == key)


def test_each_models_cmd_is_one_recipe_with_macros_and_ports_as_llama_swap_fills_them():
    docs = {d["name"]: d for d in importing.import_sources(str(CONFIG))}
    assert list(docs) == ["qwen3-8b", "coder", "vision"]  # the file's order; whisper starts no engine
    assert {d["source"]["kind"] for d in docs.values()} == {"llama-swap"}
    qwen, coder, vision = docs["qwen3-8b"], docs["coder"], docs["vision"]
    # a macro holding an earlier one (common -> ctx), a model's own macro replacing the global one (coder's ctx)
    assert qwen["context_length"] == 16384 and coder["context_length"] == 65536
    assert argv.flag_value(qwen["serve"]["args"], "--alias") == "qwen3-8b"  # ${MODEL_ID}
    # ${PORT}: startPort 9100 onwards, over the model ids that use it in sorted order (coder, qwen3-8b, vision)
    assert (coder["serve"]["port"], qwen["serve"]["port"], vision["serve"]["port"]) == (9100, 9101, 9102)
    assert "llama-swap's port for it, 9101" in said(qwen, "serve.port")
    assert qwen["engine"]["name"] == "llamacpp" and qwen["model"]["repo"] == "Qwen/Qwen3-8B-GGUF"
    assert qwen["serve"]["env"] == {"LLAMA_ARG_THREADS": "8"}
    assert vision["engine"]["image"] == "vllm/vllm-openai:v0.11.0" and vision["serve"]["env"] == {"VLLM_USE_V1": "1"}
    assert "DOCKER_HOST" in said(vision, "serve.env") and "not applied" in said(vision, "serve.env")
    assert "aliases, ttl" in said(qwen, "serve.args")
    assert "model whisper (whisper-server)" in said(qwen, "source") and "groups" in said(qwen, "source")
    for doc in docs.values():
        assert build(doc, nodes(1), Options(model_root=ROOT, allow=None))["ranks"]


def test_comment_lines_and_continuations_are_no_part_of_the_command():
    qwen = importing.import_sources(str(CONFIG))[0]
    assert "#" not in " ".join(qwen["serve"]["args"]) and "\\" not in " ".join(qwen["serve"]["args"])
    assert argv.has_flag(qwen["serve"]["args"], "--jinja")


def config(tmp_path, text: dict | str) -> str:
    path = tmp_path / "config.yaml"
    path.write_text(text if isinstance(text, str) else yaml.safe_dump(text, sort_keys=False))
    return str(path)


LINE = "llama-server -hf Qwen/Qwen3-8B-GGUF:Q4_K_M --port ${PORT}"


@pytest.mark.parametrize(
    ("doc", "says"),
    [
        ({"models": {"m": {"cmd": LINE + " -c ${ctx}"}}}, "uses the macro ${ctx}, which no macros entry defines"),
        ({"models": {"m": {"cmd": LINE + " -m ${env.HOME}/x.gguf"}}}, "uses ${env.HOME}, a value llama-swap takes"),
        ({"macros": {"PORT": 1}, "models": {"m": {"cmd": LINE}}}, "'PORT' is not a macro name llama-swap accepts"),
        ({"macros": {"a b": 1}, "models": {"m": {"cmd": LINE}}}, "'a b' is not a macro name"),
        ({"macros": {"x": [1, 2]}, "models": {"m": {"cmd": LINE}}}, "must be a text, a number or a bool"),
        ({"macros": {"x": "a ${x}"}, "models": {"m": {"cmd": LINE}}}, "not naming itself"),
        ({"macros": ["x"], "models": {"m": {"cmd": LINE}}}, "macros must be a mapping"),
        ({"startPort": "high", "models": {"m": {"cmd": LINE}}}, "startPort must be a whole number"),
        ({"models": {"m": {"cmd": LINE + " --alias 'open"}}}, "its cmd cannot be split into words"),
        ({"models": {"m": {"cmd": "# only a comment\n"}}}, "its cmd is empty"),
        ({"models": {"m": {"cmd": LINE, "env": "A=1"}}}, "env must be a list of NAME=value texts"),
        ({"models": {"m": {"cmd": LINE, "env": ["A=${env.SECRET}"]}}}, "uses ${env.SECRET}"),
        ({"models": {"m": {"cmd": "whisper-server --port ${PORT}"}}}, "holds no engine command"),
    ],
)
def test_a_config_llama_swap_would_refuse_or_that_names_the_machine_is_a_one_line_error(tmp_path, doc, says):
    path = config(tmp_path, doc)
    with pytest.raises(BadInput) as caught:
        importing.import_sources(path)
    assert says in str(caught.value) and path in str(caught.value) and "\n" not in str(caught.value)


def test_a_mapping_of_models_without_any_cmd_is_no_llama_swap_config(tmp_path):
    with pytest.raises(BadInput, match="is not a recipe sparkplay knows"):
        importing.import_sources(config(tmp_path, {"models": {"m": {"name": "x"}}}))


def test_a_hostile_macro_chain_stays_bounded(tmp_path):
    """Each macro is substituted once, from the last declared to the first (llama-swap's rule), so a macro
    that doubles the one before it doubles the command: 11 steps fit, 40 would be a terabyte, refused."""

    def chain(steps: int) -> dict:
        macros = {f"m{i}": f"${{m{i - 1}}}-${{m{i - 1}}}" if i else "x" for i in range(steps)}
        return {"macros": macros, "models": {"m": {"cmd": LINE + f" --alias ${{m{steps - 1}}}"}}}

    imported = importing.import_sources(config(tmp_path, chain(11)))[0]
    assert argv.flag_value(imported["serve"]["args"], "--alias") == "-".join(["x"] * 2**10)
    with pytest.raises(BadInput, match="grows past 64 KiB once the macro"):
        importing.import_sources(config(tmp_path, chain(40)))


def test_one_model_that_cannot_be_planned_refuses_the_file_and_names_pick(tmp_path):
    """Nothing of a file is imported when one of its models could never start; --pick takes another alone."""
    doc = {
        "models": {
            "good": {"cmd": LINE},
            "local": {"cmd": "llama-server -m /x.gguf --port ${PORT}"},  # a file in no folder
        }
    }
    path = config(tmp_path, doc)
    with pytest.raises(BadInput, match=r"recipe local cannot be planned .* \(or --pick another of its 2; this is 2\)"):
        importing.import_sources(path)
    assert importing.import_source(path, pick=1)["name"] == "good"
