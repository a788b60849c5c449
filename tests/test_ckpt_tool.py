"""The node tool sparkplay-ckpt on local folders (its mirror is tested on the lab)."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from sparkplay.nodetools import path_of
from sparkplay.nodetools import sparkplay_ckpt as ckpt
from tests.fake_hub import FakeHub

TOOL = path_of("sparkplay_ckpt.py")


def tool(*args: str, env: dict | None = None) -> tuple[int, dict, str]:
    proc = subprocess.run(
        [sys.executable, TOOL, *args], capture_output=True, text=True, check=False, timeout=120,
        env={**os.environ, **(env or {})},
    )  # fmt: skip
    return proc.returncode, json.loads(proc.stdout) if proc.stdout.strip() else {}, proc.stderr


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    root = tmp_path / "ckpt"
    (root / "sub" / "deep").mkdir(parents=True)
    (root / "a.bin").write_bytes(os.urandom(3000))
    (root / "sub" / "deep" / "b.bin").write_bytes(os.urandom(100))
    blob = b"config"
    sha = hashlib.sha256(blob).hexdigest()
    (root / "blobs").mkdir()
    (root / "blobs" / sha).write_bytes(blob)
    (root / "snapshots" / "main").mkdir(parents=True)
    (root / "snapshots" / "main" / "config.json").symlink_to(f"../../blobs/{sha}")
    return root


def test_manifest_lists_files_and_links_and_trusts_hub_blob_names(tree):
    rc, out, _ = tool("manifest", str(tree))
    assert rc == 0 and out["files"] == 4 and out["sha256_from_huggingface"] == 1 and out["hashed"] == 2
    manifest = json.loads((tree / ".sparkplay/manifest.json").read_text())
    by_path = {e["path"]: e for e in manifest["files"]}
    assert by_path["snapshots/main/config.json"]["type"] == "symlink"
    assert by_path["a.bin"]["sha256"] == hashlib.sha256((tree / "a.bin").read_bytes()).hexdigest()
    assert manifest["bytes"] == 3000 + 100 + 6


def test_full_verify_finds_exactly_the_flipped_byte(tree):
    tool("manifest", str(tree))
    assert tool("verify", str(tree), "--full")[0] == 0
    data = bytearray((tree / "sub/deep/b.bin").read_bytes())
    data[50] ^= 0x01
    (tree / "sub/deep/b.bin").write_bytes(bytes(data))
    rc, out, _ = tool("verify", str(tree))  # sizes only: a flipped byte keeps the size
    assert rc == 0
    rc, out, _ = tool("verify", str(tree), "--full")
    assert rc == 3 and out["bad"] == {"sub/deep/b.bin": "sha256"}


def test_marker_is_the_fast_path_and_any_change_voids_it(tree):
    tool("manifest", str(tree))
    assert tool("status", str(tree))[1] == {"complete": False, "why": "no marker"}
    rc, out, _ = tool("mark", str(tree), "--revision", "r1")
    assert rc == 0 and out["files"] == 4
    status = tool("status", str(tree), "--revision", "r1")[1]
    assert status["complete"] and status["revision"] == "r1"
    assert tool("status", str(tree), "--revision", "r2")[1]["complete"] is False
    os.utime(tree / "a.bin", ns=(0, 0))  # same size, touched since
    assert "was modified" in tool("status", str(tree))[1]["why"]


def test_mark_refuses_an_incomplete_tree(tree):
    tool("manifest", str(tree))
    (tree / "a.bin").unlink()
    rc, _, err = tool("mark", str(tree), "--revision", "r1")
    assert rc == 1 and "not marking" in err and not (tree / ".sparkplay/complete.json").exists()


def test_need_counts_missing_and_partial_bytes(tree, tmp_path):
    tool("manifest", str(tree))
    receiver = tmp_path / "receiver"
    (receiver / "sub/deep").mkdir(parents=True)
    (receiver / "a.bin").write_bytes((tree / "a.bin").read_bytes()[:1000])  # interrupted copy
    rc, out, _ = tool("need", str(receiver), "--manifest", str(tree / ".sparkplay/manifest.json"))
    assert rc == 0 and out["need_bytes"] == 2000 + 100 + 6 and out["free_bytes"] > 0


def test_large_files_are_balanced_across_streams():
    files = [{"type": "file", "path": str(i), "size": (ckpt.LARGE + 1) * s} for i, s in enumerate([8, 5, 4, 3, 1])]
    files.append({"type": "file", "path": "small", "size": 10})
    buckets = ckpt._buckets(files, 2)
    loads = sorted(sum(e["size"] for e in b) for b in buckets)
    assert [e["path"] for b in buckets for e in b if e["path"] == "small"] == []
    assert loads == [(ckpt.LARGE + 1) * 10, (ckpt.LARGE + 1) * 11]


def test_broken_link_is_an_error(tmp_path):
    (tmp_path / "x").symlink_to("/nonexistent/file")
    rc, _, err = tool("manifest", str(tmp_path))
    assert rc == 1 and "broken link" in err


def test_download_resolve_and_manifest_against_the_hub_api(tmp_path):
    weights = os.urandom(5000)
    hub = FakeHub({"org/tiny": {"config.json": b'{"a": 1}', "model.safetensors": weights, "sub/x.txt": b"x"}})
    token = tmp_path / "token"
    token.write_text("hf_secret_token\n")
    token.chmod(0o600)
    env = {"HF_ENDPOINT": hub.url, "HF_HUB_DISABLE_XET": "1", "HF_HOME": str(tmp_path / "hfhome")}
    try:
        rc, out, err = tool("resolve", "--repo", "org/tiny", "--token-file", str(token), env=env)
        assert rc == 0, err
        assert out["commit"] == hub.commit
        dest = tmp_path / "models" / "org--tiny"
        rc, out, err = tool("download", "--repo", "org/tiny", "--revision", hub.commit, "--dest", str(dest),
                            "--token-file", str(token), env=env)  # fmt: skip
        assert rc == 0, err
        assert (dest / "model.safetensors").read_bytes() == weights
        assert (dest / "sub/x.txt").read_bytes() == b"x"
        rc, out, _ = tool("manifest", str(dest))
        assert out["sha256_from_huggingface"] == 1  # the LFS file's sha256 came from the hub, not hashing
        assert tool("verify", str(dest), "--full")[0] == 0
        # the token went to the hub as a header, never in a URL
        assert any(auth == "Bearer hf_secret_token" for _, _, auth in hub.requests)
        assert not any("hf_secret_token" in path for _, path, _ in hub.requests)
    finally:
        hub.close()


@pytest.mark.parametrize("rel", ["../x", "/etc/passwd", "a/../../b", ""])
def test_tcp_receiver_refuses_paths_outside_the_checkpoint(tmp_path, rel):
    with pytest.raises(ckpt.Failure):
        ckpt._safe_join(tmp_path, rel)


def test_tcp_receiver_accepts_nested_paths(tmp_path):
    assert ckpt._safe_join(tmp_path, "a/b/c.bin") == tmp_path / "a" / "b" / "c.bin"


def fake_ssh(tmp_path: Path) -> dict[str, str]:
    """A stand-in `ssh` on PATH that runs the remote command here (no second host in a unit test;
    the lab tests use real ssh over the cable). It drops ssh's options and the host name."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    script = bindir / "ssh"
    script.write_text(
        "#!/bin/sh\n"
        "while [ $# -gt 1 ]; do case $1 in -c|-o|-p) shift 2;; -*) shift;; *) shift; break;; esac; done\n"
        'exec sh -c "$1"\n'
    )
    script.chmod(0o755)
    return {"PATH": f"{bindir}:{os.environ['PATH']}"}


def test_ssh_transport_streams_resumes_and_sends_only_what_is_missing(tree, tmp_path):
    (tree / "big.bin").write_bytes(os.urandom(ckpt.LARGE + 4096))
    assert tool("manifest", str(tree))[0] == 0
    dest = tmp_path / "copy"
    env = fake_ssh(tmp_path)
    wrapper = tmp_path / "remote-tool"
    wrapper.write_text(f'#!/bin/sh\nexec {sys.executable} {TOOL} "$@"\n')
    wrapper.chmod(0o755)
    args = ("mirror", str(tree), "--to", "peer", "--dest", str(dest), "--streams", "2", "--remote-tool", str(wrapper))
    rc, out, err = tool(*args, env=env)
    assert rc == 0, err
    assert out["streams"] == 2  # the large file on its own stream, then the sweep
    assert out["transferred_bytes"] == out["sent_bytes"] > ckpt.LARGE
    assert tool("verify", str(dest), "--manifest", str(tree / ckpt.MANIFEST), "--full")[1]["ok"]
    assert str((dest / "snapshots" / "main" / "config.json").readlink()).startswith("../../blobs/")
    # an interrupted copy: the big file cut short, a small one gone; only the missing bytes cross
    with (dest / "big.bin").open("r+b") as fh:
        fh.truncate(1000)
    (dest / "a.bin").unlink()
    rc, out, err = tool(*args, env=env)
    assert rc == 0, err
    assert out["sent_bytes"] == (ckpt.LARGE + 4096 - 1000) + 3000 + (tree / ckpt.MANIFEST).stat().st_size
    assert tool("verify", str(dest), "--manifest", str(tree / ckpt.MANIFEST), "--full")[1]["ok"]
