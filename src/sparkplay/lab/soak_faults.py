"""The soak's faults: what each kind does to the lab, how long it lasts, and the bound serving comes back within.

Each kind is made as day two meets it (docs/serving.md "Day two"): through `sparkplay lab` for the hardware
(reboot, power, cable), a signal through systemd for an engine or the gateway, and the CLI as a user runs it
for the rest (an update, a bad update, a deployment past its memory limit, two runs at once). A fault's bound
counts from the moment it is cleared (the cable plugged back, the node on, the signal sent) until every
always-on model answers through the gateway again. The bounds are docs/serving.md's "Recovery bounds".
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from sparkplay.engines.names import UNITS
from sparkplay.lab import faults as lab_faults
from sparkplay.lab.manager import container_name
from sparkplay.lab.soak_load import send
from sparkplay.served import gateway

SERVE_UNIT = UNITS["serve"]
GATEWAY_UNIT = gateway()["unit"]
RECIPE_PREFIX = "lab-soak-"

# kind -> (seconds the fault is held before it is cleared, seconds serving may take to come back after)
KINDS: dict[str, tuple[float, float]] = {
    "engine-kill": (0, 90),  # systemd restarts it; the leader's watcher restarts the leader after a worker
    "engine-freeze": (0, 300),  # three failed probes 30 s apart, then every rank restarted in order
    "gateway-kill": (0, 30),  # systemd restarts the gateway
    "reboot": (0, 150),  # the node boots; its units wait for their peers and cable address
    "cable-short": (15, 180),  # TCP's retries, or the watchdog once the cable is back
    "cable-long": (60, 180),
    "node-off": (45, 180),  # the other ranks wait; it boots, re-joins, the leader restarts after its worker
    "memory-kill": (0, 90),  # a deployment past its memory limit: its own cgroup kills it, nothing else
    "update": (0, 60),  # an added deployment updated beside itself
    "bad-update": (0, 90),  # a recipe the engine refuses: back to the last good by itself
    "two-runs": (0, 60),  # two `up` at once: the second waits for the first
}
# what a soak against real nodes may do unless told otherwise: nothing (engine kills only when allowed)
GENTLE = ("engine-kill",)


@dataclass
class Fault:
    kind: str
    target: str
    started: float  # unix time
    bound_s: float
    cleared: float = 0.0
    recovered_s: float | None = None  # from cleared to every always-on model answering; None: not within bound
    status_said: str = ""  # what `sparkplay status` said while it lasted
    problem: str = ""  # what went wrong beyond the outage (a command that should not have failed)
    notes: list[str] = field(default_factory=list)

    @property
    def window(self) -> tuple[float, float]:
        end = self.cleared + (self.recovered_s if self.recovered_s is not None else self.bound_s)
        return self.started, end


def status_words(doc: Any) -> str:
    """What `status --json` said, in its own words: each rank's why (or serving), each added deployment's why."""
    rows = doc["ranks"] if isinstance(doc, dict) else doc or []
    said = [f"{r.get('host')}: {r.get('why') or 'serving'}" for r in rows]
    added = doc.get("added", []) if isinstance(doc, dict) else []
    said += [f"{r.get('name', r.get('unit'))}: {r['why']}" for r in added if r.get("why")]
    return " | ".join(said)


def observe(
    fault: Fault, make: Callable[[], object], status: Callable[[], str], answering: Callable[[], bool], every: float
) -> Fault:
    """Make the fault (`make` returns once it is cleared), read `status` a second into it, and time serving's
    return against its bound (recovered_s stays None past it)."""
    said: list[str] = []
    reader = threading.Thread(target=lambda: (time.sleep(1), said.append(status())), daemon=True)
    reader.start()
    make()
    fault.cleared = fault.cleared or time.time()
    while time.time() < fault.cleared + fault.bound_s:
        if answering():
            fault.recovered_s = round(max(0.0, time.time() - fault.cleared), 1)
            break
        time.sleep(every)
    reader.join(timeout=600)
    fault.status_said = said[0] if said else "status did not answer within 10 minutes"
    return fault


class SoakLab:
    """The lab as the soak drives it: its nodes, the CLI, and the models that must keep answering."""

    def __init__(self, root: Path, data: Path, steady: list[str]) -> None:
        self.root, self.data, self.steady = root, data, steady
        self.recipes = data / "recipes"

    def node(self, rank: int, *argv: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["docker", "exec", container_name(rank), *argv], capture_output=True, text=True, timeout=timeout
        )

    def cli(self, *argv: str, timeout: float = 1200) -> subprocess.CompletedProcess[str]:
        """The CLI as a user runs it on the lab's inventory, with no terminal."""
        cmd = [sys.executable, "-m", "sparkplay", *argv, "-i", str(self.data / "inventory" / "lab")]
        return subprocess.run(
            cmd, capture_output=True, text=True, timeout=timeout, cwd=self.root, stdin=subprocess.DEVNULL
        )

    def answering(self) -> bool:
        return all(send(model, "chat", False, 10).ok for model in self.steady)

    def status_words(self) -> str:
        proc = self.cli("status", "--json", timeout=180)
        try:
            return status_words(json.loads(proc.stdout))
        except ValueError:
            return f"status exited {proc.returncode}: {(proc.stderr or proc.stdout).strip()[-200:]}"

    def write_recipe(self, name: str, doc: dict[str, Any]) -> None:
        (self.recipes / f"{name}.yml").write_text(yaml.safe_dump(doc, sort_keys=False))

    def recipe(self, name: str) -> dict[str, Any]:
        return yaml.safe_load((self.recipes / f"{name}.yml").read_text())


def variant(doc: dict[str, Any], name: str, *, context: int | None = None, port: int | None = None) -> dict[str, Any]:
    """A llama.cpp recipe as another deployment: its own name (and alias), context and port."""
    doc = json.loads(json.dumps(doc))
    args = doc["serve"]["args"]
    doc["name"] = name
    doc.setdefault("model", {})["served_name"] = name
    if "--alias" in args:
        args[args.index("--alias") + 1] = name
    if context:
        args[args.index("-c") + 1] = str(context)
        doc["context_length"] = context
    if port:
        doc["serve"]["port"] = port
    return doc


def _signal(lab: SoakLab, rank: int, unit: str, sig: str) -> None:
    lab.node(rank, "systemctl", "kill", f"--signal={sig}", unit)


def _held(lab: SoakLab, hold: float, make: Callable[[], object], clear: Callable[[], object]) -> None:
    make()
    time.sleep(hold)
    clear()


def inject(kind: str, lab: SoakLab, rng: random.Random, fault: Fault) -> None:
    """Make the fault and clear it (for held kinds, after their hold); returns once it is cleared."""
    hold = KINDS[kind][0]
    rank = int(fault.target.removeprefix("rank")) if fault.target.startswith("rank") else 0
    if kind == "engine-kill":
        _signal(lab, rank, SERVE_UNIT, "SIGKILL")
    elif kind == "engine-freeze":
        _signal(lab, rank, SERVE_UNIT, "SIGSTOP")
    elif kind == "gateway-kill":
        _signal(lab, 0, GATEWAY_UNIT, "SIGKILL")
    elif kind == "reboot":
        lab_faults.reboot(lab.data, rank)
    elif kind in ("cable-short", "cable-long"):
        _held(lab, hold, lambda: lab_faults.pull(lab.data), lambda: lab_faults.plug(lab.data))
    elif kind == "node-off":
        _held(lab, hold, lambda: lab_faults.power_off(lab.data, rank), lambda: lab_faults.power_on(lab.data, rank))
    elif kind == "memory-kill":
        _memory_kill(lab, fault)
    elif kind == "update":
        _update(lab, fault)
    elif kind == "bad-update":
        _bad_update(lab, fault)
    elif kind == "two-runs":
        _two_runs(lab, fault)
    fault.cleared = time.time()


def target(kind: str, rng: random.Random) -> str:
    if kind in ("engine-kill", "engine-freeze", "reboot", "node-off"):
        return f"rank{rng.choice((0, 1))}"
    return {"gateway-kill": "rank0", "memory-kill": "rank1", "update": "rank1"}.get(
        kind, "cable" if "cable" in kind else "all"
    )


def _memory_kill(lab: SoakLab, fault: Fault) -> None:
    """lab-small's model with a 4M-token context (a 2 GiB KV cache) claiming 0.25 GiB: its cgroup kills it."""
    name = f"{RECIPE_PREFIX}oom"
    doc = variant(lab.recipe(f"{RECIPE_PREFIX}small"), name, context=1 << 22, port=9939)
    doc["serve"]["memory_claim_gib"] = 0.25
    lab.write_recipe(name, doc)
    try:
        up = lab.cli("up", name, "--add", "--node", container_name(1), "--yes")
        if up.returncode == 0:
            fault.problem = f"{name} was proven although it cannot hold its cache"
        fault.notes.append(f"up {name} exited {up.returncode} (expected: not proven)")
        stop = lab.cli("stop", name, "--yes")
        if stop.returncode != 0:
            fault.problem = f"stop {name} exited {stop.returncode}: {stop.stdout[-300:]}"
    finally:
        (lab.recipes / f"{name}.yml").unlink(missing_ok=True)


def _update(lab: SoakLab, fault: Fault) -> None:
    """The always-on added model's context toggled (512 <-> 256 tokens), then `up --add` again."""
    name = f"{RECIPE_PREFIX}small"
    doc = lab.recipe(name)
    context = 256 if int(doc["context_length"]) != 256 else 512
    lab.write_recipe(name, variant(doc, name, context=context))
    up = lab.cli("up", name, "--add", "--node", container_name(1), "--yes")
    fault.notes.append(f"context -> {context}: up exited {up.returncode}")
    if up.returncode != 0:
        fault.problem = f"the update of {name} exited {up.returncode}: {up.stdout[-300:]}"


def _bad_update(lab: SoakLab, fault: Fault) -> None:
    name = f"{RECIPE_PREFIX}bad"
    doc = variant(lab.recipe("lab-tiny"), name)
    doc["serve"]["args"].append("--no-such-flag")
    lab.write_recipe(name, doc)
    try:
        up = lab.cli("up", name, "--yes", "--only", "serve")
    finally:
        (lab.recipes / f"{name}.yml").unlink(missing_ok=True)
    if up.returncode == 0 or "went back to the last deployment that answered" not in up.stdout:
        fault.problem = f"a bad update did not go back by itself (exit {up.returncode}): {up.stdout[-300:]}"
    fault.notes.append(f"up {name} exited {up.returncode}")


def _two_runs(lab: SoakLab, fault: Fault) -> None:
    """Two `up lab-tiny` 2 s apart: the second waits for the first (the run lock); both end well."""
    results: list[subprocess.CompletedProcess[str]] = []
    threads = [threading.Thread(target=lambda: results.append(lab.cli("up", "lab-tiny", "--yes"))) for _ in (0, 1)]
    for thread in threads:
        thread.start()
        time.sleep(2)
    for thread in threads:
        thread.join()
    codes = [r.returncode for r in results]
    fault.notes.append(f"exits {codes}")
    waited = any(
        "is changing these nodes" in (r.stdout + r.stderr) or "waiting for" in (r.stdout + r.stderr) for r in results
    )
    if codes != [0, 0]:
        fault.problem = f"two runs at once exited {codes}"
    elif not waited:
        fault.notes.append("neither run said it waited (the first had ended before the second asked)")
