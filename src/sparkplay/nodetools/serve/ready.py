"""Readiness: waiting for an API that answers a real completion while every rank's unit is watched."""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from . import receipt
from .common import completion, journal, probe, unit_show, use_api_key
from .ports import port_holder_problem


def unit_failed(state: dict[str, str], restarts_before: int) -> str | None:
    """Why a unit counts as failed during the wait, or None."""
    active, sub = state.get("ActiveState", ""), state.get("SubState", "")
    if active == "failed":
        return f"failed ({state.get('Result', '?')})"
    if sub == "auto-restart" or int(state.get("NRestarts", "0") or 0) > restarts_before:
        return f"exited and is being restarted ({state.get('Result', '?')})"
    if active == "inactive":
        return "stopped"
    return None


def cmd_ready(args: argparse.Namespace) -> int:
    use_api_key(args)
    ranks: list[tuple[str, str | None]] = [("rank 0", None)] + [(f"rank {i + 1}", p) for i, p in enumerate(args.peers)]
    props = ("ActiveState", "SubState", "NRestarts", "Result")
    before = {name: int(unit_show(args.unit, *props, peer=peer).get("NRestarts", "0") or 0) for name, peer in ranks}
    started = time.monotonic()
    stage, result = "health", {}
    # a start's receipt: from the unit's own start where this wait follows one (receipt.py)
    origin = receipt.unit_started(args.unit, started) if args.receipt else None
    times = receipt.Receipt(origin, "unit start") if origin is not None else None
    while True:
        # first: an engine that cannot bind its port fails too, but the process holding it is the news
        squatted = port_holder_problem(args.url, args.unit, args.container)
        if squatted:
            return _report(args, ranks, 6, squatted, stage, started)
        for name, peer in ranks:
            why = unit_failed(unit_show(args.unit, *props, peer=peer), before[name])
            if why:
                return _report(args, ranks, 4, f"{name}'s {args.unit} {why} while waiting", stage, started)
        if times is not None and receipt.port_open(args.url):
            times.mark("port_open_s", time.monotonic())
        look = probe(args.url, args.model)
        stage = "completion" if look["served"] else "models" if look["health"] else "health"
        if times is not None:
            for what, seen in (("http_ready_s", look["health"]), ("listed_s", look["served"])):
                if seen:
                    times.mark(what, time.monotonic())
        if look["served"]:
            # ready is the first streamed token of a real request (its kernels compiled), then the whole answer
            left = max(args.timeout - (time.monotonic() - started), 1.0)
            first = receipt.first_token(args.url, args.model, args.prompt, args.max_tokens, left)
            if times is not None:
                times.mark("first_token_s", time.monotonic() if first is not None else None)
            answer = completion(args.url, args.model, args.prompt, args.max_tokens)
            if answer:
                result = {"ready": True, "seconds": round(time.monotonic() - started, 1), "completion": answer}
                if times is not None:
                    times.mark("answer_s", time.monotonic())
                    result["receipt"] = times.doc()
                    receipt.write(args.receipt, result["receipt"])
                print(json.dumps(result), flush=True)
                return 0
        if time.monotonic() - started > args.timeout:
            return _report(args, ranks, 5, f"not ready after {args.timeout} s (stuck at: {stage})", stage, started)
        _progress(args.progress, stage, started)
        # a start's receipt wants its moments to within half a second; a plain wait keeps its interval
        time.sleep(min(args.interval, 0.5) if times is not None else args.interval)


def _progress(path: str | None, stage: str, started: float) -> None:
    if path:
        scratch = Path(path + ".tmp")
        scratch.write_text(json.dumps({"stage": stage, "waited_s": round(time.monotonic() - started, 1)}))
        scratch.replace(path)


def _report(
    args: argparse.Namespace, ranks: list[tuple[str, str | None]], code: int, why: str, stage: str, started: float
) -> int:
    journals = {name: journal(args.unit, peer) for name, peer in ranks}
    print(
        json.dumps(
            {
                "ready": False,
                "why": why,
                "stage": stage,
                "seconds": round(time.monotonic() - started, 1),
                "journals": journals,
            }
        ),
        flush=True,
    )
    return code


def cmd_probe(args: argparse.Namespace) -> int:
    """What the API says now, and whether the model answers a four-token completion (health for status:
    /health and the model list stay "ok" while a worker is gone or the engine is frozen). Given the unit, a
    process of another cgroup holding the port is named and never asked (nor sent the API's key)."""
    squatted = port_holder_problem(args.url, args.unit, args.container) if args.unit else None
    if squatted:
        print(json.dumps({"health": False, "models": [], "served": False, "answers": False, "why": squatted}))
        return 0
    use_api_key(args)
    look = probe(args.url, args.model)
    started = time.monotonic()
    answer = completion(args.url, args.model, "Hi", 4, timeout=PROBE_TIMEOUT) if look["served"] else None
    look["answers"] = answer is not None
    look["answer_s"] = round(time.monotonic() - started, 3)
    if args.receipt:
        look["receipt"] = receipt.read(args.receipt)  # the last start's (status shows it)
    if answer is None:
        silent = "the API lists no such model" if look["health"] else "the API does not answer"
        look["why"] = f"no answer to a completion within {PROBE_TIMEOUT:.0f} s" if look["served"] else silent
    print(json.dumps(look))
    return 0


PROBE_TIMEOUT = 10.0


def cmd_verify_unit(args: argparse.Namespace) -> int:
    if shutil.which("systemd-analyze") is None:
        print("systemd-analyze is missing: cannot check the unit", file=sys.stderr)
        return 1
    with tempfile.TemporaryDirectory() as scratch:
        path = str(Path(scratch) / args.name)
        shutil.copyfile(args.file, path)
        done = subprocess.run(["systemd-analyze", "verify", path], capture_output=True, text=True, check=False)
    # systemd-analyze also grumbles about unrelated units on the host; only lines naming ours count
    mine = [line for line in (done.stdout + done.stderr).splitlines() if args.name in line]
    for line in mine:
        print(line, file=sys.stderr)
    return 1 if done.returncode != 0 and mine else 0
