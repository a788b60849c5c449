"""overlay.yml on the real lab: each rank converts its own mirrored checkpoint, verifies it,
skips when done, and moves an outdated overlay aside. Marked `lab`.

The checkpoint is a small generated safetensors model (tests/nvfp4_fixture.py)
staged on rank 0 and mirrored by models.yml; the converter runs on each
node's CPU (no GPU here; the GPU path is checked on the lent GPU machine).
"""

from __future__ import annotations

import json
import subprocess

import pytest

from tests.conftest import provisioned_lab
from tests.nvfp4_fixture import MATCH, make_source
from tests.test_lab import in_node
from tests.test_provision_lab import playbook, recap

pytestmark = [pytest.mark.lab, pytest.mark.usefixtures("lab_host")]

ROOT = "/var/lib/sparkplay/models"
SRC, OUT = f"{ROOT}/lab-mtp", f"{ROOT}/lab-mtp-overlay"
VARS = json.dumps(
    {
        "mtp_overlay_enabled": True,
        "mtp_overlay_source": SRC,
        "mtp_overlay_output": OUT,
        "mtp_overlay_match": MATCH,
        "mtp_overlay_expect": 6,
    }
)


@pytest.fixture(scope="module", autouse=True)
def lab_with_checkpoint(tmp_path_factory):
    with provisioned_lab():  # the provisioned nodes' snapshot (tests/conftest.py)
        local = make_source(tmp_path_factory.mktemp("mtp") / "lab-mtp")
        in_node(0, "mkdir", "-p", ROOT)
        subprocess.run(["docker", "cp", str(local), f"sparkplay-lab-rank0:{ROOT}/"], check=True)
        staged = json.dumps({"checkpoint_staged": [{"name": "lab-mtp", "staged": SRC}]})
        proc = playbook("models.yml", "-e", staged)
        assert proc.returncode == 0, proc.stdout[-3000:]
        yield


def verify(rank: int) -> dict:
    command = f"PYTHONPATH=/usr/local/lib/sparkplay/python python3 -m sparkplay.nvfp4 verify {OUT}"
    out = in_node(rank, "sh", "-c", command, check=False)
    return json.loads(out.stdout)


def test_every_rank_builds_and_verifies_its_overlay():
    proc = playbook("overlay.yml", "-e", VARS)
    assert proc.returncode == 0, proc.stdout[-4000:]
    assert all(t["changed"] > 0 for t in recap(proc.stdout).values())
    for rank in (0, 1):
        checked = verify(rank)
        assert checked["ok"] is True and checked["problems"] == []
        # the linked files (a shard, config.json) proven by this rank's own verified checkpoint manifest
        assert (checked["links_proven_by_manifest"], checked["links_hashed"]) == (2, 0)
        receipt = json.loads(in_node(rank, "cat", f"{OUT}/sparkplay-overlay.json").stdout)
        assert receipt["converted_count"] == 6 and receipt["device"] == "cpu"
        assert receipt["route"] == "cpu-kernel"  # the C kernel, built on the node with the gcc the role installed
        # the untouched shard is a hardlink to this rank's own checkpoint
        inodes = in_node(
            rank,
            "stat",
            "-c",
            "%i",
            f"{SRC}/model-00003-of-00003.safetensors",
            f"{OUT}/model-00003-of-00003.safetensors",
        )
        assert len(set(inodes.stdout.split())) == 1
    # both ranks made the same bytes from their own copies
    sums = [in_node(r, "sha256sum", f"{OUT}/model-00001-of-00003.safetensors").stdout.split()[0] for r in (0, 1)]
    assert sums[0] == sums[1]


def test_rerun_skips_a_complete_overlay():
    proc = playbook("overlay.yml", "-e", VARS)
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert all(t["changed"] == 0 for t in recap(proc.stdout).values()), recap(proc.stdout)
    assert "already complete" in proc.stdout


def test_an_outdated_overlay_is_moved_aside_not_deleted():
    script = (
        f"import json; p='{OUT}/sparkplay-overlay.json'; r=json.load(open(p)); "
        "r['converter_version']='0.0.1-old'; json.dump(r, open(p,'w'))"
    )
    in_node(1, "python3", "-c", script)
    proc = playbook("overlay.yml", "-e", VARS)
    assert proc.returncode == 0, proc.stdout[-3000:]
    moved = in_node(1, "sh", "-c", f"ls -d {OUT}.old-*").stdout.split()
    assert len(moved) == 1
    assert "0.0.1-old" in in_node(1, "cat", f"{moved[0]}/sparkplay-overlay.json").stdout
    assert verify(1)["ok"] is True
