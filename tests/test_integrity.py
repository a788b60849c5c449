"""What serves is what was verified (issue 53), the parts that need no lab: the words of a refusal and of a
repair, an engine started before a file it serves was replaced, the records that name its folders, and the
CLI's exit codes for verify. The lab tests: tests/test_several_lab.py (rank 1's copy under a running added
model) and tests/test_models_lab.py (rank 0's copy changed)."""

from __future__ import annotations

import json
import os
import time
from typing import Any

import pytest
from typer.testing import CliRunner

from sparkplay import integrity, served
from sparkplay.cli import app
from sparkplay.errors import BadInput, ExitCode
from sparkplay.nodetools.serve import explain
from sparkplay.runner import RunResult

SOURCE = {"name": "lab-tiny", "kind": "staged", "dest": "/var/lib/sparkplay/models/lab-tiny"}


def test_a_refusal_names_each_file_what_differed_and_every_fix():
    answer = {"bad": {"lab-tiny.gguf": "sha256", "tokenizer.json": "missing"}, "recorded_at": "2026-12-06T10:00:00Z"}
    text = integrity.refusal(SOURCE, answer, "rank0")
    assert "lab-tiny.gguf: its bytes differ; tokenizer.json: missing" in text
    assert "since its first verification (2026-12-06T10:00:00Z)" in text and "Nothing was mirrored" in text
    assert "--accept-changed lab-tiny" in text and "download it anew" not in text  # staged: nothing to download
    assert "download it anew" in integrity.refusal({**SOURCE, "kind": "hf"}, answer, "rank0")
    assert "\n" not in text


def test_many_differences_are_counted_not_listed():
    bad = {f"shard-{i:03}.safetensors": "size" for i in range(40)}
    text = integrity.differences(bad)
    assert text.count("truncated or grown") == 6 and text.endswith("(and 34 more)")


def test_a_mirror_result_becomes_a_finding_per_file():
    result = {"state": "mirrored", "found": {"b.bin": "sha256", "a.bin": "missing"}}
    found = integrity.finding(SOURCE, "rank1", result)
    assert [(f["file"], f["what"], f["repaired"]) for f in found] == [
        ("a.bin", "missing", True),
        ("b.bin", "sha256", True),
    ]
    assert integrity.verify_lines(found)[1] == (
        "rank1: lab-tiny/b.bin: its bytes differ; re-mirrored from rank 0's verified copy"
    )
    assert integrity.finding(SOURCE, "rank1", {"state": "complete"}) == []


@pytest.mark.parametrize("name", ["", "../x", "a/b", ".hidden", "two words", "new\nline"])
def test_accept_changed_takes_only_a_checkpoint_name(name):
    with pytest.raises(BadInput, match="accept-changed"):
        integrity.accepted_name(name)
    assert integrity.accepted_name("org--model") == "org--model"


# --- an engine started before a file it serves was replaced --------------------------------------------------


def test_files_changed_after_the_engine_started_are_named_newest_first_and_bookkeeping_is_not(tmp_path):
    model = tmp_path / "lab-small"
    (model / ".sparkplay").mkdir(parents=True)
    (model / "sub").mkdir()
    (model / "old.bin").write_bytes(b"x")
    started = time.time()
    time.sleep(0.05)
    assert explain.replaced_since([str(model)], started) == []
    (model / "sub" / "new.bin").write_bytes(b"y")
    time.sleep(0.05)
    (model / ".sparkplay" / "complete.json").write_text("{}")  # a marker rewritten is no model file
    replaced_by = model / "old.bin.tmp"
    replaced_by.write_bytes(b"z")
    replaced_by.replace(model / "old.bin")  # a rename into place, as the mirror's receiver does
    found = explain.replaced_since([str(model), str(tmp_path / "absent")], started)
    assert [p for _, p in found] == [str(model / "old.bin"), str(model / "sub" / "new.bin")]
    words = explain.replaced_words(found)
    assert words.startswith("serving a file replaced at ") and "old.bin and 1 more" in words
    assert "restart to load the verified copy" in words


def test_a_touch_cannot_hide_a_replaced_file(tmp_path):
    (tmp_path / "m.bin").write_bytes(b"a")
    started = time.time()
    time.sleep(0.05)
    (tmp_path / "m.bin").write_bytes(b"b")
    os.utime(tmp_path / "m.bin", (started - 3600, started - 3600))  # mtime set back: ctime moves on
    assert explain.replaced_since([str(tmp_path)], started)


def test_a_process_start_is_read_from_proc(tmp_path):
    (tmp_path / "42").mkdir()
    ticks = os.sysconf("SC_CLK_TCK")
    fields = ["S"] + ["0"] * 18 + [str(250 * ticks)]  # field 22 is the 20th after the name
    (tmp_path / "42" / "stat").write_text(f"42 (llama server) {' '.join(fields)} 0 0\n")
    (tmp_path / "stat").write_text("cpu 1 2 3\nbtime 1000\n")
    assert explain.started_at("42", tmp_path) == 1250
    assert explain.started_at("0", tmp_path) is None and explain.started_at("7", tmp_path) is None
    assert explain.started_at(str(os.getpid())) == pytest.approx(time.time(), abs=600)


def test_only_the_units_that_serve_a_replaced_file_restart():
    def result(unit: str, role: str, replaced: list[str]) -> dict[str, Any]:
        stdout = json.dumps({"why": None, "replaced": [{"path": p, "at": 1.0} for p in replaced]})
        return {"item": {"unit": unit, "role": role, "recipe": unit, "host": "rank1"}, "stdout": stdout}

    found = integrity.replaced_units(
        [result("a.service", "leader", ["/m/a/x"]), result("b.service", "leader", []), {"item": {}, "stdout": "junk"}]
    )
    assert found == [
        {"unit": "a.service", "recipe": "a.service", "role": "leader", "host": "rank1", "replaced": ["/m/a/x"]}
    ]


@pytest.mark.parametrize(
    ("models", "kept"),
    [
        (["/var/lib/sparkplay/models/lab-tiny"], ["/var/lib/sparkplay/models/lab-tiny"]),
        (["/", "/var", "/m/../etc", "relative/x", 7, "/m/ok"], ["/m/ok"]),
        ("/var/lib/x", []),
    ],
)
def test_a_records_model_folders_are_plain_absolute_paths_two_deep(models, kept):
    record = {"unit": "x", "role": "leader", "models": models}
    found = served.records({"rank0": {"/etc/sparkplay/serve.json": json.dumps(record)}})
    assert found[0]["models"] == kept


# --- the exit codes of verify --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("custom", "status", "code", "says"),
    [
        ({}, "successful", ExitCode.OK, "every checkpoint verified"),
        (
            {"sparkplay_checkpoint_findings": [{"host": "rank1", "checkpoint": "m", "file": "x", "what": "sha256"}]},
            "successful",
            ExitCode.REPAIRED,
            "found: rank1: m/x: its bytes differ",
        ),
        (
            {"sparkplay_reloaded": [{"recipe": "m", "unit": "u", "host": "rank1", "replaced": ["/m/x"]}]},
            "successful",
            ExitCode.REPAIRED,
            "restarted: m (u), workers first",
        ),
        ({}, "failed", ExitCode.HOSTS_FAILED, "verify: failed"),
    ],
    ids=["verified", "repaired", "restarted", "could-not-repair"],
)
def test_verify_tells_verified_repaired_and_not_repaired_apart(monkeypatch, tmp_path, custom, status, code, says):
    from sparkplay import cli_day2

    def fake_run(*_: Any, **__: Any) -> RunResult:
        result = RunResult(status=status, custom=custom)
        if status == "failed":
            result.stats = {"rank0": {"failed": 1}}
        return result

    monkeypatch.setattr(cli_day2, "run", fake_run)
    inventory = tmp_path / "hosts.yml"
    inventory.write_text("all:\n  children:\n    sparkplay_nodes:\n      hosts:\n        rank0: {}\n")
    got = CliRunner().invoke(app, ["verify", "-i", str(inventory), "--no-wait"])
    assert got.exit_code == code, got.output
    assert says in got.output


def test_a_deployment_restarts_on_every_rank_workers_first_when_any_ranks_copy_was_replaced():
    records = [
        {"unit": "sparkplay-serve.service", "role": "worker", "host": "rank1"},
        {"unit": "sparkplay-serve@lab-small.service", "role": "leader", "host": "rank1"},
        {"unit": "sparkplay-serve@other.service", "role": "leader", "host": "rank1"},
    ]
    # the primary's file was replaced on rank 0 (its leader), lab-small's here
    replaced = [{"unit": "sparkplay-serve.service"}, {"unit": "sparkplay-serve@lab-small.service"}]
    plan = integrity.reload_plan(records, replaced)
    assert plan["units"] == ["sparkplay-serve.service", "sparkplay-serve@lab-small.service"]
    assert [r["unit"] for r in plan["workers"]] == ["sparkplay-serve.service"]
    assert [r["unit"] for r in plan["leaders"]] == ["sparkplay-serve@lab-small.service"]
    assert integrity.reload_plan(records, []) == {"units": [], "workers": [], "leaders": []}


def test_the_serve_tools_argv_carries_the_folders_and_never_the_key():
    record = {
        "unit": "u.service",
        "tool": "/usr/local/lib/sparkplay/sparkplay-serve",
        "models": ["/m/a", "/m/b"],
        "api_url": "http://127.0.0.1:9931",
        "served_name": "lab-tiny",
        "runtime": "native",
        "api_key_env": "SPARKPLAY_API_KEY",
        "env_file": "/etc/sparkplay/serve.env",
    }
    assert integrity.explain_argv(record, "/default", "/etc/sparkplay/fabric.env")[-2:] == [
        "--model-dir=/m/a",
        "--model-dir=/m/b",
    ]
    argv = integrity.probe_argv(record, "/default")
    assert argv[:2] == ["/usr/local/lib/sparkplay/sparkplay-serve", "probe"] and "--container" not in argv
    assert argv[argv.index("--api-key-env") + 1] == "SPARKPLAY_API_KEY"
    assert integrity.probe_argv({**record, "tool": None, "runtime": "docker", "container": "c"}, "/d")[0] == "/d"


# --- answers, not only liveness ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("engine", "argv", "mode", "says"),
    [
        ("llamacpp", ["llama-server", "-m", "m.gguf"], "exact", None),
        ("llamacpp", ["llama-server", "-m", "m.gguf", "--spec-type", "draft-mtp"], "exempt", "--spec-type"),
        ("llamacpp", ["llama-server", "-md", "d.gguf"], "exempt", "speculative decoding"),
        ("vllm", ["vllm", "serve", "m"], "exempt", "vllm batches requests"),
        ("vllm", ["vllm", "serve", "m", "--speculative-config={}"], "exempt", "--speculative-config"),
        ("sglang", ["python3", "-m", "sglang.launch_server"], "exempt", "sglang batches"),
    ],
)
def test_which_engines_are_held_to_the_deploys_answer(engine, argv, mode, says):
    from sparkplay.engines import answers

    found = answers.check(engine, [argv])
    assert found["mode"] == mode and ((says is None and found["why"] is None) or says in found["why"])


def test_the_watchdogs_answer_check_follows_the_plan_and_re_verifies_the_leaders_folders():
    from sparkplay.layout import answer_args

    plan = {"health": {"answers": {"mode": "exact", "why": None}}}
    rank = {"record": {"models": ["/var/lib/sparkplay/models/lab-tiny"]}}
    assert answer_args(plan, rank) == [
        "--answer-check",
        "exact",
        "--ckpt-tool",
        "/usr/local/lib/sparkplay/sparkplay-ckpt",
        "--model-dir=/var/lib/sparkplay/models/lab-tiny",
    ]
    exempt = {"health": {"answers": {"mode": "exempt", "why": "vllm batches"}}}
    assert answer_args(exempt, {"record": {}})[:4] == ["--answer-check", "exempt", "--answer-why", "vllm batches"]
    # the lab's recipe on llama.cpp is held; its watchdog unit says so
    from tests.test_deployment import two_stage

    launch = two_stage("lab-tiny", {}, 2)["launch"]
    assert launch["health"]["answers"] == {"mode": "exact", "why": None}
