"""Running the playbooks through ansible-runner, and what the CLI learns from the events.

The CLI never parses ansible's text output: it reads ansible-runner's events
(play and task starts, per-host results, retries, the final stats with the
playbooks' `set_stats` data) into a `RunResult`, and hands each event to a
display as it arrives. Artifacts go under the user's state directory, not
the checkout.
"""

from __future__ import annotations

import fcntl
import os
import re
import shutil
import signal
import sys
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager, nullcontext, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sparkplay import paths, runlock
from sparkplay.errors import ExitCode

PROGRESS = re.compile(r"([\d.]+) / ([\d.]+) GB \((\d+)%\)")


KEEP_RUNS = 20  # the runs whose artifacts are kept under the state folder


def rotate(artifacts: Path, keep: int = KEEP_RUNS) -> None:
    """Keep the newest `keep` runs' artifacts. Other processes rotate the same folder at the same time (a second
    CLI, a run's lease renewal): a run another one removed first is not an error (ansible-runner's own rotation
    failed the whole command with FileNotFoundError when two raced)."""

    def gone_already(_func: Any, _path: str, exc: Any) -> None:
        if not issubclass(exc[0], FileNotFoundError):
            raise exc[1]

    if not artifacts.is_dir():
        return
    # one rotation at a time: a run half removed has a new mtime and would pass for the newest in another's list
    with open(artifacts.parent / ".rotate.lock", "a") as lock:  # noqa: PTH123 - its descriptor is flocked
        fcntl.flock(lock, fcntl.LOCK_EX)
        found = []
        for entry in artifacts.iterdir():
            with suppress(FileNotFoundError):
                found.append((entry.stat().st_mtime, entry.name, entry))
        for _, _, old in sorted(found)[: max(0, len(found) - keep)]:
            shutil.rmtree(old, onerror=gone_already)


def collections_path(project: Path) -> str | None:
    """An installed project is the sparkplay.spark collection too: its roles name their plugins by FQCN.
    A checkout's ansible.cfg finds it through the link in collections/; an installed one (a wheel cannot
    carry a link) through one made here, in the user's cache."""
    if not paths.is_installed(project):
        return None
    link = paths.cache_dir(project) / "collections" / "ansible_collections" / "sparkplay" / "spark"
    if not (link.is_symlink() and link.resolve() == project.resolve()):
        link.parent.mkdir(parents=True, exist_ok=True)
        link.unlink(missing_ok=True)
        link.symlink_to(project.resolve(), target_is_directory=True)
    return os.pathsep.join([str(link.parents[2]), "~/.ansible/collections", "/usr/share/ansible/collections"])


@dataclass
class Failure:
    host: str
    task: str
    message: str
    output: list[str] = field(default_factory=list)
    unreachable: bool = False


@dataclass
class RunResult:
    """What a run did, from its events."""

    status: str = "unstarted"  # ansible-runner's: successful, failed, canceled, timeout
    rc: int | None = None
    stats: dict[str, dict[str, int]] = field(default_factory=dict)  # host -> ok/changed/failed/unreachable/skipped
    changes: dict[str, list[str]] = field(default_factory=dict)  # host -> tasks that changed (or would)
    failures: list[Failure] = field(default_factory=list)
    custom: dict[str, Any] = field(default_factory=dict)  # the playbooks' set_stats data
    messages: list[tuple[str, str, str]] = field(default_factory=list)  # (host, task, debug msg)
    interrupted: bool = False
    artifacts: Path | None = None

    @property
    def exit_code(self) -> ExitCode:
        if any(s.get("unreachable") for s in self.stats.values()) or any(f.unreachable for f in self.failures):
            return ExitCode.HOSTS_UNREACHABLE
        if self.failures or any(s.get("failed") for s in self.stats.values()):
            return ExitCode.HOSTS_FAILED
        if self.interrupted or self.status != "successful":
            return ExitCode.FAILED
        return ExitCode.OK

    def absorb(self, event: Mapping[str, Any]) -> None:
        """Fold one ansible-runner event into the result."""
        kind = event.get("event", "")
        data = event.get("event_data") or {}
        host, task = data.get("host", ""), str(data.get("task", "")).strip()
        res = data.get("res") or {}
        if kind == "runner_on_ok":
            if res.get("changed"):
                self.changes.setdefault(host, []).append(task)
            if "msg" in res and data.get("task_action") in ("debug", "ansible.builtin.debug"):
                self.messages.append((host, task, _text(res["msg"])))
        elif kind == "runner_on_failed" and not data.get("ignore_errors"):
            self.failures.append(Failure(host, task, _text(res.get("msg", "failed")), _output_tail(res)))
        elif kind == "runner_on_unreachable":
            self.failures.append(Failure(host, task, _text(res.get("msg", "unreachable")), unreachable=True))
        elif kind == "playbook_on_stats":
            names = {"ok": "ok", "changed": "changed", "failures": "failed", "dark": "unreachable"}
            names["skipped"] = "skipped"
            for key, name in names.items():
                for stat_host, count in (data.get(key) or {}).items():
                    self.stats.setdefault(stat_host, {n: 0 for n in names.values()})[name] = count
            for stat_host in data.get("processed") or {}:
                self.stats.setdefault(stat_host, {n: 0 for n in names.values()})
            artifact = data.get("artifact_data") or {}
            self.custom.update(artifact.get("_run", artifact) if isinstance(artifact, dict) else {})


def _text(value: Any) -> str:
    if isinstance(value, list):
        return "\n".join(str(v) for v in value)
    return str(value)


def _output_tail(res: Mapping[str, Any], lines: int = 20) -> list[str]:
    text = "\n".join(str(res.get(k) or "") for k in ("stdout", "stderr") if res.get(k))
    return text.strip().splitlines()[-lines:] if text.strip() else []


def progress_of(message: str) -> tuple[float, float] | None:
    """(done, total) GB from a mirror progress line, else None."""
    found = PROGRESS.search(message)
    return (float(found.group(1)), float(found.group(2))) if found else None


class Renewer:
    """While a run that changes nodes goes on, renew each node's run lock every `every` seconds
    (playbooks/renew.yml through `renew`), so that a run of hours (a download) keeps its nodes; what a renewal
    says of a node this run no longer holds is kept in `said`."""

    def __init__(self, renew: Callable[[Callable[[Mapping[str, Any]], None]], Any], every: float) -> None:
        self.renew, self.every = renew, every
        self.said: list[tuple[str, str, str]] = []
        self.count = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="sparkplay-renew", daemon=True)

    def _heard(self, event: Mapping[str, Any]) -> None:
        data = event.get("event_data") or {}
        message = ((data.get("res") or {}) if event.get("event") == "runner_on_ok" else {}).get("msg")
        if message:
            self.said.append((str(data.get("host", "")), "Renew | the run lock", str(message)))

    def _run(self) -> None:
        while not self._stop.wait(self.every):
            self.renew(self._heard)
            self.count += 1

    def __enter__(self) -> Renewer:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(timeout=600)


@contextmanager
def _interrupt_flag() -> Iterator[threading.Event]:
    """Ctrl-C sets a flag the runner polls, so it stops the playbook cleanly instead of dying mid-task."""
    flag = threading.Event()
    if threading.current_thread() is not threading.main_thread():
        yield flag
        return
    previous = signal.getsignal(signal.SIGINT)
    signal.signal(signal.SIGINT, lambda *_: flag.set())
    try:
        yield flag
    finally:
        signal.signal(signal.SIGINT, previous)


def run_playbook(
    project: Path,
    playbook: str,
    inventory: Path,
    *,
    extravars: Mapping[str, Any] | None = None,
    check: bool = False,
    diff: bool = False,
    verbose: int = 0,
    on_event: Callable[[Mapping[str, Any]], None] | None = None,
) -> RunResult:
    """Run PROJECT/PLAYBOOK against INVENTORY; every event goes to `on_event` as it happens."""
    import ansible_runner  # late: a second or so to import, and only runs need it

    result = RunResult()
    runs = paths.state_dir() / "runs"
    runs.mkdir(parents=True, exist_ok=True)
    bin_dir = str(Path(sys.executable).parent)
    env = {
        "ANSIBLE_CONFIG": str(project / "ansible.cfg"),
        # facts are cached with the user's caches (an installed project is read-only)
        "ANSIBLE_CACHE_PLUGIN_CONNECTION": str(paths.cache_dir(project) / "ansible-facts"),
        # the venv's ansible-playbook, and its plugins' sparkplay package
        "PATH": bin_dir + os.pathsep + os.environ.get("PATH", ""),
        "ANSIBLE_NOCOLOR": "1",
        "ANSIBLE_FORCE_COLOR": "0",
    }
    collections = collections_path(project)
    if collections:
        env["ANSIBLE_COLLECTIONS_PATH"] = collections
    cmdline = " ".join(flag for flag, on in (("--check", check), ("--diff", diff)) if on)

    def handle(event: dict[str, Any]) -> bool:
        result.absorb(event)
        if on_event is not None:
            on_event(event)
        return True  # keep the event in the artifacts

    def renew(heard: Callable[[Mapping[str, Any]], None]) -> None:
        rotate(runs / "artifacts")
        ansible_runner.run(
            private_data_dir=str(runs),
            project_dir=str(project),
            playbook=str(project / "playbooks" / "renew.yml"),
            inventory=str(inventory),
            extravars=runlock.extravars(),
            envvars=env,
            quiet=True,
            event_handler=lambda event: heard(event) or True,
            rotate_artifacts=0,  # rotate() keeps the last KEEP_RUNS
            suppress_env_files=True,
        )

    rotate(runs / "artifacts")
    # a run that holds its inventory's lock (a changing one, not its check run) keeps its nodes' leases alive
    renewing = Renewer(renew, runlock.RENEW_S) if runlock.CURRENT and not check else nullcontext()
    with _interrupt_flag() as interrupted, renewing:
        runner = ansible_runner.run(
            private_data_dir=str(runs),
            project_dir=str(project),
            playbook=str(project / playbook),
            inventory=str(inventory),
            extravars={**runlock.extravars(), **(extravars or {})},
            cmdline=cmdline or None,
            envvars=env,
            verbosity=verbose or None,
            quiet=verbose == 0,
            event_handler=handle,
            cancel_callback=interrupted.is_set,
            rotate_artifacts=0,  # rotate() keeps the last KEEP_RUNS
            suppress_env_files=True,
        )
        result.interrupted = interrupted.is_set()
    result.messages += renewing.said if isinstance(renewing, Renewer) else []
    result.status, result.rc = runner.status, runner.rc
    result.artifacts = Path(runner.config.artifact_dir)
    return result
