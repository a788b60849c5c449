"""A systemd service unit read as systemd reads it (systemd.service(5) "Command lines", systemd.exec(5)
Environment=): the fixture and the texts below were written for these tests from those rules."""

from __future__ import annotations

import pytest

from sparkplay import argv, importing
from sparkplay.errors import BadInput
from tests.conftest import PROJECT

UNIT = PROJECT / "tests" / "fixtures" / "pasted" / "vllm.service"
IMAGE = "engine.image=vllm/vllm-openai:v0.11.2"


def said(doc: dict) -> str:
    return "\n".join(f"{n['key']} {n['how']} {n['detail']}" for n in doc["provenance"])


def test_a_unit_imports_its_exec_start_with_systemds_expansions():
    doc = importing.import_source(str(UNIT), sets=[IMAGE])
    args = doc["serve"]["args"]
    assert doc["model"]["repo"] == "Qwen/Qwen3-8B" and doc["context_length"] == 32768  # ${MODEL}, ${CTX}
    assert argv.has_flag(args, "--enable-prefix-caching") and argv.flag_value(args, "--max-num-seqs") == "8"  # $EXTRA
    assert argv.flag_value(args, "--chat-template-content-format") == "string"
    assert doc["model"]["served_name"] == "qwen 8b"  # a quoted word keeps its space
    extra = "--enable-prefix-caching --max-num-seqs 8"  # systemd passes the unit's Environment= to the engine
    assert doc["serve"]["env"] == {"MODEL": "Qwen/Qwen3-8B", "CTX": "32768", "EXTRA": extra, "VLLM_USE_V1": "1"}
    assert "the unit's User, ExecStartPre: not applied" in said(doc)


def unit(tmp_path, service: str) -> str:
    path = tmp_path / "x.service"
    path.write_text(f"[Unit]\nDescription=x\n\n[Service]\n{service}\n")
    return str(path)


def test_prefixes_escapes_and_a_literal_dollar(tmp_path):
    path = unit(
        tmp_path,
        "ExecStart=@/opt/venv/bin/vllm vllm-argv0 serve Qwen/Qwen3-8B "
        '--served-model-name "a\\x41" --api-key-x $$K 100%%',
    )
    doc = importing.import_source(path, sets=[IMAGE])
    assert argv.flag_value(doc["serve"]["args"], "--api-key-x") == "$K" and "100%" in doc["serve"]["args"]
    assert "vllm-argv0" not in doc["serve"]["args"] and doc["model"]["served_name"] == "aA"  # \x41, C's escape


def test_a_colon_prefix_turns_substitution_off(tmp_path):
    doc = importing.import_source(
        unit(tmp_path, "Environment=N=8\nExecStart=:/usr/bin/vllm serve Qwen/Qwen3-8B --x ${N}"), sets=[IMAGE]
    )
    assert argv.flag_value(doc["serve"]["args"], "--x") == "${N}"


def test_docker_in_a_unit_keeps_the_units_environment_out_of_the_container(tmp_path):
    text = (
        "Environment=DOCKER_CONFIG=/etc/docker-llm\n"
        "ExecStart=/usr/bin/docker run --rm --gpus all --network host -e VLLM_USE_V1=1 "
        "vllm/vllm-openai:v0.11.2 --model Qwen/Qwen3-8B --max-model-len 8192"
    )
    doc = importing.import_source(unit(tmp_path, text))
    assert doc["engine"]["image"] == "vllm/vllm-openai:v0.11.2" and doc["serve"]["env"] == {"VLLM_USE_V1": "1"}
    assert "Environment= (DOCKER_CONFIG) is the docker command's" in said(doc)


@pytest.mark.parametrize(
    ("service", "says"),
    [
        # a template unit: the instance name is the machine's choice, not the text's
        ("ExecStart=/usr/bin/vllm serve %i --max-model-len 8192", "uses $%i, which the text never sets"),
        (
            "EnvironmentFile=/etc/llm.env\nExecStart=/usr/bin/vllm serve $MODEL",
            "uses $MODEL, which the text never sets",
        ),
        ('ExecStart=/usr/bin/vllm serve "Qwen/Qwen3-8B', 'an unbalanced " in the line'),
        ("Environment=not-an-assignment\nExecStart=/usr/bin/vllm serve Qwen/Qwen3-8B", "is not NAME=value"),
        ("ExecStart=/usr/bin/vllm serve Qwen/Qwen3-8B ; /usr/bin/vllm serve Qwen/Qwen3-4B", "holds 2 engine commands"),
        ("ExecStart=/usr/bin/python3 -m http.server", "holds no engine command"),
        ('ExecStart=/usr/bin/vllm serve Qwen/Qwen3-8B --x "a\\x00b"', "an escape there is a NUL"),
        ("ExecStart=/usr/bin/vllm serve Qwen/Qwen3-8B --x \\uD800", "an escape there is a NUL or no character"),
    ],
)
def test_what_systemd_leaves_to_the_machine_or_cannot_read_is_a_one_line_refusal(tmp_path, service, says):
    path = unit(tmp_path, service)
    with pytest.raises(BadInput) as caught:
        importing.import_source(path, sets=[IMAGE])
    assert says in str(caught.value) and path in str(caught.value) and "\n" not in str(caught.value)


def test_an_emptied_exec_start_and_environment_start_over(tmp_path):
    text = (
        "Environment=A=1\nEnvironment=\nExecStart=/usr/bin/vllm serve Qwen/Qwen3-4B\n"
        "ExecStart=\nExecStart=/usr/bin/vllm serve Qwen/Qwen3-8B"
    )
    doc = importing.import_source(unit(tmp_path, text), sets=[IMAGE])
    assert doc["model"]["repo"] == "Qwen/Qwen3-8B" and doc["serve"]["env"] == {}


def test_a_pages_unit_block_is_read_as_the_unit(tmp_path):
    page = tmp_path / "page.md"
    page.write_text(
        "# Serve it with systemd\n\n```ini\n" + UNIT.read_text() + "```\n\n```bash\nsystemctl enable --now vllm\n```\n"
    )
    doc = importing.import_source(str(page), sets=[IMAGE])
    assert doc["model"]["repo"] == "Qwen/Qwen3-8B" and doc["source"]["kind"] == "page"
