"""Shared fixtures. Tests marked `lab` use the real Docker engine and systemd containers."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

PROJECT = Path(__file__).resolve().parents[1]

# ansible-playbook, molecule and the CLI come from the same environment as this
# interpreter, whatever PATH the caller had (no test depends on an activated venv)
os.environ["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"


def run_cli(*args: str, env: dict[str, str] | None = None, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    """Run the sparkplay CLI as a user would, in a separate process."""
    return subprocess.run(
        [sys.executable, "-m", "sparkplay", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,  # no terminal: the CLI must not wait for an answer
        env={**os.environ, **(env or {})},
        cwd=PROJECT,
        check=False,
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


def lab_cli(*args: str, timeout: float = 1200) -> subprocess.CompletedProcess[str]:
    """The CLI against the lab's inventory."""
    return run_cli(*args, "-i", "inventory/lab", timeout=timeout)


@pytest.fixture(scope="module")
def own_lab() -> Iterator[None]:
    """A fresh lab for the module that asks for it, shared by its tests in file order."""
    with fresh_lab():
        yield


@contextlib.contextmanager
def fresh_lab() -> Iterator[None]:
    """A lab of its own for a test module: down, then up with no recipe choice left from an earlier run
    (lab down keeps inventory files it did not write); down again after."""
    run_cli("lab", "down")
    shutil.rmtree(PROJECT / "inventory" / "lab" / "group_vars" / "all", ignore_errors=True)
    assert run_cli("lab", "up").returncode == 0
    yield
    run_cli("lab", "down")
