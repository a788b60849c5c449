"""`sparkplay lab soak`: the lab serving several models under load for N minutes while faults come from a seeded
schedule, then a report of what held (docs/serving.md "The soak").

What it serves: lab-tiny across both ranks (the primary), lab-soak-small on rank 1 beside it (always on), and
two models on demand on rank 1 within a budget that fits one, so the gateway swaps them as the load takes
turns between them. The soak's recipes and its one inventory file (inventory/lab/group_vars/all/soak.yml)
are its own and go when it ends, with the deployments it added; lab-tiny stays served.

Faults come one at a time, each after a quiet gap: the next kind in a seeded shuffle of those allowed that fits
in the time left. Each is recorded with its window (from the fault to every always-on model answering again),
what `status` said meanwhile, and its recovery against its bound. Requests outside every window must succeed.
"""

from __future__ import annotations

import os
import platform
import random
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import yaml

from sparkplay.errors import BadInput, SparkplayError
from sparkplay.lab import soak_report, soak_watch
from sparkplay.lab.manager import container_name
from sparkplay.lab.soak_faults import KINDS, RECIPE_PREFIX, Fault, SoakLab, inject, observe, target, variant
from sparkplay.lab.soak_load import Load

STEADY = ["lab-tiny", f"{RECIPE_PREFIX}small"]
ON_DEMAND = [f"{RECIPE_PREFIX}a", f"{RECIPE_PREFIX}b"]
# each model on demand: lab-small's model with a 512k-token context (about 0.6 GiB claimed); the budget fits one
ON_DEMAND_CONTEXT = 1 << 19
SETTINGS = {"serve_on_demand": ON_DEMAND, "serve_on_demand_ttl": 600, "serve_on_demand_budget_gib": 0.9}
QUIET_S = (20.0, 40.0)  # the gap after a fault's recovery before the next one
WARM_UP_S = 30.0
LEAK_EVERY_S = 600.0
# a fault is started only when this much time is left: its hold and a typical recovery
EXPECTED_S = {kind: hold + (200 if kind == "engine-freeze" else 90) for kind, (hold, _) in KINDS.items()}
MAX_MINUTES = 7 * 24 * 60


def allowed(faults: str | None) -> list[str]:
    """The kinds the user allows (comma-separated; default: every kind)."""
    if faults is None:
        return list(KINDS)
    chosen = [k.strip() for k in faults.split(",") if k.strip()]
    unknown = [k for k in chosen if k not in KINDS]
    if unknown or not chosen:
        raise BadInput(
            f"--faults {faults!r} names {', '.join(unknown) or 'no fault'}",
            f"choose from {', '.join(KINDS)} (comma-separated)",
        )
    return chosen


def _settings_file(lab: SoakLab) -> Path:
    return lab.data / "inventory" / "lab" / "group_vars" / "all" / "soak.yml"


def prepare(lab: SoakLab, say: Callable[[str], None]) -> None:
    """Serve what the soak needs: lab-tiny, lab-soak-small beside it, the two models on demand (proven, stopped)."""
    small = lab.recipe("lab-small")
    lab.write_recipe(f"{RECIPE_PREFIX}small", variant(small, f"{RECIPE_PREFIX}small", port=9934))
    for port, name in enumerate(ON_DEMAND, start=9941):
        lab.write_recipe(name, variant(small, name, context=ON_DEMAND_CONTEXT, port=port))
    path = _settings_file(lab)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        "# Written by `sparkplay lab soak`; it removes this file when it ends.\n" + yaml.safe_dump(SETTINGS)
    )
    steps = [("lab-tiny",), *((name, "--add", "--node", container_name(1)) for name in [STEADY[1], *ON_DEMAND])]
    for args in steps:
        say(f"soak: up {' '.join(args)}")
        proc = lab.cli("up", *args, "--yes")
        if proc.returncode != 0:
            tail = (proc.stdout + proc.stderr).strip().splitlines()[-3:]
            raise SparkplayError(f"the soak could not serve {args[0]}: {' / '.join(tail)}", "see `sparkplay status`")


def clean_up(lab: SoakLab, say: Callable[[str], None]) -> None:
    """Stop what the soak added and remove its recipes and settings (lab-tiny stays served)."""
    for name in [*ON_DEMAND, STEADY[1], f"{RECIPE_PREFIX}oom"]:
        if (lab.recipes / f"{name}.yml").exists():
            say(f"soak: stop {name}")
            lab.cli("stop", name, "--yes")
    for path in lab.recipes.glob(f"{RECIPE_PREFIX}*.yml"):
        path.unlink()
    _settings_file(lab).unlink(missing_ok=True)


def _order(kinds: Sequence[str], rng: random.Random) -> list[str]:
    shuffled = list(kinds)
    rng.shuffle(shuffled)
    return shuffled


def one_fault(lab: SoakLab, kind: str, rng: random.Random) -> Fault:
    """Make one fault, read status while it lasts, and time serving's return against its bound."""
    fault = Fault(kind=kind, target=target(kind, rng), started=time.time(), bound_s=KINDS[kind][1])

    def make() -> None:
        try:
            inject(kind, lab, rng, fault)
        except SparkplayError as exc:
            fault.cleared, fault.problem = time.time(), f"the fault could not be made: {exc}"

    return observe(fault, make, lab.status_words, lab.answering, 2)


def run(
    root: Path,
    data: Path,
    *,
    minutes: float,
    seed: int,
    kinds: Sequence[str],
    report_dir: Path,
    say: Callable[[str], None],
) -> dict[str, Any]:
    if not 0 < minutes <= MAX_MINUTES:
        raise BadInput(f"--minutes {minutes:g} is out of range", f"give 1 to {MAX_MINUTES} minutes")
    rng = random.Random(seed)  # noqa: S311 - a repeatable schedule, not a secret
    lab = SoakLab(root, data, STEADY)
    prepare(lab, say)
    tracebacks: set[str] = set()
    starts: set[str] = set()
    samples: list[tuple[float, dict[str, float | None]]] = []
    faults: list[Fault] = []

    def read_lab() -> None:
        found, started = soak_watch.journal_lines(begun)
        tracebacks.update(found)
        starts.update(started)

    begun = time.time()
    load = Load(STEADY, ON_DEMAND, seed=seed)
    try:
        samples.append((0.0, soak_watch.sample()))
        load.start()
        ends = time.monotonic() + minutes * 60
        last_leak = time.monotonic()
        time.sleep(min(WARM_UP_S, minutes * 60 / 4))
        queue: list[str] = []
        while True:
            left = ends - time.monotonic()
            if not queue:
                queue = _order(kinds, rng)
            fitting = [k for k in queue if EXPECTED_S[k] + QUIET_S[0] <= left]
            if not fitting:
                break
            kind = fitting[0]
            queue.remove(kind)
            read_lab()  # before a fault that may take a node's journal with it
            say(f"soak: {len(faults) + 1}: {kind} ({left / 60:.1f} min left)")
            fault = one_fault(lab, kind, rng)
            faults.append(fault)
            took = (
                "not within its bound" if fault.recovered_s is None else f"answering again after {fault.recovered_s} s"
            )
            say(f"soak:    {fault.target}: {took}{'; ' + fault.problem if fault.problem else ''}")
            if time.monotonic() - last_leak >= LEAK_EVERY_S:
                samples.append((time.time() - begun, soak_watch.sample()))
                last_leak = time.monotonic()
            time.sleep(min(rng.uniform(*QUIET_S), max(0.0, ends - time.monotonic())))
        time.sleep(max(0.0, ends - time.monotonic()))
    finally:
        requests = load.stop()
        samples.append((time.time() - begun, soak_watch.sample()))
        read_lab()
        clean_up(lab, say)
    meta = {
        "started": begun,
        "started_utc": time.strftime("%Y-%m-%d %H:%M", time.gmtime(begun)),
        "seed": seed,
        "machine": f"{platform.node()} ({platform.machine()}, {len(os.sched_getaffinity(0))} CPUs)",
        "allowed": list(kinds),
    }
    report = soak_report.summarise(
        requests, faults, soak_watch.verdicts(samples), sorted(tracebacks), len(starts), minutes, meta
    )
    soak_report.write(report, report_dir)
    return report


def summary_lines(report: dict[str, Any]) -> list[str]:
    lines = [
        f"availability outside faults: {report['availability_outside_faults']:.2%} "
        f"({report['requests_outside_faults']} of {report['requests_total']} requests outside fault windows)",
        f"faults: {len(report['faults'])}, of {len(report['fault_kinds'])} kinds; swaps: {report['swaps']}",
    ]
    lines += [f"{'held' if held else 'FAILED'}: {rule}" for rule, held in report["rules"].items()]
    return lines
