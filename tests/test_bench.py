"""`sparkplay bench` off the lab: profiles, result names, rows, ratios, the chart, and the node tool's
invariance check against a stand-in OpenAI-style server (the real engine is in tests/test_serve_lab.py).

The stand-in answers chat completions over real HTTP with per-token
logprobs; one of its modes changes an answer when requests overlap, as a
batch-variant engine would, so the check must report it.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from sparkplay import bench
from sparkplay.errors import BadInput
from sparkplay.lab import tiny_gguf
from sparkplay.nodetools.serve import bench as serve_bench
from tests.conftest import PROJECT

LLAMA_BENCHY_RUN = {
    "concurrency": 2,
    "context_size": 0,
    "prompt_size": 128,
    "response_size": 32,
    "is_context_prefill_phase": False,
    "pp_throughput": {"mean": 900.0, "std": 1, "values": [900.0]},
    "tg_throughput": {"mean": 40.0, "std": 1, "values": [40.0]},
    "e2e_ttft": {"mean": 150.0, "std": 1, "values": [150.0]},
}


def result(*runs: dict[str, Any]) -> dict[str, Any]:
    return {"benchy": {"latency_ms": 12.0, "benchmarks": list(runs)}, "invariance": {"identical": True}}


def test_a_profile_becomes_the_playbooks_variables(tmp_path: Path) -> None:
    profile = tmp_path / "p.yml"
    profile.write_text("pp: [128, 512]\ntg: [32]\nconcurrency: [1, 4]\nruns: 2\ndepth: [0, 1024]\n")
    assert bench.load_profile(profile) == {
        "bench_pp": [128, 512],
        "bench_tg": [32],
        "bench_concurrency": [1, 4],
        "bench_runs": 2,
        "bench_depth": [0, 1024],
    }


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("pp: [128]\nconcurency: [1]\n", "unknown keys concurency"),
        ("pp: []\n", "pp is \\[\\]"),
        ("concurrency: [0]\n", "concurrency is \\[0\\]"),
        ("runs: [2]\n", "runs is \\[2\\]"),
        ("tg: [true]\n", "tg is \\[True\\]"),
        ("- pp\n", "is not a mapping"),
        ("pp: [\n", "cannot be read"),
    ],
)
def test_a_bad_profile_is_one_line_naming_the_file(tmp_path: Path, text: str, says: str) -> None:
    profile = tmp_path / "p.yml"
    profile.write_text(text)
    with pytest.raises(BadInput, match=says) as caught:
        bench.load_profile(profile)
    assert str(profile) in str(caught.value)


def test_a_result_is_named_by_recipe_date_recipe_digest_and_engine_build() -> None:
    name = bench.result_name("glm53", "20261201T080000Z", "ab" * 32, "sha256:" + "cd" * 32)
    assert name == f"20261201T080000Z-glm53-r{'ab' * 6}-e{'cd' * 6}.json"
    native = bench.result_name("lab-tiny", "20261201T080000Z", "ab" * 32, "llama.cpp-tools=8064+dfsg-1")
    other = bench.result_name("lab-tiny", "20261201T080000Z", "ab" * 32, "llama.cpp-tools=8065+dfsg-1")
    assert native != other  # another engine build never shares a name


def test_rows_ratios_and_the_chart(tmp_path: Path) -> None:
    prefill = {**LLAMA_BENCHY_RUN, "is_context_prefill_phase": True}
    now = bench.rows(result(LLAMA_BENCHY_RUN, prefill, {**LLAMA_BENCHY_RUN, "concurrency": 1}))
    assert [r["concurrency"] for r in now] == [2, 1]  # the context-prefill phase is not a test row
    assert now[0] == {
        "concurrency": 2,
        "pp": 128,
        "tg": 32,
        "depth": 0,
        "pp_tps": 900.0,
        "tg_tps": 40.0,
        "ttft_ms": 150.0,
    }
    before = bench.rows(result({**LLAMA_BENCHY_RUN, "tg_throughput": {"mean": 32.0}}))
    ratios = {(r["shape"], r["rate"]): r["ratio"] for r in bench.compare(now, before)}
    assert ratios == {((2, 128, 32, 0), "tg_tps"): 1.25, ((2, 128, 32, 0), "pp_tps"): 1.0}
    png = bench.chart(now, tmp_path / "c.png", "lab-tiny")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 5000


def test_save_keeps_the_result_with_its_names_inside(tmp_path: Path) -> None:
    doc = result(LLAMA_BENCHY_RUN)
    kept = bench.save(
        doc,
        tmp_path,
        recipe="lab-tiny",
        stamp="20261201T080000Z",
        recipe_sha256="ab" * 32,
        engine_build="llama.cpp-tools=1",
    )
    assert kept.parent == tmp_path / "lab-tiny"
    assert bench.load(kept)["recipe_sha256"] == "ab" * 32
    (tmp_path / "empty.json").write_text("{}")
    with pytest.raises(BadInput, match="holds no bench rows"):
        bench.load(tmp_path / "empty.json")


# -- the node tool's invariance check, against a stand-in server ------------------------------------


class StandIn(BaseHTTPRequestHandler):
    """Greedy answers as tokens; with `variant`, an answer given while another request is in flight
    changes at token 5 (what a batch-variant engine does)."""

    variant = False
    in_flight = 0
    lock = threading.Lock()

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        with StandIn.lock:
            StandIn.in_flight += 1
        time.sleep(0.2)  # long enough for concurrent requests to overlap
        with StandIn.lock:
            crowded = StandIn.in_flight > 1
        tokens = [f"{word} " for word in body["messages"][0]["content"].split()][: body["max_tokens"]]
        if StandIn.variant and crowded and len(tokens) > 5:
            tokens[5] = "different "
        answer = {
            "choices": [
                {
                    "message": {"content": "".join(tokens)},
                    "logprobs": {"content": [{"token": t, "logprob": 0.0} for t in tokens]},
                }
            ]
        }
        data = json.dumps(answer).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
        with StandIn.lock:
            StandIn.in_flight -= 1

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture()
def stand_in() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), StandIn)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    StandIn.variant = False


def test_an_invariant_engine_passes_with_its_tokens_compared(stand_in: str) -> None:
    found = serve_bench.invariance(stand_in, "m", [1, 2, 4], max_tokens=12, timeout=10)
    assert found["identical"] and found["unit"] == "token" and found["levels"] == [2, 4]


def test_a_batch_variant_engine_is_reported_with_prompt_level_and_position(stand_in: str) -> None:
    StandIn.variant = True
    found = serve_bench.invariance(stand_in, "m", [1, 4], max_tokens=12, timeout=10)
    assert not found["identical"]
    first = found["differences"][0]
    assert first["concurrency"] == 4 and first["position"] == 5 and first["among"].startswith("different")
    assert first["prompt"] in serve_bench.INVARIANCE_PROMPTS


def test_first_difference_counts_a_shorter_answer() -> None:
    assert serve_bench.first_difference(list("abc"), list("abc")) is None
    assert serve_bench.first_difference(list("abc"), list("abd")) == 2
    assert serve_bench.first_difference(list("abc"), list("ab")) == 2


def test_a_local_corpus_is_served_on_loopback_and_a_url_passes_through(tmp_path: Path) -> None:
    corpus = tmp_path / "book.txt"
    corpus.write_text("It was a bright cold day in April.\n")
    url, server = serve_bench.serve_corpus(str(corpus))
    try:
        import urllib.request

        assert url.startswith("http://127.0.0.1:")
        with urllib.request.urlopen(url, timeout=5) as reply:  # noqa: S310 - our own loopback server
            assert reply.read() == corpus.read_bytes()
    finally:
        assert server is not None
        server.shutdown()
    assert serve_bench.serve_corpus("https://example.org/b.txt") == ("https://example.org/b.txt", None)


def test_the_lab_models_tokenizer_reads_with_the_tokenizers_library() -> None:
    from tokenizers import Tokenizer  # what llama-benchy loads a tokenizer.json with

    tokenizer = Tokenizer.from_str(tiny_gguf.tokenizer_json())
    encoded = tokenizer.encode("What is 17*23?", add_special_tokens=False)
    assert tokenizer.decode(encoded.ids) == "What is 17*23?"
    tokens, _, _ = tiny_gguf.vocabulary()
    assert tokenizer.get_vocab_size() == len(tokens)
    assert "<0x2A>" in encoded.tokens  # '*' is not among the printable tokens: byte fallback, as llama.cpp does


def test_the_bench_command_measures_the_recipes_own_profile_unless_given_one(tmp_path: Path, monkeypatch) -> None:
    """`sparkplay bench` hands the playbook the recipe's own profile (its source's benchmark block); a
    --profile file wins over it. The playbook run is a stand-in here (the lab test runs the real one)."""
    import typer

    from sparkplay import cli_bench
    from sparkplay.runner import RunResult

    passed: list[dict] = []
    recipe = {"name": "r", "bench": {"pp": [2048], "tg": [32, 128]}}
    monkeypatch.setattr(cli_bench.catalog, "load_for_use", lambda *a: recipe)
    monkeypatch.setattr(cli_bench.catalog, "recipe_path", lambda *a: tmp_path / "r.yml")
    monkeypatch.setattr(cli_bench, "hosts_file", lambda inventory: tmp_path / "hosts.yml")
    monkeypatch.setattr(cli_bench, "finish", lambda *a: None)
    monkeypatch.setattr(cli_bench, "_placement", lambda *a: {})  # the primary's recipe (no inventory here)

    def stand_in(root, playbook, hosts, label, verbose=0, **extra):
        passed.append(extra)
        return RunResult(status="failed", rc=2)

    monkeypatch.setattr(cli_bench, "run", stand_in)
    for profile in (None, tmp_path / "p.yml"):
        if profile:
            profile.write_text("pp: [128]\n")
        with pytest.raises(typer.Exit):
            cli_bench.bench(inventory=tmp_path, recipe="r", profile=profile, results=tmp_path, project=PROJECT)
    assert passed[0]["bench_pp"] == [2048] and passed[0]["bench_tg"] == [32, 128]
    assert passed[1]["bench_pp"] == [128] and "bench_tg" not in passed[1]
