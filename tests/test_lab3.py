"""Three nodes behind the lab's simulated switch: cabled, provisioned, the model mirrored to every rank and
served across all three (llama.cpp RPC with two workers). Marked `lab` and `lab3`: it runs in
`make test-3`, not in `make test` (about 6 minutes on CI's machine).

Everything is real: three systemd containers, the host bridges that stand in for the switch (with the
forwarding rule the lab adds in DOCKER-USER, since Docker drops forwarded frames), ssh over the cable,
llama.cpp from Debian.
"""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Iterator

import pytest

from tests.conftest import run_cli
from tests.test_lab import in_node

pytestmark = [pytest.mark.lab, pytest.mark.lab3, pytest.mark.usefixtures("lab_host")]


@pytest.fixture(scope="module", autouse=True)
def three_nodes() -> Iterator[None]:
    run_cli("lab", "down")
    up = run_cli("lab", "up", "--nodes", "3", timeout=900)  # budget: three nodes' site, beyond the pair's
    assert up.returncode == 0, up.stdout + up.stderr
    yield
    run_cli("lab", "down")
    rules = subprocess.run(["iptables", "-S", "DOCKER-USER"], capture_output=True, text=True, check=False).stdout
    assert "sparkplay-lab" not in rules  # lab down removes what lab up added


def test_the_switch_forwards_between_every_pair_of_ranks():
    rules = subprocess.run(["iptables", "-S", "DOCKER-USER"], capture_output=True, text=True, check=True).stdout
    assert rules.count("sparkplay-lab switch") == 2  # one per switch (twin)


def test_lab_tiny_is_served_across_three_ranks():
    proc = run_cli(
        "up", "lab-tiny", "-i", "inventory/lab", "--yes", timeout=1800
    )  # budget: three nodes' site, beyond the pair's
    assert proc.returncode == 0, proc.stdout[-5000:] + proc.stderr
    assert re.search(r"lab-tiny answers at http://127\.0\.0\.1:9931", proc.stdout)
    for rank in (1, 2):  # mirrored and verified on every rank
        marker = json.loads(in_node(rank, "cat", "/var/lib/sparkplay/models/lab-tiny/.sparkplay/complete.json").stdout)
        assert marker["files"] == 2  # the model and its tokenizer.json
    leader = in_node(0, "journalctl", "-u", "sparkplay-serve", "--no-pager", "-o", "cat").stdout
    for address in ("192.168.100.11:50052", "192.168.100.12:50052"):  # layers on both workers
        assert re.search(rf"RPC\d\[{re.escape(address)}\] model buffer size", leader), address
    rows = json.loads(run_cli("status", "-i", "inventory/lab", "--json").stdout)
    assert [(r["rank"], r["up"]) for r in rows] == [(0, True), (1, True), (2, True)]
