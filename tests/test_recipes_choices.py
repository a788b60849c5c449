"""A text whose engine commands are choices, not launches run together (a playbook page's ways to serve, a
script's runs one after another): each one that imports as written is a recipe of its own, the rest are named
on them, whichever step of the import refuses them; the text is refused only when none imports. The pages are
written here in the shapes of real ones (NVIDIA's playbooks: placeholders beside worked examples, a command
repeated for each node); a generated text of a thousand commands is bounded."""

from __future__ import annotations

from pathlib import Path

import pytest

from sparkplay import importing
from sparkplay.errors import BadInput
from sparkplay.recipes.store import choices
from tests.conftest import run_cli

PAGE = """# Serve a model with vLLM

Pull the container and serve any model:

```bash
docker run --gpus all -it --rm nvcr.io/nvidia/vllm:26.05-py3 vllm serve "<HF_HANDLE>"
```

## Worked example: a small model

```bash
docker run --gpus all -it --rm nvcr.io/nvidia/vllm:26.05-py3 \\
  vllm serve Qwen/Qwen3-8B --max-model-len 8192 --gpu-memory-utilization 0.7
```

## Worked example: a reasoning model over two Sparks

```bash
docker run --gpus all -it --rm nvcr.io/nvidia/vllm:26.05-py3 \\
  vllm serve openai/gpt-oss-20b --tensor-parallel-size 2 --max-model-len 32768
```

## The small model again, on node 2

```bash
docker run --gpus all -it --rm nvcr.io/nvidia/vllm:26.05-py3 \\
  vllm serve Qwen/Qwen3-8B --max-model-len 8192 --gpu-memory-utilization 0.7
```
"""


def page(tmp_path: Path, text: str = PAGE, name: str = "page.md") -> str:
    (tmp_path / name).write_text(text)
    return str(tmp_path / name)


def notes(doc: dict, how: str) -> list[str]:
    return [n["detail"] for n in doc["provenance"] if n["key"] == choices.KEY and n["how"] == how]


def test_each_choice_that_imports_is_a_recipe_the_same_one_once_the_rest_named(tmp_path):
    docs = importing.import_sources(page(tmp_path))
    assert [(d["model"]["repo"], d["context_length"]) for d in docs] == [
        ("Qwen/Qwen3-8B", 8192),
        ("openai/gpt-oss-20b", 32768),
    ]
    assert [d["topology"]["nodes"] for d in docs] == [1, 2] and len({d["name"] for d in docs}) == 2
    small, large = docs
    assert "holds 4 engine commands, each a choice" in notes(small, "chosen")[0]
    assert "number 2 (code block 2, line 1)" in notes(small, "chosen")[0] and "--pick 2" in notes(small, "chosen")[0]
    assert "number 3" in notes(large, "chosen")[0]
    for doc in docs:  # the placeholder is named on each recipe kept; the repeated command is no choice of its own
        assert notes(doc, "ignored") == [
            "not imported: 1) code block 1, line 1: holds the placeholder <HF_HANDLE> (<HF_HANDLE>)"
        ]


def test_pick_still_imports_one_alone_and_one_recipe_asked_for_names_the_choices(tmp_path):
    (doc,) = importing.import_sources(page(tmp_path), pick=3)
    assert doc["model"]["repo"] == "openai/gpt-oss-20b" and not choices.is_choice(doc)
    with pytest.raises(BadInput, match=r"holds 2 engine launches \(1\) qwen3-8b; 2\) gpt-oss-20b\).*--pick N"):
        importing.import_source(page(tmp_path))
    with pytest.raises(BadInput, match="holds the placeholder <HF_HANDLE>"):
        importing.import_sources(page(tmp_path), pick=1)


def test_a_choice_refused_at_any_step_is_left_out_and_said(tmp_path):
    """Reading (a placeholder), the fields (no repository), the plan (a path on the writer's machine): each
    refuses its choice alone."""
    text = (
        "```bash\nvllm serve <MODEL>\n```\n\n"
        "```bash\nvllm serve /.cache --max-model-len 8192\n```\n\n"
        "```bash\nllama-server --port 8080 --ctx-size 4096\n```\n\n"
        "```bash\nvllm serve Qwen/Qwen3-4B --max-model-len 4096\n```\n"
    )
    (doc,) = importing.import_sources(page(tmp_path, text))
    assert doc["model"]["repo"] == "Qwen/Qwen3-4B"
    said = "\n".join(notes(doc, "ignored"))
    assert "1) code block 1, line 1: holds the placeholder <MODEL>" in said
    assert "2) code block 2, line 1: recipe " in said and "cannot be planned as written: model.path '/.cache' " in said
    assert "is a path on the machine the recipe was written on" in said
    assert "3) code block 3, line 1: " in said and len(notes(doc, "ignored")) == 3


def test_a_text_none_of_whose_choices_imports_is_refused_naming_each(tmp_path):
    text = "```bash\nvllm serve <MODEL>\n```\n\n```bash\nvllm serve $MODEL --port 8001\n```\n"
    with pytest.raises(BadInput) as refused:
        importing.import_sources(page(tmp_path, text))
    problem = refused.value.problem
    assert "holds 2 engine commands, and none imports as written: 1) code block 1, line 1: holds the placeholder" in (
        problem
    )
    assert "2) code block 2, line 1: uses $MODEL, which the text never sets" in problem
    # one reason shared by all is said once
    same = "```bash\nvllm serve <MODEL>\n```\n\n```bash\nvllm serve <MODEL> --port 8001\n```\n"
    shared = r"page.md holds 2 .* none imports as written: each for the same reason: holds the placeholder <MODEL>"
    with pytest.raises(BadInput, match=shared):
        importing.import_sources(page(tmp_path, same))


def test_set_and_name_apply_to_every_choice(tmp_path):
    docs = importing.import_sources(page(tmp_path), name="lab", sets=("serve.port=9100",))
    assert [d["serve"]["port"] for d in docs] == [9100, 9100]
    assert len({d["name"] for d in docs}) == 2 and all(d["name"].startswith("lab-") for d in docs)


def test_a_script_running_one_server_after_another_offers_each_as_a_choice(tmp_path):
    script = "#!/bin/bash\nfor len in 8192 32768; do\n  vllm serve Qwen/Qwen3-8B --max-model-len $len\ndone\n"
    docs = importing.import_sources(page(tmp_path, script, "sweep.sh"))
    assert [d["context_length"] for d in docs] == [8192, 32768]


def test_a_systemd_unit_runs_one_service_no_choices(tmp_path):
    unit = "[Service]\nExecStart=/usr/bin/vllm serve Qwen/Qwen3-8B ; /usr/bin/vllm serve Qwen/Qwen3-4B\n"
    with pytest.raises(BadInput, match=r"holds 2 engine commands.*--pick N"):
        importing.import_sources(page(tmp_path, unit, "llm.service"))


def test_a_generated_text_of_many_commands_is_refused_not_made_into_many_recipes(tmp_path):
    many = "".join(f"vllm serve Qwen/Qwen3-8B --port {8000 + i}\n" for i in range(choices.MAX + 1))
    with pytest.raises(BadInput, match=rf"holds {choices.MAX + 1} engine commands, more choices than one import"):
        importing.import_sources(page(tmp_path, many, "many.sh"))
    (doc,) = importing.import_sources(page(tmp_path, many, "many.sh"), pick=3)
    assert doc["serve"]["port"] == 8002


def test_the_cli_saves_each_choice_says_what_was_left_out_once_and_how_to_serve_one(tmp_path):
    project = tmp_path / "project"
    (project / "playbooks").mkdir(parents=True)
    (project / "ansible.cfg").write_text("[defaults]\n")
    source = page(tmp_path)
    result = run_cli("recipe", "import", source, "-y", "--project-dir", str(project))
    assert result.returncode == 0, result.stderr
    saved = sorted(p.name for p in (project / "recipes").glob("*.yml"))
    assert saved == ["gpt-oss-20b.yml", "qwen3-8b.yml"]
    assert result.stderr.count("not imported: 1) code block 1, line 1: holds the placeholder") == 1
    assert "each a choice: serve one with sparkplay up NAME -i INVENTORY, NAME one of qwen3-8b, gpt-oss-20b" in (
        result.stdout
    )
    again = run_cli("recipe", "import", source, "-y", "--project-dir", str(project))
    assert again.returncode == 0 and again.stdout.count(": unchanged") == 2
