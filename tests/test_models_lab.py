"""models.yml on the real lab: mirror over the simulated cable, verify, and the fault cases. Marked `lab`.

A generated checkpoint stands in for a Hugging Face download here (the hub
cannot be reached; the download path is tested against a stand-in hub in
test_ckpt_tool.py). Everything else is real: sparkplay-ckpt sync on rank 0,
streams through ssh (or tcp, or rsync) over the cable between two systemd
nodes, hashing on each, the markers, and a hostile stream sent through the
real peer trust.
The tests run in file order on one provisioned lab.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import time

import pytest

from tests.conftest import PROJECT, provisioned_lab
from tests.test_lab import in_node
from tests.test_provision_lab import HOSTS, playbook, recap

pytestmark = [pytest.mark.lab, pytest.mark.usefixtures("lab_host")]

ROOT = "/var/lib/sparkplay/models"
MAKER = PROJECT / "molecule" / "lab" / "files" / "make_checkpoint.py"


def make_checkpoint(rank: int, dest: str, *args: str) -> None:
    subprocess.run(
        ["docker", "exec", "-i", f"sparkplay-lab-rank{rank}", "python3", "-", dest, *args],
        input=MAKER.read_bytes(),
        capture_output=True,
        check=True,
        timeout=300,
    )


def staged(*names: str) -> str:
    return json.dumps({"checkpoint_staged": [{"name": n, "staged": f"{ROOT}/{n}"} for n in names]})


def models(*args: str) -> subprocess.CompletedProcess[str]:
    return playbook("models.yml", *args)


def digests(rank: int, dest: str) -> dict[str, str]:
    out = in_node(
        rank, "sh", "-c", f"cd {dest} && find . -path ./.sparkplay -prune -o -type f -print0 | xargs -0 sha256sum"
    )
    return {line.split()[1]: line.split()[0] for line in out.stdout.splitlines()}


def inodes(rank: int, dest: str) -> dict[str, str]:
    out = in_node(rank, "sh", "-c", f"cd {dest} && find . -path ./.sparkplay -prune -o -type f -printf '%i %p\\n'")
    return {line.split()[1]: line.split()[0] for line in out.stdout.splitlines()}


@pytest.fixture(scope="module", autouse=True)
def lab_with_checkpoint():
    with provisioned_lab():  # the provisioned nodes' snapshot: provision.yml's own tests are test_provision_lab's
        make_checkpoint(0, f"{ROOT}/lab-gen", "--large", "2", "--large-mb", "70", "--small", "30")
        yield


def test_mirror_copies_and_verifies_on_every_rank():
    proc = models("-e", staged("lab-gen"))
    assert proc.returncode == 0, proc.stdout[-4000:]
    source = digests(0, f"{ROOT}/lab-gen")
    assert len(source) == 2 + 30 + 2  # shards, small files, config and its blob
    assert digests(1, f"{ROOT}/lab-gen") == source
    link = in_node(1, "readlink", f"{ROOT}/lab-gen/snapshots/main/config.json").stdout.strip()
    assert link.startswith("../../blobs/")
    for rank in (0, 1):
        marker = json.loads(in_node(rank, "cat", f"{ROOT}/lab-gen/.sparkplay/complete.json").stdout)
        assert marker["files"] == 35 and marker["revision"] == "staged"
    assert int(re.search(r'"transferred_bytes": (\d+)', proc.stdout).group(1)) >= (70 + 35) << 20


def test_rerun_is_a_quick_noop():
    started = time.monotonic()
    proc = models("-e", staged("lab-gen"))
    elapsed = time.monotonic() - started
    assert proc.returncode == 0, proc.stdout[-3000:]
    # no sync was started (that task always reports a change) and nothing was hashed again
    assert all(t["changed"] == 0 for t in recap(proc.stdout).values()), recap(proc.stdout)
    print(f"no-op models.yml run: {elapsed:.1f} s")


def test_flipped_byte_is_found_by_full_verify_and_only_that_file_recopied():
    victim = f"{ROOT}/lab-gen/extra/part1/file012.bin"
    # silent corruption: one bit flipped, size and mtime as they were (a quick run cannot see it)
    flip = (
        f"import os; p='{victim}'; st=os.stat(p); f=open(p,'r+b'); f.seek(7); b=f.read(1); f.seek(7); "
        "f.write(bytes([b[0]^1])); f.close(); os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns))"
    )
    in_node(1, "python3", "-c", flip)
    before = inodes(1, f"{ROOT}/lab-gen")
    quick = models("-e", staged("lab-gen"))
    assert all(t["changed"] == 0 for t in recap(quick.stdout).values())  # a quick run trusts the marker
    full = models("-e", staged("lab-gen"), "-e", "checkpoint_verify=full")
    assert full.returncode == 0, full.stdout[-4000:]
    # only that file was re-sent (64 KiB), whole
    assert re.search(r'"only": \[\s*"extra/part1/file012.bin"\s*\]', full.stdout), full.stdout[-3000:]
    assert int(re.search(r'"sent_bytes": (\d+)', full.stdout).group(1)) == 65536
    assert digests(1, f"{ROOT}/lab-gen") == digests(0, f"{ROOT}/lab-gen")
    after = inodes(1, f"{ROOT}/lab-gen")
    unchanged = [p for p in before if p != "./extra/part1/file012.bin" and before[p] == after[p]]
    assert len(unchanged) == len(before) - 1  # every other file untouched


def test_interrupted_mirror_resumes_without_resending_completed_files():
    make_checkpoint(0, f"{ROOT}/lab-big", "--large", "1", "--large-mb", "300", "--small", "40")
    args = ["-e", staged("lab-big"), "-e", "checkpoint_bwlimit_kbps=20000", "-e", "checkpoint_streams=1"]
    first = subprocess.Popen(
        ["ansible-playbook", "-i", str(HOSTS), "models.yml", *args],
        cwd=PROJECT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={**os.environ},
    )
    shard = f"{ROOT}/lab-big/model-00001-of-00001.safetensors"
    deadline = time.monotonic() + 240
    size = 0
    while time.monotonic() < deadline:
        probe = in_node(1, "stat", "-c", "%s", shard, check=False)
        size = int(probe.stdout.strip() or 0) if probe.returncode == 0 else 0
        if size > 60 << 20:
            break
        time.sleep(0.5)
    assert 0 < size < 300 << 20, f"the shard did not start copying ({size} bytes)"
    first.kill()
    first.wait()
    in_node(0, "pkill", "-f", "sparkplay-ckpt sync", check=False)
    # the receiving ends live only as long as their ssh sessions: none is left on rank 1
    deadline = time.monotonic() + 15
    while in_node(1, "pgrep", "-f", "sparkplay-ckpt sink", check=False).returncode == 0:
        assert time.monotonic() < deadline, "a sink outlived the killed mirror"
        time.sleep(0.5)
    assert in_node(1, "test", "-e", f"{ROOT}/lab-big/.sparkplay/complete.json", check=False).returncode != 0
    partial = int(in_node(1, "stat", "-c", "%s", shard).stdout)
    assert partial < 300 << 20
    proc = models("-e", staged("lab-big"))
    assert proc.returncode == 0, proc.stdout[-4000:]
    sent = int(re.search(r'"sent_bytes": (\d+)', proc.stdout).group(1))
    manifest_text = in_node(0, "cat", f"{ROOT}/lab-big/.sparkplay/manifest.json").stdout
    rest = sum(e.get("size", 0) for e in json.loads(manifest_text)["files"] if not e["path"].endswith(".safetensors"))
    # the resumed shard sends only what was missing; the other files and the manifest at most besides
    assert sent <= (300 << 20) - partial + rest + len(manifest_text), (sent, partial, rest)
    assert digests(1, f"{ROOT}/lab-big") == digests(0, f"{ROOT}/lab-big")


def test_too_small_disk_fails_before_copying_and_marks_nothing():
    in_node(1, "sh", "-c", f"mkdir -p {ROOT}/tight && mount -t tmpfs -o size=20m tmpfs {ROOT}/tight")
    try:
        make_checkpoint(0, f"{ROOT}/tight", "--large", "1", "--large-mb", "70", "--small", "2")
        proc = models("-e", staged("tight"))
        assert proc.returncode != 0
        assert re.search(r"sparkplay-lab-rank1 needs 0\.07 GB more for tight under .* has 0\.02 GB free", proc.stdout)
        assert "Nothing was copied" in proc.stdout
        assert in_node(1, "ls", "-A", f"{ROOT}/tight").stdout == ""
    finally:
        in_node(1, "umount", f"{ROOT}/tight", check=False)


@pytest.mark.parametrize("transport", ["tcp", "rsync"])
def test_other_transports_mirror_and_verify(transport):
    """tcp (private cable: a receiver for this run only) and rsync over ssh (the plain fallback)."""
    name = f"lab-{transport}"
    make_checkpoint(0, f"{ROOT}/{name}", "--large", "1", "--large-mb", "70", "--small", "10")
    proc = models("-e", staged(name), "-e", f"checkpoint_transport={transport}")
    assert proc.returncode == 0, proc.stdout[-4000:]
    assert digests(1, f"{ROOT}/{name}") == digests(0, f"{ROOT}/{name}")
    assert in_node(1, "readlink", f"{ROOT}/{name}/snapshots/main/config.json").stdout.startswith("../../blobs/")
    assert in_node(1, "test", "-e", f"{ROOT}/{name}/.sparkplay/complete.json", check=False).returncode == 0
    # nothing is left listening or running, and no secret was ever written to a file
    assert in_node(1, "ss", "-Htln", "sport = :8730").stdout.strip() == ""
    assert in_node(1, "pgrep", "-f", "sparkplay-ckpt receive", check=False).returncode != 0
    for rank in (0, 1):
        leftovers = in_node(rank, "sh", "-c", "ls /run/sparkplay-receive* /run/sparkplay-ckpt/*secret*", check=False)
        assert leftovers.stdout.strip() == ""


def test_a_link_already_on_a_rank_is_replaced_and_its_target_kept():
    """An honest case: rank 1 holds config.json -> /elsewhere/data; the mirror must not write through it."""
    name = "lab-linked"
    make_checkpoint(0, f"{ROOT}/{name}", "--large", "0", "--small", "3")
    size = in_node(0, "stat", "-c", "%s", f"{ROOT}/{name}/extra/part0/file000.bin").stdout.strip()
    link = f"{ROOT}/{name}/extra/part0/file000.bin"
    in_node(
        1,
        "sh",
        "-c",
        f"mkdir -p /elsewhere {ROOT}/{name}/extra/part0 && head -c {size} /dev/zero > "
        f"/elsewhere/data && ln -sfn /elsewhere/data {link}",
    )
    proc = models("-e", staged(name))
    assert proc.returncode == 0, proc.stdout[-4000:]
    assert in_node(1, "sh", "-c", "tr -d '\\0' < /elsewhere/data | wc -c").stdout.strip() == "0"
    assert in_node(1, "test", "-L", f"{ROOT}/{name}/extra/part0/file000.bin", check=False).returncode != 0
    assert digests(1, f"{ROOT}/{name}") == digests(0, f"{ROOT}/{name}")


def test_a_same_size_new_revision_reaches_every_rank():
    name = "lab-rev"
    make_checkpoint(0, f"{ROOT}/{name}", "--large", "0", "--small", "3")
    rev = json.dumps({"checkpoint_staged": [{"name": name, "staged": f"{ROOT}/{name}", "revision": "v1"}]})
    assert models("-e", rev).returncode == 0
    # rewrite one file in place: same size, same mtime, other bytes
    victim = f"{ROOT}/{name}/extra/part0/file001.bin"
    in_node(
        0,
        "python3",
        "-c",
        f"import os; p='{victim}'; st=os.stat(p); open(p,'r+b').write(os.urandom(st.st_size)); "
        "os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns))",
    )
    proc = models("-e", rev.replace('"v1"', '"v2"'))
    assert proc.returncode == 0, proc.stdout[-4000:]
    assert digests(1, f"{ROOT}/{name}") == digests(0, f"{ROOT}/{name}")
    marker = json.loads(in_node(1, "cat", f"{ROOT}/{name}/.sparkplay/complete.json").stdout)
    assert marker["revision"] == "v2"


def test_a_hostile_stream_through_the_real_peer_trust_is_refused():
    """Rank 0's key reaches rank 1's sink as root; a crafted stream still writes nothing outside its folder."""
    link = json.dumps({"path": "d", "symlink": "/etc"})
    through = json.dumps({"path": "d/sparkplay-pwned", "size": 5, "mode": 0o4755, "mtime_ns": 1})
    stream = f"{link}\n{through}\npwned"
    proc = subprocess.run(
        [
            "docker",
            "exec",
            "-i",
            "sparkplay-lab-rank0",
            "ssh",
            "-o",
            "BatchMode=yes",
            "192.168.100.11",
            "/usr/local/lib/sparkplay/sparkplay-ckpt",
            "sink",
            f"{ROOT}/hostile",
        ],
        input=stream.encode(),
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 1 and b"refused 'd'" in proc.stderr, proc.stderr
    assert in_node(1, "test", "-e", "/etc/sparkplay-pwned", check=False).returncode != 0


def test_only_rank0_is_trusted_between_the_ranks():
    keys = in_node(1, "cat", "/root/.ssh/authorized_keys").stdout
    assert "sparkplay peer sparkplay-lab-rank0" in keys and "restrict,from=" in keys
    on_rank0 = in_node(0, "cat", "/root/.ssh/authorized_keys", check=False).stdout  # none at all is right too
    assert "sparkplay peer" not in on_rank0
