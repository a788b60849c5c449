"""A thin, typed wrapper over the Docker CLI.

The CLI rather than an SDK: it is what the user would type, it needs no
extra dependency on the nodes' side, and its errors read the same.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Sequence
from typing import Any

from sparkplay.errors import MissingPrerequisite, SparkplayError


def docker_binary() -> str:
    """The docker client: $SPARKPLAY_DOCKER, else the first one on PATH."""
    found = os.environ.get("SPARKPLAY_DOCKER") or shutil.which("docker")
    if not found:
        raise MissingPrerequisite(
            "no docker client found", "install Docker (as root: make setup) or set SPARKPLAY_DOCKER"
        )
    return found


def docker(
    args: Sequence[str],
    *,
    check: bool = True,
    timeout: float = 120,
    input_bytes: bytes | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run `docker ARGS`; raise a one-line SparkplayError on failure when `check`."""
    cmd = [docker_binary(), *args]
    try:
        proc = subprocess.run(
            cmd,
            capture_output=True,
            text=input_bytes is None,
            input=input_bytes,
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        raise SparkplayError(f"docker {args[0]} timed out after {timeout:.0f} s") from exc
    if isinstance(proc.stdout, bytes):  # input given as bytes: decode for callers
        proc = subprocess.CompletedProcess(
            proc.args,
            proc.returncode,
            proc.stdout.decode(errors="replace"),
            proc.stderr.decode(errors="replace"),
        )
    if check and proc.returncode != 0:
        detail = (proc.stderr or proc.stdout).strip().splitlines()
        raise SparkplayError(f"docker {' '.join(args[:2])} failed: {detail[-1] if detail else proc.returncode}")
    return proc


def sha256_in(container: str, folder: str, pattern: str) -> dict[str, str]:
    """File name -> sha256 of the files matching `pattern` in a container's folder (none when it is missing)."""
    listed = docker(["exec", container, "sh", "-c", f"cd {folder} 2>/dev/null && sha256sum {pattern}"], check=False)
    return {line.split()[1]: line.split()[0] for line in listed.stdout.splitlines() if len(line.split()) == 2}


def require_engine() -> None:
    """Fail with one line unless a Docker engine answers."""
    proc = docker(["version", "--format", "{{.Server.Version}}"], check=False, timeout=20)
    if proc.returncode != 0 or not proc.stdout.strip():
        raise MissingPrerequisite(
            "no Docker engine reachable",
            "start one (as root: make setup starts dockerd) or point DOCKER_HOST at it",
        )


def inspect(kind: str, names: Sequence[str]) -> list[dict[str, Any]]:
    """`docker KIND inspect` for the names that exist; missing names are skipped."""
    if not names:
        return []
    proc = docker([kind, "inspect", *names], check=False)
    # inspect exits 1 when any name is missing but still prints the others
    try:
        data = json.loads(proc.stdout or "[]")
    except json.JSONDecodeError:
        return []
    return data if isinstance(data, list) else []


def ids_with_label(kind: str, label: str) -> list[str]:
    """Names of containers or networks carrying `label`, as the CLI lists them."""
    if kind == "container":
        proc = docker(["ps", "-a", "--filter", f"label={label}", "--format", "{{.Names}}"])
    else:
        proc = docker([kind, "ls", "--filter", f"label={label}", "--format", "{{.Name}}"])
    return [line for line in proc.stdout.split() if line]
