"""`sparkplay soak`: the lab's soak (sparkplay.lab.soak) against the nodes of a real inventory, as gently as the
user allows.

It serves nothing of its own and changes nothing: the load goes from this machine to the API the user names on
its loopback (a tunnel to the leader's gateway), across every model that API lists (the gateway's models on
demand taking turns, so it swaps them), and faults come only when asked (`--faults`; none by default): an
engine's unit killed as a crash would kill it, or restarted; a node rebooted only when `reboot` is named.
Each fault is made through Ansible on the node that runs the unit (playbooks/soak_fault.yml), `status` is read
while it lasts, and serving's return is timed against the bound (an engine on a Spark may take 15 minutes to
load its model again). The report is the lab soak's (report.json, report.md, requests.png) with the rules that
apply here: availability outside the fault windows and every fault within its bound.
"""

from __future__ import annotations

import os
import platform
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sparkplay import cli_status
from sparkplay.errors import BadInput, SparkplayError
from sparkplay.lab import soak_report
from sparkplay.lab.soak_faults import Fault, observe, status_words
from sparkplay.lab.soak_load import Load
from sparkplay.runner import run_playbook
from sparkplay.soak.client import Client

# kind -> (seconds held, seconds serving may take to answer again after it is cleared)
KINDS: dict[str, tuple[float, float]] = {
    "engine-kill": (0, 900),  # systemd restarts it; a vLLM engine on a Spark loads its model again (10-15 min)
    "engine-restart": (0, 900),
    "reboot": (0, 1800),  # only when named: the node boots and its units wait for their peers
}
QUIET_S = (60.0, 120.0)  # the gap after a fault's recovery before the next
WARM_UP_S = 30.0
MAX_MINUTES = 7 * 24 * 60
PLAYBOOK = "playbooks/soak_fault.yml"
# what a soak against real nodes does not measure (the lab's does: it reads the nodes' journals and processes)
NOT_HERE = ("no leak growing", "no traceback in any journal", "swap a minute", "during an update")


def allowed(faults: str | None) -> list[str]:
    """The kinds the user allows: none unless named (comma-separated; `none` for none)."""
    chosen = [k.strip() for k in (faults or "").split(",") if k.strip() and k.strip() != "none"]
    unknown = [k for k in chosen if k not in KINDS]
    if unknown:
        raise BadInput(
            f"--faults {faults!r} names {', '.join(unknown)}, which sparkplay soak does not make on real nodes",
            f"choose from {', '.join(KINDS)} (comma-separated), or none; the lab's soak makes every kind",
        )
    return chosen


def targets(doc: Any) -> list[tuple[str, str]]:
    """(host, unit) of every engine serving now, from `status --json`: the primary's ranks and each added
    deployment that is always on (a model on demand is stopped and started by the gateway: not a fault here)."""
    ranks = doc["ranks"] if isinstance(doc, dict) else doc or []
    added = doc.get("added", []) if isinstance(doc, dict) else []
    found = [(str(r["host"]), str(r["unit"])) for r in ranks if r.get("unit") and r.get("up")]
    found += [
        (str(r["host"]), str(r["unit"]))
        for r in added
        if r.get("unit") and r.get("health") != "on demand" and str(r.get("state", "")).startswith("active")
    ]
    return found


class Cluster:
    """The inventory's nodes as the soak drives them: status, one fault at a time, the API answering."""

    def __init__(self, root: Path, hosts: Path, client: Client, steady: list[str]) -> None:
        self.root, self.hosts, self.client, self.steady = root, hosts, client, steady

    def status(self) -> Any:
        return cli_status.as_json(run_playbook(self.root, "status.yml", self.hosts))

    def status_words(self) -> str:
        try:
            return status_words(self.status())
        except (SparkplayError, KeyError, TypeError, ValueError) as exc:  # a report field, not the soak's end
            return f"status could not be read: {exc}"

    def make(self, kind: str, host: str, unit: str) -> str:
        """Make the fault through Ansible on `host`; '' when done, else what failed."""
        extra = {"soak_fault_host": host, "soak_fault_kind": kind, "soak_fault_unit": unit}
        result = run_playbook(self.root, PLAYBOOK, self.hosts, extravars=extra)
        if result.exit_code == 0:
            return ""
        failed = result.failures[0] if result.failures else None
        return f"{kind} on {host} failed: {failed.message if failed else result.status}"

    def answering(self) -> bool:
        return all(self.client.send(model, "chat", False, 30).ok for model in self.steady)


def one_fault(cluster: Cluster, kind: str, rng: random.Random, bound_s: float) -> Fault:
    where = targets(cluster.status())
    if not where:
        fault = Fault(kind=kind, target="-", started=time.time(), bound_s=bound_s, cleared=time.time())
        fault.problem = "status shows no engine serving to make it on"
        return fault
    host, unit = rng.choice(where)
    fault = Fault(kind=kind, target=f"{host} {unit}", started=time.time(), bound_s=bound_s)

    def make() -> None:
        fault.problem = cluster.make(kind, host, unit)

    return observe(fault, make, cluster.status_words, cluster.answering, 5)


@dataclass(frozen=True)
class Schedule:
    """How long the load runs, how fast, and which faults come (each checked as the user gave it)."""

    minutes: float
    kinds: Sequence[str] = ()
    seed: int = 1
    rate: float = 1.0
    bound_s: float | None = None  # seconds serving may take to answer again; None: each kind's own

    def __post_init__(self) -> None:
        if not 0 < self.minutes <= MAX_MINUTES:
            raise BadInput(f"--minutes {self.minutes:g} is out of range", f"give 1 to {MAX_MINUTES} minutes")
        if not 0 < self.rate <= 20:
            raise BadInput(f"--rate {self.rate:g} is out of range", "give 0.1 to 20 requests a second")
        if self.bound_s is not None and not 10 <= self.bound_s <= 7200:
            raise BadInput(f"--bound {self.bound_s:g} is out of range", "give 10 to 7200 seconds")


def run(
    root: Path, hosts: Path, client: Client, schedule: Schedule, report_dir: Path, say: Callable[[str], None]
) -> dict[str, Any]:
    minutes, kinds, seed = schedule.minutes, schedule.kinds, schedule.seed
    bounds = {kind: schedule.bound_s or KINDS[kind][1] for kind in kinds}
    steady, on_demand = client.models()
    if not steady and not on_demand:
        raise BadInput(
            f"the API at http://{client.host}:{client.port}{client.prefix} lists no model",
            "check the tunnel and `sparkplay status`; with keys, give --key-file",
        )
    rng = random.Random(seed)  # noqa: S311 - a repeatable schedule, not a secret
    cluster = Cluster(root, hosts, client, steady or on_demand[:1])
    say(f"soak: {', '.join(steady) or '-'} always on; {', '.join(on_demand) or 'none'} on demand")
    load = Load(steady or on_demand[:1], on_demand, seed=seed, rate=schedule.rate, sender=client.send)
    faults: list[Fault] = []
    begun = time.time()
    try:
        load.start()
        ends = time.monotonic() + minutes * 60
        time.sleep(min(WARM_UP_S, minutes * 60 / 4))
        while kinds:
            left = ends - time.monotonic()
            fitting = [k for k in kinds if bounds[k] / 3 + QUIET_S[0] <= left]
            if not fitting:
                break
            kind = rng.choice(fitting)
            say(f"soak: {len(faults) + 1}: {kind} ({left / 60:.1f} min left)")
            fault = one_fault(cluster, kind, rng, bounds[kind])
            faults.append(fault)
            back = "not within its bound" if fault.recovered_s is None else f"answering after {fault.recovered_s} s"
            say(f"soak:    {fault.target}: {back}{'; ' + fault.problem if fault.problem else ''}")
            time.sleep(min(rng.uniform(*QUIET_S), max(0.0, ends - time.monotonic())))
        time.sleep(max(0.0, ends - time.monotonic()))
    finally:
        requests = load.stop()
    meta = {
        "where": f"the nodes of {hosts}",
        "started": begun,
        "started_utc": time.strftime("%Y-%m-%d %H:%M", time.gmtime(begun)),
        "seed": seed,
        "machine": f"{platform.node()} ({platform.machine()}, {len(os.sched_getaffinity(0))} CPUs), the load's",
        "allowed": list(kinds),
    }
    report = soak_report.summarise(requests, faults, [], [], 0, minutes, meta)
    report["not_measured"] = [rule for rule in report["rules"] if any(part in rule for part in NOT_HERE)]
    report["rules"] = {k: v for k, v in report["rules"].items() if k not in report["not_measured"]}
    report["passed"] = all(report["rules"].values())
    soak_report.write(report, report_dir)
    return report
