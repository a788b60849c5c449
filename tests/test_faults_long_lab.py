"""Day two on the real lab, the long outages: a cable pulled past TCP's retry limit, and a node off for ten
minutes; each named by status while it lasts and sat out, serving back by itself once the cable or node is.

Marked `lab` and `faults_long` (`make test-faults-long`; not in `make test`): lab-tiny across both ranks on a
lab of its own (the provisioned snapshot, tests/conftest.py), the helpers and bounds of tests/test_faults_lab.py.

The cable outage's point is what TCP does past its retry limit: the leader's connection to its worker times out
while the worker still holds it, so once the cable is back the group is wedged until the watchdog restarts every
rank. A Linux node reaches that limit after about 15 minutes (net.ipv4.tcp_retries2 = 15). The test lowers it to
8 in both nodes' network namespaces (about 100 s, the kernel's own backoff from a 200 ms RTO), so that an outage
of four minutes is past it, and says so: what changes is when the limit comes, not what follows it.
"""

from __future__ import annotations

import contextlib
import subprocess
import time
from collections.abc import Iterator

import pytest

from tests.test_faults_lab import (
    CABLE,
    assert_healthy_in_order,
    cli,
    lab,
    pulled_cable_sat_out,
    recovered,
    status,
    unit_prop,
)

pytestmark = [pytest.mark.lab, pytest.mark.faults_long, pytest.mark.usefixtures("lab_host", "own_lab", "served")]

RETRIES = 8  # the lab's TCP retry limit for the outage test (Linux's default: 15)


@pytest.fixture(scope="module")
def served(own_lab: None) -> Iterator[None]:
    proc = cli("up", "lab-tiny", "--yes")
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr
    assert_healthy_in_order()
    yield


def node_pid(rank: int) -> str:
    return subprocess.run(
        ["docker", "inspect", "-f", "{{.State.Pid}}", f"sparkplay-lab-rank{rank}"],
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
    ).stdout.strip()


def tcp_retries(rank: int, value: int | None = None) -> int:
    """A node's net.ipv4.tcp_retries2 (its own network namespace's), set first when `value` is given."""
    setting = [f"net.ipv4.tcp_retries2={value}"] if value is not None else ["net.ipv4.tcp_retries2"]
    argv = ["nsenter", "-t", node_pid(rank), "-n", "sysctl", *(["-w"] if value is not None else []), *setting]
    out = subprocess.run(argv, capture_output=True, text=True, check=True, timeout=30).stdout
    return int(out.split("=")[1])


@contextlib.contextmanager
def tcp_gives_up_sooner() -> Iterator[None]:
    before = [tcp_retries(rank) for rank in (0, 1)]
    try:
        assert [tcp_retries(rank, RETRIES) for rank in (0, 1)] == [RETRIES, RETRIES]
        yield
    finally:
        for rank, value in zip((0, 1), before, strict=True):
            tcp_retries(rank, value)


def test_a_cable_pulled_past_tcps_retry_limit_is_sat_out_then_serving_comes_back():
    with tcp_gives_up_sooner():
        pulled_cable_sat_out(4, f"for 4 min (past TCP's retry limit, tcp_retries2={RETRIES})")


def test_a_node_off_for_ten_minutes_is_named_and_serves_again_once_it_is_on():
    lab("off", "1")
    since = time.monotonic()
    rows, why = status()
    assert rows["sparkplay-lab-rank1"]["state"] == "unreachable" and "not running" in rows["sparkplay-lab-rank1"]["why"]
    assert "no carrier" in str(rows["sparkplay-lab-rank0"]["why"]), why
    while time.monotonic() - since < 600:
        time.sleep(30)
    assert unit_prop(0, "ActiveState") == "active"  # the leader waited: no start was counted, nothing gave up
    lab("on", "1")
    recovered("rank 1 off for 10 min, after it is on", time.monotonic(), CABLE)
    assert_healthy_in_order()
