"""Shared fixtures. Tests marked `lab` use the real Docker engine and systemd containers."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests import steps

PROJECT = Path(__file__).resolve().parents[1]

# ansible-playbook, molecule and the CLI come from the same environment as this
# interpreter, whatever PATH the caller had (no test depends on an activated venv)
os.environ["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"


def run_cli(
    *args: str, env: dict[str, str] | None = None, timeout: float | None = None
) -> subprocess.CompletedProcess[str]:
    """Run the sparkplay CLI as a user would, in a separate process with no terminal (the CLI must not wait for
    an answer), bounded by its step's budget (tests/steps.py) unless `timeout` names another."""
    step, budget = steps.cli_step(args)
    return steps.run_step(
        [sys.executable, "-m", "sparkplay", *args],
        step=step,
        budget=timeout or budget,
        env={**os.environ, **(env or {})},
    )


@pytest.fixture(autouse=True)
def no_hub(monkeypatch: pytest.MonkeyPatch) -> None:
    """The Hugging Face hub is a test double wherever a test needs one: an import that would list a
    repository's files (llama.cpp's -hf) fails here as it would where the hub does not answer."""
    from sparkplay.errors import BadInput
    from sparkplay.recipes.importers.pasted import gguf_hub

    def unreachable(repo: str, revision: str | None) -> tuple[str, list[str]]:
        raise BadInput(
            f"cannot list {repo}@{revision or 'main'} on the Hugging Face hub (not in tests)",
            "import where the hub answers, or --set model.path=<file in the repository>",
        )

    monkeypatch.setattr(gguf_hub, "LISTER", unreachable)


def _lab_unavailable() -> str | None:
    if os.geteuid() != 0:
        return "the lab needs root (veth pairs in container namespaces)"
    if shutil.which("docker") is None or shutil.which("debootstrap") is None:
        return "docker or debootstrap missing (run make setup)"
    proc = subprocess.run(["docker", "version", "--format", "{{.Server.Version}}"], capture_output=True, check=False)
    if proc.returncode != 0:
        return "no Docker engine answers (run make setup)"
    return None


@pytest.fixture(scope="session")
def lab_host() -> None:
    """Skip lab tests where the lab cannot run, except in CI, where that is a failure."""
    reason = _lab_unavailable()
    if reason is None:
        return
    if os.environ.get("CI"):
        pytest.fail(f"CI must run the lab tests, but {reason}")
    pytest.skip(reason)


def lab_small_as(name: str, context: int, port: int, **serve: object) -> dict:
    """The lab-small recipe as another deployment: its own name, served name, port and context (tokens)."""
    import yaml

    doc = yaml.safe_load((PROJECT / "recipes" / "lab-small.yml").read_text())
    doc.update(name=name, context_length=context)
    doc["model"]["served_name"] = name
    args = doc["serve"]["args"]
    args[args.index("-c") + 1] = str(context)
    args[args.index("--alias") + 1] = name
    doc["serve"].update(port=port, **serve)
    return doc


def lab_cli(*args: str, timeout: float | None = None) -> subprocess.CompletedProcess[str]:
    """The CLI against the lab's inventory."""
    return run_cli(*args, "-i", "inventory/lab", timeout=timeout)


@pytest.fixture(scope="module")
def own_lab() -> Iterator[None]:
    """A lab of the module's own, provisioned (from the snapshot, provisioned_lab), shared by its tests in file
    order: the modules that ask for it serve models and test what follows, not provisioning."""
    with provisioned_lab():
        yield


@contextlib.contextmanager
def fresh_lab() -> Iterator[None]:
    """A lab of its own for a test module: down, then up with no recipe choice left from an earlier run
    (lab down keeps inventory files it did not write); down again after."""
    _lab_down()
    assert run_cli("lab", "up").returncode == 0
    yield
    run_cli("lab", "down")


def _lab_down() -> None:
    run_cli("lab", "down")
    shutil.rmtree(PROJECT / "inventory" / "lab" / "group_vars" / "all", ignore_errors=True)


def provisioning_snapshot() -> str:
    """The name of the lab snapshot for this code: a hash of everything that decides provisioning."""
    from sparkplay.lab.image import ImageRecipe
    from sparkplay.lab.snapshot import provisioning_key

    return f"provisioned-{provisioning_key(PROJECT, ImageRecipe().tag)}"


# The recipe the lab was left serving by a module whose tests all passed, for the next module that starts from
# it served (issue 52: one serving lab shared, test_serve_lab's then test_several_lab's); empty when none was.
_HANDED_ON: list[str] = []


@contextlib.contextmanager
def provisioned_lab(hand_on: Callable[[], str | None] | None = None) -> Iterator[None]:
    """A lab whose nodes provision.yml has run on, for a module that tests something else (issue 52).

    Each rank starts from the lab snapshot kept for this code (sparkplay.lab.snapshot; its name hashes
    everything that decides provisioning, so a stale one is never used); the first module to ask makes it:
    a fresh lab, provision.yml, then `lab snapshot`. Modules that test provisioning itself use fresh_lab.
    `hand_on`, asked at the end, names the recipe the lab is left serving for the next module (serving_lab);
    None takes the lab down."""
    from sparkplay.lab import snapshot

    _HANDED_ON.clear()
    name = provisioning_snapshot()
    _lab_down()
    if snapshot.images(name, 2) is not None:
        proc = run_cli("lab", "up", "--snapshot", name)
        assert proc.returncode == 0, proc.stdout + proc.stderr
    else:
        assert run_cli("lab", "up").returncode == 0
        proc = steps.playbook("provision.yml")
        assert proc.returncode == 0, proc.stdout[-3000:]
        kept = run_cli("lab", "snapshot", name)
        assert kept.returncode == 0, kept.stdout + kept.stderr
    yield
    recipe = hand_on() if hand_on else None
    if recipe:
        _HANDED_ON.append(recipe)
    else:
        run_cli("lab", "down")


@contextlib.contextmanager
def serving_lab(recipe: str) -> Iterator[None]:
    """A provisioned lab serving RECIPE across both ranks: the one the module before left serving it, when it
    did (provisioned_lab's hand_on), else one from the snapshot with `up RECIPE --yes` run first."""
    if [recipe] == _HANDED_ON:
        _HANDED_ON.clear()
        yield
        run_cli("lab", "down")
        return
    with provisioned_lab():
        proc = run_cli("up", recipe, "-i", "inventory/lab", "--yes")
        assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr
        yield


@pytest.fixture(scope="module")
def provisioned() -> Iterator[None]:
    with provisioned_lab():
        yield


# Durations are data: every test's setup, call and teardown time, written where `make test` reports them from
# (scripts/timed.py --report; docs/benchmarks.md keeps the table per suite).
_TIMES: list[tuple[str, str, float, str]] = []


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    _TIMES.append((report.nodeid, report.when, report.duration, report.outcome))


def pytest_sessionfinish(session: pytest.Session) -> None:
    if _HANDED_ON:  # left serving for a module that did not run
        run_cli("lab", "down")
    if hasattr(session.config, "workerinput") or not _TIMES:  # an xdist worker: its controller writes
        return
    where = Path(os.environ.get("SPARKPLAY_TEST_TIMES") or PROJECT / ".cache" / "test-times" / "pytest.tsv")
    where.parent.mkdir(parents=True, exist_ok=True)
    rows = sorted(_TIMES, key=lambda row: -row[2])
    text = "".join(f"{node}\t{when}\t{took:.2f}\t{outcome}\n" for node, when, took, outcome in rows)
    partial = where.with_suffix(".tmp")
    partial.write_text("test\tphase\tseconds\toutcome\n" + text)
    partial.replace(where)
