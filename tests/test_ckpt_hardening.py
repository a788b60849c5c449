"""The checkpoint receiver and rank 0's tree against what a peer or a local user could do (issue 24).

In process (the same modules the shipped tool zips): many streams racing into
new folders, link chains that climb out only as the kernel resolves them, a
tree deeper than Python's recursion limit, files the manifest does not list,
a folder on the way that another user could write, rank 0's source files
swapped for a FIFO or a link.
"""

from __future__ import annotations

import io
import json
import os
import threading
from pathlib import Path

import pytest

from sparkplay.nodetools.ckpt import manifest as mf
from sparkplay.nodetools.ckpt import state
from sparkplay.nodetools.ckpt.common import Failure
from sparkplay.nodetools.ckpt.paths import Refused, open_tree, resolve
from sparkplay.nodetools.ckpt.sink import Sink


def frame(data: dict) -> bytes:
    return json.dumps(data).encode() + b"\n"


def file_frame(path: str, body: bytes) -> bytes:
    return frame({"path": path, "size": len(body), "mode": 0o644, "mtime_ns": 10**18, "restart": False}) + body


def serve(sink: Sink, stream: bytes) -> list[dict]:
    replies: list[dict] = []
    sink.serve(io.BufferedReader(io.BytesIO(stream)), replies.append)
    return replies


@pytest.mark.parametrize("attempt", range(5))
def test_many_streams_into_many_new_nested_folders_never_race_each_other(tmp_path, attempt):
    dest = tmp_path / f"dest{attempt}"
    sink = Sink(dest)
    streams = [
        b"".join(file_frame(f"part{f}/layer{f % 3}/deep/s{stream}-{f}.bin", b"x" * 64) for f in range(40))
        + frame({"done": True})
        for stream in range(8)
    ]
    errors: list[BaseException] = []

    def run(stream: bytes) -> None:
        try:
            serve(sink, stream)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(s,)) for s in streams]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    sink.close()
    assert not errors, errors
    assert sum(1 for p in dest.rglob("*.bin")) == 8 * 40


def test_a_chain_of_in_tree_links_is_resolved_as_the_kernel_would():
    assert resolve("snapshots/main/c.json", {"snapshots/main/c.json": "../../blobs/abc"}) == "blobs/abc"
    links = {"a/b": "../c", "x": "a/b/../../y"}  # textually x -> y; the kernel: a/b -> c, c/.. -> ., ./.. -> out
    with pytest.raises(Refused, match="out of the folder"):
        resolve("x", links)
    with pytest.raises(Refused, match="loop"):
        resolve("p", {"p": "q", "q": "p"})
    with pytest.raises(Refused):
        resolve("m", {"m": "d/../.sparkplay/complete.json"})


def test_a_stream_whose_later_link_reroutes_an_earlier_one_out_of_the_tree_is_refused(tmp_path):
    outside = tmp_path / "y"
    outside.write_text("precious")
    dest = tmp_path / "t" / "dest"
    sink = Sink(dest)
    stream = frame({"path": "x", "symlink": "a/b/../../y"}) + frame({"path": "a/b", "symlink": "../c"})
    with pytest.raises(Refused, match="chain of links"):
        serve(sink, stream)
    sink.close()
    assert not (dest / "a" / "b").is_symlink()


def test_a_manifest_with_a_link_chain_out_of_the_tree_is_refused():
    files = [
        {"path": "a/b", "type": "symlink", "target": "../c"},
        {"path": "x", "type": "symlink", "target": "a/b/../../y"},
    ]
    doc = {"format": mf.FORMAT, "files": files, "digest": mf.digest_of(files), "bytes": 0, "count": 2}
    with pytest.raises(Failure, match="chain of links"):
        mf.validate(doc, "rank 0's manifest")


def remove_deep(root: Path) -> None:
    """Remove a chain of `d` folders bottom-up without recursion (shutil.rmtree recurses before 3.12, and
    pytest's clean-up of old temporary folders would die in it)."""
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    fds = [fd]
    while "d" in os.listdir(fd):  # noqa: PTH208 - by descriptor: the path is too deep to name
        fd = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
        fds.append(fd)
    while fds:
        fd = fds.pop()
        for name in os.listdir(fd):  # noqa: PTH208
            if name != "d":
                os.unlink(name, dir_fd=fd)
        if fds:
            os.rmdir("d", dir_fd=fds[-1])
        os.close(fd)
    root.rmdir()


def test_a_tree_deeper_than_the_recursion_limit_is_walked(tmp_path):
    root = tmp_path / "deep"
    root.mkdir()
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for _ in range(1500):  # 3000 bytes of path: within PATH_MAX, past Python's 1000 frames
            os.mkdir("d", dir_fd=fd)
            nxt = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = nxt
        leaf = os.open("f", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fd)
        os.write(leaf, b"leaf")
        os.close(leaf)
        os.close(fd)
        [(rel, _)] = mf.walk(root)
        assert rel == "d/" * 1500 + "f"
    finally:
        remove_deep(root)
    assert not root.exists()


def test_verify_and_mark_refuse_a_tree_holding_files_the_manifest_does_not_list(tmp_path):
    root = tmp_path / "ckpt"
    root.mkdir()
    (root / "a.bin").write_bytes(b"model")
    manifest, _, _ = mf.build(root, 2)
    (root / "extra.so").write_bytes(b"\x7fELF")
    result = state.verify(root, manifest, full=True)
    assert not result["ok"] and result["bad"] == {"extra.so": "not in the manifest"}
    with pytest.raises(Failure, match=r"extra\.so"):
        state.mark(root, manifest, "r1")


@pytest.mark.skipif(os.geteuid() != 0, reason="the rule is for root's writes")
def test_a_folder_on_the_way_that_another_user_can_write_stops_roots_writes(tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)  # no sticky bit: anyone may rename what is inside
    with pytest.raises(Refused, match="writable by a user other than root"):
        Sink(shared / "models" / "ckpt")
    assert not (shared / "models").exists()
    sticky = tmp_path / "sticky"
    sticky.mkdir()
    sticky.chmod(0o1777)  # like /tmp: others cannot rename root's entries
    os.close(open_tree(sticky / "ckpt", create=True))
    os.chown(sticky / "ckpt", 65534, 65534)
    with pytest.raises(Refused, match="ckpt is writable by a user other than root"):
        state.Tree(sticky / "ckpt")


@pytest.mark.parametrize("swap", ["fifo", "link"])
def test_rank_0_never_sends_a_source_swapped_for_a_fifo_or_a_link(tmp_path, swap):
    from sparkplay.nodetools.ckpt.protocol import send_entries

    root = tmp_path / "ckpt"
    root.mkdir()
    (root / "a.bin").write_bytes(b"model")
    manifest, _, _ = mf.build(root, 2)
    secret = tmp_path / "shadow"
    secret.write_bytes(b"root:x")
    (root / "a.bin").unlink()
    if swap == "fifo":
        os.mkfifo(root / "a.bin")  # opened without O_NONBLOCK, this would block the sender forever
    else:
        (root / "a.bin").symlink_to(secret)
    sent: list[bytes] = []
    with pytest.raises(Failure, match=r"a\.bin"):
        send_entries(
            io.BytesIO(), sent.append, lambda fd, pos, n: n, manifest["files"], root, False, lambda n: None, "rank 1"
        )
    assert not any(b"root:x" in chunk for chunk in sent) and sent == []


@pytest.mark.skipif(os.geteuid() != 0, reason="a local user is made with setpriv, as root")
def test_a_link_a_local_user_plants_on_the_way_never_aims_roots_writes(tmp_path):
    """Real: `nobody` (through setpriv) puts `models -> ../secret` in a sticky folder anyone may write (as
    /tmp is); root's receiver asked to write beneath `shared/models/ckpt` refuses to follow that link."""
    import shutil
    import tempfile

    base = Path(tempfile.mkdtemp(dir="/tmp"))  # beneath /tmp: a local user can walk there
    base.chmod(0o755)
    try:
        _planted_link_is_refused(base)
    finally:
        shutil.rmtree(base)


def _planted_link_is_refused(tmp_path: Path) -> None:
    import subprocess

    secret = tmp_path / "secret"
    secret.mkdir(mode=0o700)
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o1777)
    subprocess.run(
        [
            "setpriv",
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "ln",
            "-s",
            str(secret),
            str(shared / "models"),
        ],
        check=True,
    )
    assert (shared / "models").lstat().st_uid == 65534
    with pytest.raises(Refused, match="link another user made"):
        Sink(shared / "models" / "ckpt")
    assert list(secret.iterdir()) == []
    # root's own link in a folder only root can change is followed (a model root on another disk)
    disk = tmp_path / "disk"
    disk.mkdir()
    (tmp_path / "root-link").symlink_to(disk)
    sink = Sink(tmp_path / "root-link" / "ckpt")
    sink.close()
    assert (disk / "ckpt").is_dir()
