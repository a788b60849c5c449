"""The node tool sparkplay-ckpt on local folders: manifests, markers, and every transport end to end.

The peer is this machine: a stand-in `ssh` on PATH runs the remote command
here (no second host in a unit test; tests/test_models_lab.py runs the same
commands with real ssh over the lab's cable). The hub is a stand-in too.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sparkplay.nodetools import app
from sparkplay.nodetools.ckpt import manifest as mf
from sparkplay.nodetools.ckpt.transports.base import LARGE, buckets, spread
from tests.fake_hub import FakeHub

TOOL = app("ckpt")  # the very file the role installs on the nodes


def tool(*args: str, env: dict | None = None, stdin: str | None = None) -> tuple[int, dict, str]:
    proc = subprocess.run(
        [sys.executable, TOOL, *args],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
        env={**os.environ, **(env or {})},
        input=stdin,
    )
    return proc.returncode, json.loads(proc.stdout) if proc.stdout.strip() else {}, proc.stderr


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    root = tmp_path / "ckpt"
    (root / "sub" / "deep").mkdir(parents=True)
    (root / "a.bin").write_bytes(os.urandom(3000))
    (root / "sub" / "deep" / "b.bin").write_bytes(os.urandom(100))
    blob = b"config"
    (root / "blobs").mkdir()
    (root / "blobs" / sha(blob)).write_bytes(blob)
    (root / "snapshots" / "main").mkdir(parents=True)
    (root / "snapshots" / "main" / "config.json").symlink_to(f"../../blobs/{sha(blob)}")
    return root


def manifest_of(root: Path) -> dict:
    return json.loads((root / ".sparkplay/manifest.json").read_text())


# --- the tool as shipped -------------------------------------------------------------------


def test_the_shipped_tool_is_one_reproducible_file(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    again = Path(app("ckpt"))
    assert again != Path(TOOL) and again.read_bytes() == Path(TOOL).read_bytes()  # same sources, same bytes
    assert again.read_bytes().startswith(b"#!/usr/bin/env python3\n")
    proc = subprocess.run([sys.executable, str(again), "--help"], capture_output=True, text=True, check=False)
    assert proc.returncode == 0 and "sync" in proc.stdout


# --- manifest, verify, mark, status ---------------------------------------------------------


def test_manifest_hashes_every_file_and_crosschecks_hub_names(tree):
    rc, out, err = tool("manifest", str(tree))
    assert rc == 0, err
    assert out["files"] == 4 and out["hashed"] == 3 and out["hub_crosschecked"] == 1
    by_path = {e["path"]: e for e in manifest_of(tree)["files"]}
    assert by_path["snapshots/main/config.json"] == {
        "path": "snapshots/main/config.json",
        "type": "symlink",
        "target": f"../../blobs/{sha(b'config')}",
    }
    assert by_path["a.bin"]["sha256"] == sha((tree / "a.bin").read_bytes())


def test_manifest_refuses_bytes_that_differ_from_the_hubs_sha256(tree):
    (tree / "blobs" / sha(b"config")).write_bytes(b"CONFIG")  # same size, other bytes
    rc, _, err = tool("manifest", str(tree))
    assert rc == 1 and "does not match the sha256 the hub gave" in err


def test_a_link_out_of_the_tree_is_sent_as_the_file_it_names(tree, tmp_path):
    outside = tmp_path / "elsewhere.bin"
    outside.write_bytes(b"x" * 10)
    (tree / "linked.bin").symlink_to(outside)
    tool("manifest", str(tree))
    entry = next(e for e in manifest_of(tree)["files"] if e["path"] == "linked.bin")
    assert entry == {"path": "linked.bin", "type": "file", "size": 10, "sha256": sha(b"x" * 10)}


def test_broken_link_is_an_error(tmp_path):
    (tmp_path / "x").symlink_to("/nonexistent/file")
    rc, _, err = tool("manifest", str(tmp_path))
    assert rc == 1 and "broken link" in err


def test_full_verify_finds_exactly_the_flipped_byte(tree):
    tool("manifest", str(tree))
    assert tool("verify", str(tree), "--full")[0] == 0
    data = bytearray((tree / "sub/deep/b.bin").read_bytes())
    data[50] ^= 0x01
    (tree / "sub/deep/b.bin").write_bytes(bytes(data))
    assert tool("verify", str(tree))[0] == 0  # sizes only: a flipped byte keeps the size
    rc, out, _ = tool("verify", str(tree), "--full")
    assert rc == 3 and out["bad"] == {"sub/deep/b.bin": "sha256"}


def test_marker_is_the_fast_path_and_any_change_voids_it(tree):
    tool("manifest", str(tree))
    assert tool("status", str(tree))[1] == {"complete": False, "why": "no marker"}
    rc, out, err = tool("mark", str(tree), "--revision", "r1")
    assert rc == 0 and out["ok"] and out["files"] == 4, err
    status = tool("status", str(tree), "--revision", "r1")[1]
    assert status["complete"] and status["revision"] == "r1"
    assert tool("status", str(tree), "--revision", "r2")[1]["complete"] is False
    os.utime(tree / "a.bin", ns=(0, 0))  # same size, touched since
    assert "modified" in tool("status", str(tree))[1]["why"]


def test_a_file_added_after_marking_voids_the_marker(tree):
    tool("manifest", str(tree), "--revision", "staged")
    assert tool("status", str(tree), "--revision", "staged")[1]["complete"]
    (tree / "new.bin").write_bytes(b"new")
    assert "new.bin is not in the manifest" in tool("status", str(tree))[1]["why"]


def test_a_link_where_a_file_was_is_never_followed(tree, tmp_path):
    """The marker and verify look at the entry itself: a file replaced by a link to a same-size file is wrong."""
    tool("manifest", str(tree), "--revision", "r1")
    decoy = tmp_path / "decoy"
    decoy.write_bytes((tree / "a.bin").read_bytes())
    (tree / "a.bin").unlink()
    (tree / "a.bin").symlink_to(decoy)
    assert tool("status", str(tree))[1]["complete"] is False
    rc, out, _ = tool("verify", str(tree), "--full")
    assert rc == 3 and out["bad"] == {"a.bin": "type"}


@pytest.mark.parametrize("tamper", ["delete-entry", "edit-digest", "edit-size"])
def test_a_tampered_manifest_is_refused_by_status_verify_and_mark(tree, tamper):
    tool("manifest", str(tree), "--revision", "r1")
    rank0_digest = manifest_of(tree)["digest"]
    data = manifest_of(tree)
    if tamper == "delete-entry":  # and recompute the digest field so the file is self-consistent
        data["files"] = [e for e in data["files"] if e["path"] != "a.bin"]
        data["count"], data["bytes"] = len(data["files"]), sum(e.get("size", 0) for e in data["files"])
        data["digest"] = mf.digest_of(data["files"])
    elif tamper == "edit-digest":
        data["digest"] = "0" * 64
    else:
        data["files"][0]["size"] += 1
    (tree / ".sparkplay/manifest.json").write_text(json.dumps(data))
    status = tool("status", str(tree), "--digest", rank0_digest, "--revision", "r1")[1]
    assert status["complete"] is False
    for command in (["verify", "--full"], ["mark", "--revision", "r1"]):
        rc, _, err = tool(command[0], str(tree), "--digest", rank0_digest, *command[1:])
        assert rc == 1, (command, err)
        assert "not rank 0's manifest" in err or "does not match its entries" in err


def test_mark_refuses_an_incomplete_tree(tree):
    tool("manifest", str(tree))
    (tree / "a.bin").unlink()
    rc, out, _ = tool("mark", str(tree), "--revision", "r1")
    assert rc == 3 and out["bad"] == {"a.bin": "missing"} and not (tree / ".sparkplay/complete.json").exists()


def test_need_counts_missing_and_partial_bytes(tree, tmp_path):
    tool("manifest", str(tree))
    receiver = tmp_path / "receiver"
    (receiver / "sub/deep").mkdir(parents=True)
    (receiver / "a.bin").write_bytes((tree / "a.bin").read_bytes()[:1000])  # interrupted copy
    text = (tree / ".sparkplay/manifest.json").read_text()
    rc, out, err = tool("need", str(receiver), "--digest", manifest_of(tree)["digest"], stdin=text)
    assert rc == 0, err
    assert out["need_bytes"] == 2000 + 100 + 6 and out["free_bytes"] > 0
    assert not (receiver / ".sparkplay").exists()  # asking changes nothing
    rc, _, err = tool("need", str(receiver), "--digest", "f" * 64, stdin=text)
    assert rc == 1 and "not rank 0's manifest" in err


def test_large_files_are_balanced_across_streams():
    files = [{"type": "file", "path": str(i), "size": (LARGE + 1) * s} for i, s in enumerate([8, 5, 4, 3, 1])]
    files.append({"type": "file", "path": "small", "size": 10})
    queues = buckets(files, 2)
    loads = sorted(sum(e["size"] for e in b) for b in queues)
    assert [e["path"] for b in queues for e in b if e["path"] == "small"] == []
    assert loads == [(LARGE + 1) * 10, (LARGE + 1) * 11]


def test_small_files_spread_over_the_streams_after_the_large_ones():
    files = [{"type": "file", "path": "big", "size": LARGE * 2}, {"type": "file", "path": "big2", "size": LARGE * 2}]
    files += [{"type": "file", "path": f"s{i}", "size": 1000} for i in range(10)]
    files.append({"type": "symlink", "path": "link", "target": "s0"})
    queues = spread(files, 4)
    assert len(queues) == 2 and [q[0]["path"] for q in queues] == ["big", "big2"]
    assert sorted(e["path"] for q in queues for e in q) == sorted(e["path"] for e in files)
    assert abs(len(queues[0]) - len(queues[1])) <= 1
    assert spread(files[2:], 4) == [files[2:]]  # no large file: one stream


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
        rc, out, err = tool(
            "download",
            "--repo",
            "org/tiny",
            "--revision",
            hub.commit,
            "--dest",
            str(dest),
            "--token-file",
            str(token),
            env=env,
        )
        assert rc == 0, err
        assert (dest / "model.safetensors").read_bytes() == weights
        assert (dest / "sub/x.txt").read_bytes() == b"x"
        rc, out, _ = tool("manifest", str(dest), "--revision", hub.commit)
        assert out["hub_crosschecked"] == 1  # the LFS file's hub sha256 matched the bytes read from disk
        assert tool("verify", str(dest), "--full")[0] == 0
        # the token went to the hub as a header, never in a URL
        assert any(auth == "Bearer hf_secret_token" for _, _, auth in hub.requests)
        assert not any("hf_secret_token" in path for _, path, _ in hub.requests)
    finally:
        hub.close()


def test_download_of_named_files_fetches_those_alone(tmp_path):
    """A GGUF variant (llama.cpp's -hf, resolved at import): only the files the recipe's checkpoint lists,
    a name's own glob characters matching themselves."""
    files = {
        "m-Q4_K_M.gguf": os.urandom(2000),
        "m-Q8_0.gguf": os.urandom(3000),
        "mmproj-[x].gguf": b"proj",
        "mmproj-x.gguf": b"other",
        "README.md": b"r",
    }
    hub = FakeHub({"org/m-GGUF": files})
    env = {"HF_ENDPOINT": hub.url, "HF_HUB_DISABLE_XET": "1", "HF_HOME": str(tmp_path / "hfhome")}
    dest = tmp_path / "org--m-GGUF"
    try:
        rc, out, err = tool(
            "download",
            "--repo",
            "org/m-GGUF",
            "--revision",
            hub.commit,
            "--dest",
            str(dest),
            "--file",
            "m-Q4_K_M.gguf",
            "--file",
            "mmproj-[x].gguf",
            env=env,
        )
        assert rc == 0, err
    finally:
        hub.close()
    got = sorted(str(p.relative_to(dest)) for p in dest.rglob("*") if p.is_file() and ".cache" not in p.parts)
    assert got == ["m-Q4_K_M.gguf", "mmproj-[x].gguf"] and out["files"] == 2
    assert (dest / "m-Q4_K_M.gguf").read_bytes() == files["m-Q4_K_M.gguf"]


# --- the receiver against crafted streams ---------------------------------------------------


def frame(data: dict) -> bytes:
    return json.dumps(data).encode() + b"\n"


def file_frame(path: str, body: bytes, mode: int = 0o644) -> bytes:
    return frame({"path": path, "size": len(body), "mode": mode, "mtime_ns": 10**18, "restart": False}) + body


def sink(dest: Path, stream: bytes) -> tuple[int, list[dict], str]:
    """Run `sparkplay-ckpt sink DEST` on a crafted stream; return its exit status, replies and error line."""
    proc = subprocess.run(
        [sys.executable, TOOL, "sink", str(dest)], input=stream, capture_output=True, timeout=60, check=False
    )
    replies = [json.loads(line) for line in proc.stdout.splitlines() if line.strip()]
    return proc.returncode, replies, proc.stderr.decode()


def snapshot(folder: Path) -> dict[str, tuple]:
    """Every entry under folder with its kind, mode and content (links not followed)."""
    found = {}
    for path in sorted(folder.rglob("*")):
        st = path.lstat()
        content = path.readlink() if path.is_symlink() else path.read_bytes() if path.is_file() else None
        found[str(path.relative_to(folder))] = (st.st_mode, content)
    return found


@pytest.fixture
def arena(tmp_path: Path) -> tuple[Path, Path]:
    """A destination and, beside it, a folder standing for everything outside it."""
    dest, outside = tmp_path / "dest", tmp_path / "outside"
    dest.mkdir()
    outside.mkdir()
    (outside / "data").write_bytes(b"precious")
    return dest, outside


HOSTILE = {
    "link-out-then-file-through-it": frame({"path": "d", "symlink": "../outside"}) + file_frame("d/evil", b"pwned"),
    "absolute-link-then-file-through-it": frame({"path": "d", "symlink": "/tmp"}) + file_frame("d/evil", b"pwned"),
    "dotdot-path": file_frame("../outside/evil", b"pwned"),
    "dotdot-inside-path": file_frame("a/../../outside/evil", b"pwned"),
    "absolute-path": file_frame("/tmp/sparkplay-evil", b"pwned"),
    "dotdot-link-target": frame({"path": "x", "symlink": "../outside/data"}),
    "absolute-link-target": frame({"path": "x", "symlink": "/etc/shadow"}),
    "write-the-marker": file_frame(".sparkplay/complete.json", b'{"revision": "v2"}'),
    "link-into-the-bookkeeping": frame({"path": "x", "symlink": ".sparkplay/complete.json"}),
    "nul-in-path": file_frame("a\u0000b", b"x"),
    "over-long-name": file_frame("n" * 300, b"x"),
    "over-long-frame": b'{"path": "' + b"a" * 70000 + b'"}\n',
    "negative-size": frame({"path": "neg", "size": -5, "mode": 0o644, "mtime_ns": 1}),
    "huge-size": frame({"path": "big", "size": 1 << 60, "mode": 0o644, "mtime_ns": 1}),
    "not-json": b"GET / HTTP/1.0\n",
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_a_hostile_stream_is_refused_and_nothing_outside_changes(arena, case):
    dest, outside = arena
    before = snapshot(outside)
    rc, replies, err = sink(dest, HOSTILE[case])
    assert rc == 1, (rc, replies, err)
    assert "refused" in err and "refused" in replies[-1]["error"]
    assert snapshot(outside) == before
    assert not Path("/tmp/sparkplay-evil").exists()
    assert not (dest / ".sparkplay/complete.json").exists()


def test_a_link_then_a_file_of_the_same_name_replaces_the_link_not_its_target(arena):
    dest, outside = arena
    (dest / "config.json").symlink_to(outside / "data")  # a link already on this rank, pointing outside
    stream = frame({"path": "in.json", "symlink": "config.json"}) + file_frame("config.json", b"fresh")
    stream += file_frame("in.json", b"also")  # the link just sent, then a file by its name
    rc, replies, err = sink(dest, stream + frame({"done": True}))
    assert rc == 0, err
    assert (outside / "data").read_bytes() == b"precious"
    assert not (dest / "config.json").is_symlink() and (dest / "config.json").read_bytes() == b"fresh"
    assert not (dest / "in.json").is_symlink() and (dest / "in.json").read_bytes() == b"also"
    assert replies[-1] == {"done": True, "files": 2, "bytes": 9}


def test_modes_lose_setuid_setgid_sticky_and_group_write(arena):
    dest, _ = arena
    rc, _, err = sink(dest, file_frame("tool", b"#!/bin/sh\n", mode=0o6777) + frame({"done": True}))
    assert rc == 0, err
    assert (dest / "tool").stat().st_mode & 0o7777 == 0o755


def test_a_file_shared_by_hard_links_is_replaced_not_written_in_place(arena):
    dest, outside = arena
    os.link(outside / "data", dest / "shard")  # same filesystem: one inode, two names
    rc, _, err = sink(dest, file_frame("shard", b"new-bytes!") + frame({"done": True}))
    assert rc == 0, err
    assert (outside / "data").read_bytes() == b"precious" and (dest / "shard").read_bytes() == b"new-bytes!"


def test_an_in_tree_link_is_accepted(arena):
    dest, _ = arena
    stream = file_frame("blobs/abc", b"blob") + frame({"path": "snapshots/main/c.json", "symlink": "../../blobs/abc"})
    rc, _, err = sink(dest, stream + frame({"done": True}))
    assert rc == 0, err
    assert (dest / "snapshots/main/c.json").read_bytes() == b"blob"


# --- sync end to end, every transport -------------------------------------------------------


@pytest.fixture
def peer_env(tmp_path: Path) -> dict[str, str]:
    """A stand-in `ssh` on PATH that runs the remote command on this machine (it drops the options and host)."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    script = bindir / "ssh"
    script.write_text(
        "#!/bin/sh\n"
        "while [ $# -gt 1 ]; do case $1 in -c|-o|-p|-l) shift 2;; -*) shift;; *) shift; break;; esac; done\n"
        'exec sh -c "$*"\n'
    )
    script.chmod(0o755)
    return {"PATH": f"{bindir}:{os.environ['PATH']}"}


@pytest.fixture
def remote_tool(tmp_path: Path) -> str:
    wrapper = tmp_path / "remote-tool"
    wrapper.write_text(f'#!/bin/sh\nexec {sys.executable} {TOOL} "$@"\n')
    wrapper.chmod(0o755)
    return str(wrapper)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


TRANSPORTS = ["ssh", "tcp", "rsync"]


def sync_args(root: Path, dest: Path, revision: str, transport: str, remote: str, port: int) -> list[str]:
    """sparkplay-ckpt sync of ROOT to DEST on this machine (a peer on loopback)."""
    to = ["--to", "127.0.0.1", "--dest", str(dest), "--revision", revision, "--transport", transport]
    return ["sync", str(root), *to, "--port", str(port), "--remote-tool", remote]


def sync(root: Path, dest: Path, revision: str, transport: str, env: dict, remote: str, *extra: str):
    return tool(*sync_args(root, dest, revision, transport, remote, free_port()), "--streams", "2", *extra, env=env)


def same_tree(a: Path, b: Path) -> bool:
    return {k: v for k, v in snapshot(a).items() if not k.startswith(".sparkplay")} == {
        k: v for k, v in snapshot(b).items() if not k.startswith(".sparkplay")
    }


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_sync_mirrors_verifies_and_marks(tree, tmp_path, peer_env, remote_tool, transport):
    (tree / "big.bin").write_bytes(os.urandom(LARGE + 4096))
    tool("manifest", str(tree), "--revision", "v1")
    dest = tmp_path / "copy"
    rc, out, err = sync(tree, dest, "v1", transport, peer_env, remote_tool)
    assert rc == 0, err
    assert out["state"] == "mirrored" and out["transferred_bytes"] >= LARGE
    assert tool("status", str(dest), "--digest", manifest_of(tree)["digest"], "--revision", "v1")[1]["complete"]
    assert str((dest / "snapshots/main/config.json").readlink()).startswith("../../blobs/")
    assert same_tree(tree, dest)
    rc, out, err = sync(tree, dest, "v1", transport, peer_env, remote_tool)  # a re-run: the marker says done
    assert rc == 0 and out["state"] == "complete" and out["sent_bytes"] == 0, err


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_a_new_revision_whose_files_keep_their_sizes_is_sent(tree, tmp_path, peer_env, remote_tool, transport):
    tool("manifest", str(tree), "--revision", "v1")
    dest = tmp_path / "copy"
    assert sync(tree, dest, "v1", transport, peer_env, remote_tool)[0] == 0
    st = (tree / "a.bin").stat()
    (tree / "a.bin").write_bytes(os.urandom(3000))  # same size, same mtime: only the bytes differ
    os.utime(tree / "a.bin", ns=(st.st_atime_ns, st.st_mtime_ns))
    tool("manifest", str(tree), "--revision", "v2")
    rc, _, err = sync(tree, dest, "v2", transport, peer_env, remote_tool)
    assert rc == 0, err
    assert (dest / "a.bin").read_bytes() == (tree / "a.bin").read_bytes()
    marker = json.loads((dest / ".sparkplay/complete.json").read_text())
    assert marker["revision"] == "v2" and marker["manifest_digest"] == manifest_of(tree)["digest"]


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_an_existing_link_on_the_peer_is_replaced_never_written_through(
    tree, tmp_path, peer_env, remote_tool, transport
):
    tool("manifest", str(tree), "--revision", "v1")
    dest, elsewhere = tmp_path / "copy", tmp_path / "elsewhere"
    dest.mkdir()
    elsewhere.write_bytes(b"x" * 3000)  # the same size as a.bin: a resume would find it "complete"
    (dest / "a.bin").symlink_to(elsewhere)
    rc, _, err = sync(tree, dest, "v1", transport, peer_env, remote_tool)
    assert rc == 0, err
    assert elsewhere.read_bytes() == b"x" * 3000
    assert not (dest / "a.bin").is_symlink() and (dest / "a.bin").read_bytes() == (tree / "a.bin").read_bytes()


@pytest.mark.parametrize(
    ("damage", "found"),
    [
        (lambda d: _flip(d / "a.bin"), {"a.bin": "sha256"}),  # in place: same size, new mtime
        (lambda d: (d / "a.bin").write_bytes((d / "a.bin").read_bytes()[:10]), {"a.bin": "size"}),
        (lambda d: (d / "sub/deep/b.bin").unlink(), {"sub/deep/b.bin": "missing"}),
        (lambda d: (d / "planted.bin").write_bytes(b"x"), {"planted.bin": "not in the manifest"}),
    ],
    ids=["flipped", "truncated", "removed", "planted"],
)
def test_a_peer_copy_damaged_after_it_was_verified_is_named_file_by_file_and_repaired(
    tree, tmp_path, peer_env, remote_tool, damage, found
):
    tool("manifest", str(tree), "--revision", "v1")
    dest = tmp_path / "copy"
    assert sync(tree, dest, "v1", "ssh", peer_env, remote_tool)[0] == 0
    damage(dest)
    rc, planned, err = sync(tree, dest, "v1", "ssh", peer_env, remote_tool, "--plan")
    assert rc == 0 and planned["state"] == "changed" and "need_bytes" in planned, err
    rc, out, err = sync(tree, dest, "v1", "ssh", peer_env, remote_tool)
    assert rc == 0, err
    assert out["state"] == "mirrored" and out["found"] == found
    assert same_tree(tree, dest) and not (dest / "planted.bin").exists()
    assert tool("status", str(dest), "--revision", "v1")[1]["complete"]


def test_a_peer_copy_only_touched_is_hashed_and_marked_again_with_nothing_sent(tree, tmp_path, peer_env, remote_tool):
    tool("manifest", str(tree), "--revision", "v1")
    dest = tmp_path / "copy"
    assert sync(tree, dest, "v1", "ssh", peer_env, remote_tool)[0] == 0
    os.utime(dest / "a.bin", ns=(0, 0))
    rc, out, err = sync(tree, dest, "v1", "ssh", peer_env, remote_tool)
    assert rc == 0 and out["state"] == "complete" and out["found"] == {} and out["remarked"], err
    assert tool("status", str(dest), "--revision", "v1")[1]["complete"]


def _flip(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[7] ^= 0xFF
    path.write_bytes(bytes(data))


def test_files_rank0_removed_are_removed_from_the_peer(tree, tmp_path, peer_env, remote_tool):
    tool("manifest", str(tree), "--revision", "staged")
    dest = tmp_path / "copy"
    assert sync(tree, dest, "staged", "ssh", peer_env, remote_tool)[0] == 0
    (tree / "a.bin").unlink()
    (tree / "added.bin").write_bytes(b"added")
    assert not tool("status", str(tree), "--revision", "staged")[1]["complete"]  # rank 0 sees its tree changed
    tool("manifest", str(tree), "--revision", "staged")
    rc, out, err = sync(tree, dest, "staged", "ssh", peer_env, remote_tool)
    assert rc == 0, err
    assert out["pruned"] == ["a.bin"] and same_tree(tree, dest)


def test_sync_refuses_when_rank0_is_not_complete(tree, tmp_path, peer_env, remote_tool):
    tool("manifest", str(tree))  # no marker: rank 0's copy was never declared complete
    rc, _, err = sync(tree, tmp_path / "copy", "v1", "ssh", peer_env, remote_tool)
    assert rc == 1 and "not complete for revision v1" in err


def test_a_peer_that_is_too_small_fails_before_any_byte_moves(tree, tmp_path, peer_env, remote_tool):
    tool("manifest", str(tree), "--revision", "v1")
    dest = tmp_path / "copy"
    rc, out, _ = sync(tree, dest, "v1", "ssh", peer_env, remote_tool, "--plan")
    assert rc == 0 and out["state"] == "needs" and out["need_bytes"] == 3106
    assert not dest.exists()  # a plan changes nothing


@pytest.fixture
def slow_tcp_sync(tmp_path, peer_env, remote_tool):
    """A checkpoint over 64 MiB and a tcp sync of it held to 8 MiB/s, started; (its args, root, dest, port, proc)."""
    root, dest, port = tmp_path / "src", tmp_path / "copy", free_port()
    root.mkdir()
    (root / "big.bin").write_bytes(os.urandom(LARGE + (8 << 20)))
    tool("manifest", str(root), "--revision", "v1")
    args = sync_args(root, dest, "v1", "tcp", remote_tool, port)
    slow = ["--bwlimit", "8192", "--status", str(tmp_path / "status.json")]
    proc = subprocess.Popen(
        [sys.executable, TOOL, *args, *slow],
        env={**os.environ, **peer_env},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not ((dest / "big.bin").exists() and (dest / "big.bin").stat().st_size):
        time.sleep(0.1)
    yield args, root, dest, port, proc
    if proc.poll() is None:
        proc.kill()


def test_a_killed_tcp_mirror_leaves_no_listener_and_the_rerun_resumes(tmp_path, peer_env, slow_tcp_sync):
    args, root, dest, port, proc = slow_tcp_sync
    proc.kill()
    proc.wait()
    gone = time.monotonic() + 10
    while time.monotonic() < gone:
        with socket.socket() as probe:
            if probe.connect_ex(("127.0.0.1", port)) != 0:
                break
        time.sleep(0.2)
    else:
        pytest.fail("the receiver still listens after its mirror was killed")
    follow = tool("progress", str(tmp_path / "status.json"))[1]
    assert follow["finished"] and "ended without a result" in follow["error"]
    partial = (dest / "big.bin").stat().st_size
    assert 0 < partial < LARGE
    rc, out, err = tool(*args, env=peer_env)
    assert rc == 0, err
    assert out["sent_bytes"] <= LARGE + (8 << 20) - partial + 4096
    assert (dest / "big.bin").read_bytes() == (root / "big.bin").read_bytes()


def test_a_killed_receiver_fails_the_sync_loudly_and_the_rerun_resumes(peer_env, slow_tcp_sync):
    args, root, dest, _, proc = slow_tcp_sync
    subprocess.run(["pkill", "-KILL", "-f", f"receive {dest}"], check=True)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 1 and "sparkplay-ckpt:" in err and len(err.strip().splitlines()) == 1, err
    assert not (dest / ".sparkplay/complete.json").exists()
    rc, out, err = tool(*args, env=peer_env)
    assert rc == 0, err
    assert out["sent_bytes"] < LARGE + (8 << 20)  # resumed, not sent again whole
    assert (dest / "big.bin").read_bytes() == (root / "big.bin").read_bytes()


def test_stop_leaves_no_status_file_and_signals_no_process_that_is_not_a_sync(tmp_path):
    """Each run follows its own status file (roles/checkpoint/tasks/peer.yml names it per run, so a sync an
    earlier run left dying never writes into the one a newer run follows); `stop` removes it once its sync is
    gone, and never signals a pid that is no sync (reused, or any other process)."""
    from sparkplay.nodetools.ckpt import sync as syncing

    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        for pid in (sleeper.pid, 2**22 + 7, None):
            status = tmp_path / f"lab-big-rank1-{pid}.json"
            status.write_text(json.dumps({"pid": pid, "phase": "failed", "finished": True, "rc": 1}))
            assert syncing.stop(status) == {"stopped": False}
            assert not status.exists()
        assert sleeper.poll() is None  # not a sync: never signalled
    finally:
        sleeper.kill()
        sleeper.wait()
    assert syncing.stop(tmp_path / "never-written.json") == {"stopped": False}


def test_each_run_follows_a_status_file_of_its_own():
    tasks = (Path(__file__).resolve().parents[1] / "roles/checkpoint/tasks/peer.yml").read_text()
    assert "--status', checkpoint_sync_run]" in tasks and 'progress, "{{ checkpoint_sync_run }}"' in tasks
    assert "now(utc=true, fmt='%Y%m%dT%H%M%S%f')" in tasks  # unique per run, fixed once by set_fact
