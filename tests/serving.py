"""What the lab tests of one served model share (tests/test_serve_lab.py, tests/test_stack_lab.py): lab-tiny
asked on the leader's loopback, its units and journals on each rank, the catalog variants the tests serve."""

from __future__ import annotations

import contextlib
import json
import re
import subprocess
import time
from collections.abc import Iterator

import yaml

from tests.conftest import PROJECT, run_cli
from tests.test_lab import in_node, post_on_leader
from tests.test_provision_lab import playbook

UNIT = "sparkplay-serve.service"


def ask(prompt: str = "What is 17*23?", timeout: float = 10) -> dict | None:
    """A temperature-0 chat completion from the leader's API (it listens on rank 0's loopback)."""
    body = {"messages": [{"role": "user", "content": prompt}], "temperature": 0, "max_tokens": 12}
    return post_on_leader("http://127.0.0.1:9931/v1/chat/completions", body, timeout)


def unit(rank: int, *props: str) -> dict[str, str]:
    out = in_node(rank, "systemctl", "show", UNIT, "--property=" + ",".join(props)).stdout
    return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)


def journal(rank: int, unit_name: str = UNIT) -> str:
    return in_node(rank, "journalctl", "-u", unit_name, "--no-pager", "-o", "cat").stdout


def status() -> list[str]:
    proc = playbook("status.yml")
    assert proc.returncode == 0, proc.stdout[-3000:]
    return re.findall(r'^\s+"(\d+\s+sparkplay-lab-rank\d.*)",?$', proc.stdout, re.M)


def wait_answer(seconds: float) -> float | None:
    started = time.monotonic()
    while time.monotonic() - started < seconds:
        if ask(timeout=5):
            return time.monotonic() - started
        time.sleep(0.5)
    return None


def wait_for(what, seconds: float) -> float | None:
    started = time.monotonic()
    while time.monotonic() - started < seconds:
        if what():
            return time.monotonic() - started
        time.sleep(1)
    return None


def up(*args: str) -> subprocess.CompletedProcess[str]:
    return run_cli("up", "lab-tiny", "-i", "inventory/lab", *args)


LOCK = PROJECT / "inventory" / "lab" / "group_vars" / "all" / "sparkplay_stack_lock.yml"
RPC_SERVER = "/usr/libexec/x86_64-linux-gnu/llama/bin/ggml-rpc-server"


def served_models() -> list[str]:
    out = in_node(0, "curl", "-s", "-m", "5", "http://127.0.0.1:9931/v1/models", check=False).stdout
    return [m["id"] for m in json.loads(out or "{}").get("data", [])]


def held(rank: int) -> list[str]:
    return in_node(rank, "apt-mark", "showhold").stdout.split()


@contextlib.contextmanager
def lab_tiny_variant(name: str, *, args: dict[str, str] | None = None, extra: tuple[str, ...] = ()) -> Iterator[None]:
    """lab-tiny under another name in the catalog (its served name too), for the test's length."""
    doc = yaml.safe_load((PROJECT / "recipes" / "lab-tiny.yml").read_text())
    doc["name"] = doc["model"]["served_name"] = name
    argv = doc["serve"]["args"]
    argv[argv.index("--alias") + 1] = name
    for flag, value in (args or {}).items():
        argv[argv.index(flag) + 1] = value
        doc["context_length"] = int(value) if flag == "-c" else doc["context_length"]
    argv += list(extra)
    path = PROJECT / "recipes" / f"{name}.yml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    try:
        yield
    finally:
        path.unlink()


# NCCL needs a GPU: a stand-in (a test double) under the name and links dpkg's libnccl2 lays down, so the lock
# reads a library by its bytes as it reads the real one on a Spark (issue 59: two builds of one version)
NCCL = "/usr/lib/x86_64-linux-gnu/libnccl.so.2.28.3"


def stand_in_nccl() -> None:
    """The same stand-in NCCL on both ranks, before a lock reads it."""
    for rank in (0, 1):
        in_node(rank, "sh", "-c", f"printf 'ELF nccl 2.28.3' > {NCCL} && ln -sf {NCCL} {NCCL[: -len('.28.3')]}")
