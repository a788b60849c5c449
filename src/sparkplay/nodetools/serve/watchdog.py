"""The watchdog on the leader: a real completion every interval; restarts every rank in order."""

from __future__ import annotations

import argparse
import json
import subprocess
import time
from pathlib import Path
from typing import Any

from .common import _read_json, _write_json, completion, unit_show, use_api_key
from .explain import report
from .group import on_peer
from .ports import port_holder_problem, reach


class Watchdog:
    """Probes the deployment with a real completion; restarts every rank in order after K failures in a
    row; at most R restarts in a window, then stands down and says why. State in a JSON file for status."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.state: dict[str, Any] = {
            "status": "starting",
            "restarts": [],
            "failures_in_a_row": 0,
            "probes": 0,
            "probe_failures": 0,
            "restarts_total": 0,
            "stood_down": None,
            "last_ok": None,
            "since": time.time(),
        }
        # the deploy's answer, the one the model is held to (engines/answers.py: exact, or exempt and why)
        self.state["answer"] = {
            "check": getattr(args, "answer_check", "exempt"),
            "why": getattr(args, "answer_why", "") or None,
            "reference": None,
            "at": None,
            "changed": None,
            "restarted": False,
        }
        previous = _read_json(args.state)
        if isinstance(previous, dict) and previous.get("stood_down"):  # a stand-down outlives a watchdog restart
            self.state.update({k: previous.get(k, self.state[k]) for k in self.state})
        kept = previous.get("answer") if isinstance(previous, dict) else None
        if isinstance(kept, dict) and kept.get("check") == self.state["answer"]["check"] and kept.get("reference"):
            self.state["answer"] = {**self.state["answer"], **kept}  # a deploy clears it; a watchdog restart does not
        try:
            self.metrics = _metrics(args.metrics_port, args.metrics_bind, args.model, args.unit)
        except OSError as exc:  # the port taken (by anyone): watch without counters rather than crash-loop
            self.metrics = None
            self.state["metrics_problem"] = f"metrics port {args.metrics_bind}:{args.metrics_port}: {exc.strerror}"
            print(self.state["metrics_problem"], flush=True)

    def save(self) -> None:
        self.state["updated"] = time.time()
        _write_json(self.args.state, self.state)
        if self.metrics:
            m = self.metrics
            m["stood_down"].set(1 if self.state["stood_down"] else 0)
            m["paused"].set(1 if self.state["status"] == "paused" else 0)
            m["failures_in_a_row"].set(self.state["failures_in_a_row"])

    def healthy(self) -> bool:
        squatted = port_holder_problem(self.args.url, self.args.unit, self.args.container)
        self.state["port_problem"] = squatted
        if squatted:  # an answer from another process proves nothing about the engine
            print(squatted, flush=True)
            self.state["probes"] += 1
            self.state["probe_failures"] += 1
            return False
        answer = completion(
            self.args.url, self.args.model, self.args.prompt, self.args.max_tokens, timeout=self.args.probe_timeout
        )
        self.state["probes"] += 1
        if self.metrics:
            self.metrics["probes"].inc()
        if answer is None:
            self.state["probe_failures"] += 1
            if self.metrics:
                self.metrics["probe_failures"].inc()
            return False
        self.state["last_ok"] = time.time()
        self.hold(str(answer.get("text") or ""))
        return True

    def hold(self, text: str) -> None:
        """The answer against the deploy's (the first one after it): a change while the deployment did not
        change is a finding: its files re-verified, and with them good, every rank restarted once."""
        held = self.state["answer"]
        if held["check"] != "exact" or not text:
            return
        if held["reference"] is None:
            held.update(reference=text, at=time.time())
            return
        if text == held["reference"]:
            if held["changed"]:
                print("answers as it did after the deploy again", flush=True)
            held.update(changed=None, restarted=False)
            return
        if held["changed"] is not None:
            held["changed"]["got"] = text[:160]
            if held["restarted"] and not held["changed"].get("after_restart"):  # the first answer after it
                held["changed"]["after_restart"] = True
                held["changed"]["why"] = "its files verify and a restart did not bring the deploy's answer back"
                print(held["changed"]["why"], flush=True)
            return
        print(
            f"answers changed since the deploy: {text[:80]!r}, where it answered {held['reference'][:80]!r}", flush=True
        )
        held["changed"] = {"since": time.time(), "got": text[:160], "why": None}
        bad = self.reverify()
        if bad:
            held["changed"]["why"] = (
                f"{'; '.join(bad[:3])} on this node differ from their manifest: run `sparkplay verify` to repair "
                "(a restart would load them again)"
            )
        elif not held["restarted"]:
            held["restarted"] = True
            held["changed"]["why"] = "its files verify: every rank restarted"
            self.pending_restart = True
        else:
            held["changed"]["why"] = "its files verify and a restart did not bring the deploy's answer back"
        print(held["changed"]["why"], flush=True)

    def reverify(self) -> list[str]:
        """Every file of the folders this leader serves from, hashed against its manifest: what differs."""
        bad: list[str] = []
        tool = getattr(self.args, "ckpt_tool", None)
        for folder in (getattr(self.args, "model_dir", []) or []) if tool else []:
            try:
                done = subprocess.run([tool, "verify", folder, "--full"], capture_output=True, text=True, timeout=3600)
            except (OSError, subprocess.TimeoutExpired) as exc:
                print(f"could not re-verify {folder}: {exc}", flush=True)
                continue
            if done.returncode == 3:
                found = (json.loads(done.stdout or "{}") or {}).get("bad") or {}
                bad += [f"{folder}/{path} ({why})" for path, why in sorted(found.items())]
            elif done.returncode != 0:
                print(f"could not re-verify {folder}: {(done.stderr or '').strip()[-200:]}", flush=True)
        return bad

    def restart_all(self) -> bool:
        """Stop every rank (leader first, so it never runs without its workers), start the workers in order,
        then the leader, and wait until the model answers again."""
        unit, workers = self.args.unit, self.args.workers
        print(f"restarting every rank: stop {unit} here and on {', '.join(workers) or 'no worker'}", flush=True)
        # a wedged engine may never finish a graceful stop (SIGTERM, then SIGCONT to a stopped one): kill it
        subprocess.run(["systemctl", "kill", "--signal=SIGKILL", unit], check=False, timeout=60)
        subprocess.run(["systemctl", "stop", unit], check=False, timeout=180)
        for peer in reversed(workers):  # a worker of a dead group may be deaf to SIGTERM until the stop timeout
            on_peer(peer, ["systemctl", "kill", "--signal=SIGKILL", unit])
            on_peer(peer, ["systemctl", "stop", unit])
        for peer in workers:
            on_peer(peer, ["systemctl", "reset-failed", unit])
            on_peer(peer, ["systemctl", "start", unit])
        # a unit that gave up on a crash loop (its start limit) gets this one more chance
        subprocess.run(["systemctl", "reset-failed", unit], check=False, timeout=60)
        subprocess.run(["systemctl", "start", "--no-block", unit], check=False, timeout=180)
        deadline = time.monotonic() + self.args.restart_timeout
        while time.monotonic() < deadline:
            time.sleep(min(self.args.interval, 2.0))  # look often: the model is back within seconds of its rank
            if self.healthy():
                return True
        return False

    def standing_aside(self, cable_only_with_workers: bool = False) -> str | None:
        """Why a restart cannot help now (the leader waits for a peer or its address, a twin has no carrier,
        a worker's node does not answer), or None: then failures count toward a restart. Between probes
        (`cable_only_with_workers`) a twin down is a reason only for a deployment with workers across it."""
        seen = report(self.args.unit, self.args.fabric_env)
        if self.metrics:
            self.metrics["oom_kills"].set(int((seen.get("memory") or {}).get("oom_kills") or 0))
        if seen.get("waiting"):
            return str(seen.get("why"))
        if cable_only_with_workers and not self.args.workers:
            return None
        cable = [
            f"twin {t} has {s}" if s == "no carrier" else f"twin {t} is {s}"
            for t, s in (seen.get("twins") or {}).items()
            if s != "up"
        ]
        if cable:
            return "; ".join(cable)
        for rank, worker in enumerate(self.args.workers, start=1):
            why = reach(f"{worker}:22", timeout=2)
            if why:
                return f"rank {rank} ({worker}) does not answer: {why}"
        return None

    def started_anew(self) -> bool:
        """Whether the leader's unit was started since the last look (a deploy, a person): a new grace."""
        invocation = unit_show(self.args.unit, "InvocationID").get("InvocationID", "")
        seen, self.invocation = getattr(self, "invocation", None), invocation
        return seen is not None and invocation != seen

    def step(self) -> None:
        args, state = self.args, self.state
        if self.started_anew():
            state.update(since=time.time(), last_ok=None, failures_in_a_row=0)
        if Path(args.pause).exists():
            state["status"] = "paused"
            return
        if state["stood_down"]:
            state["status"] = "stood-down"
            return
        in_grace = time.time() - state["since"] < args.grace and state["last_ok"] is None
        if self.healthy():
            state.update(status="ok", failures_in_a_row=0, why=None)
            if getattr(self, "pending_restart", False):  # its answer changed and its files verify: once
                self.pending_restart = False
                self.restart("its answer changed since the deploy")
            return
        aside = self.standing_aside()
        if aside != state.get("why"):
            print(f"not answering: {aside}" if aside else "not answering", flush=True)
        state["why"] = aside
        if aside:  # a restart cannot bring back a peer, a cable or an address: wait, and say for what
            state.update(status="waiting", failures_in_a_row=0)
            return
        if state.get("status") == "waiting" and not in_grace:
            # everything it waited for is back and the model still does not answer: a group that lived through
            # the outage is wedged (a worker still holds its dead leader's connection): restart it now
            print("back from an outage and still not answering: restarting every rank", flush=True)
            state["failures_in_a_row"] = args.failures - 1
        if in_grace:
            state["status"] = "starting"
            return
        state["failures_in_a_row"] += 1
        state["status"] = "failing"
        print(f"probe failed ({state['failures_in_a_row']} in a row)", flush=True)
        if state["failures_in_a_row"] < args.failures:
            return
        now = time.time()
        state["restarts"] = [t for t in state["restarts"] if now - t < args.window]
        if len(state["restarts"]) >= args.max_restarts:
            count = len(state["restarts"])
            why = f"{args.failures} failed probes in a row after {count} restart(s) within {args.window:.0f} s"
            why += f": standing down (remove {args.state} and restart this unit to resume)"
            state["stood_down"] = {"at": now, "why": why}
            state["status"] = "stood-down"
            print(state["stood_down"]["why"], flush=True)
            return
        self.restart(f"{args.failures} failed probes in a row")

    def restart(self, why: str) -> None:
        """Every rank restarted in order, counted (the cap holds for every reason), and its outcome kept."""
        state = self.state
        print(f"restarting every rank: {why}", flush=True)
        state["restarts"].append(time.time())
        state["restarts_total"] += 1
        if self.metrics:
            self.metrics["restarts"].inc()
        state["status"] = "restarting"
        self.save()
        ok = self.restart_all()
        self.started_anew()  # our own restart: the grace below, not another one
        state.update(failures_in_a_row=0, status="ok" if ok else "restarted-not-answering", since=time.time())

    def run(self) -> int:
        print(
            f"watchdog on {self.args.url} ({self.args.model}): every {self.args.interval} s, "
            f"{self.args.failures} failures restart every rank, at most {self.args.max_restarts} per "
            f"{self.args.window} s",
            flush=True,
        )
        while True:
            self.step()
            self.save()
            self.between_probes()

    def between_probes(self) -> None:
        """Until the next probe, look every --look-interval s for what makes waiting the answer (a twin without
        carrier, a worker's node gone, the leader waiting for a peer): said at once in the state file, which
        the gateway reads to refuse requests with the cause instead of letting them hang; what it waited for
        back, the next probe comes at once."""
        deadline = time.monotonic() + self.args.interval
        while (left := deadline - time.monotonic()) > 0:
            time.sleep(min(self.args.look_interval, left))
            if self.state["stood_down"] or self.state["status"] in ("paused", "restarting"):
                continue
            aside = self.standing_aside(cable_only_with_workers=True)
            if aside and (self.state["status"] != "waiting" or aside != self.state.get("why")):
                print(f"not answering: {aside}", flush=True)
                self.state.update(status="waiting", why=aside, failures_in_a_row=0)
                self.save()
            elif not aside and self.state["status"] == "waiting":
                return  # back: probe now


def _metrics(port: int, bind: str, model: str, unit: str) -> dict[str, Any] | None:
    """The watchdog's counters for Prometheus (prometheus_client, from the node's packages), labelled with the
    served model and its unit: several deployments' watchdogs are told apart on one scrape."""
    if not port:
        return None
    from prometheus_client import Counter, Gauge, start_http_server

    start_http_server(port, addr=bind)
    labels = ("model", "unit")
    made = {
        "probes": Counter("sparkplay_watchdog_probes", "Completion probes sent", labels),
        "probe_failures": Counter("sparkplay_watchdog_probe_failures", "Probes that got no answer in time", labels),
        "restarts": Counter("sparkplay_watchdog_restarts", "Restarts of every rank, in order", labels),
        "stood_down": Gauge("sparkplay_watchdog_stood_down", "1 when the restart cap was reached", labels),
        "paused": Gauge("sparkplay_watchdog_paused", "1 while the pause file exists", labels),
        "oom_kills": Gauge("sparkplay_watchdog_oom_kills", "Kills of the engine above its memory limit", labels),
        "failures_in_a_row": Gauge(
            "sparkplay_watchdog_failures_in_a_row", "Failed probes since the last answer", labels
        ),
    }
    return {name: metric.labels(model=model, unit=unit) for name, metric in made.items()}


def cmd_watchdog(args: argparse.Namespace) -> int:
    use_api_key(args)
    return Watchdog(args).run()
