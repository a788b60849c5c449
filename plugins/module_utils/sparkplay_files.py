"""Many folders and files converged on a node in one step (on the node: stdlib only).

One module run in place of a `file`, `copy` or `template` task per path: on a run that changes nothing
that is one round trip instead of ten, which is most of a role's time. Each file lands as `copy` lands it
(a temporary file beside it with its owner and mode set, checked by the caller's command when there is
one, then renamed over the old one), and an existing file with other bytes is backed up first under
Ansible's own backup name, which sparkplay's reset knows.
"""

from __future__ import annotations

import base64
import grp
import hashlib
import os
import pwd
import stat
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass
class Wanted:
    """One file as the caller wants it."""

    path: str
    data: bytes
    mode: int
    uid: int
    gid: int
    validate: str | None = None
    secret: bool = False
    binary: bool = False


@dataclass
class Outcome:
    changed: list = field(default_factory=list)  # paths whose bytes, owner or mode moved (or would)
    diff: list = field(default_factory=list)  # Ansible's diff entries, secrets and binaries left out


def ids(owner: str, group: str) -> tuple[int, int]:
    """uid and gid of a name (or a number)."""
    uid = int(owner) if owner.isdigit() else pwd.getpwnam(owner).pw_uid
    gid = int(group) if group.isdigit() else grp.getgrnam(group).gr_gid
    return uid, gid


def mode_of(value: object) -> int:
    """A mode written as Ansible takes it: an octal string ("0644") or an int that was meant as octal."""
    if isinstance(value, int):
        return value
    text = str(value).strip()
    if not text or any(c not in "01234567" for c in text):
        raise ValueError(f"mode {value!r} is not an octal number such as '0644'")
    return int(text, 8)


def wanted(entry: dict) -> Wanted:
    """A `files` entry of the module's arguments as bytes, ids and a mode."""
    if entry.get("content_base64") is not None:
        data, binary = base64.b64decode(entry["content_base64"], validate=True), True
    else:
        data, binary = (entry.get("content") or "").encode("utf-8"), False
    uid, gid = ids(entry.get("owner") or "root", entry.get("group") or "root")
    return Wanted(
        entry["path"],
        data,
        mode_of(entry.get("mode") or "0644"),
        uid,
        gid,
        entry.get("validate") or None,
        bool(entry.get("secret")),
        binary,
    )


def folder(path: str, mode: int, uid: int, gid: int, check: bool) -> bool:
    """A folder with this owner and mode (its missing parents 0755, as `file` makes them); changed?"""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        if not check:
            os.makedirs(os.path.dirname(path.rstrip("/")) or "/", mode=0o755, exist_ok=True)
            os.mkdir(path, mode)
            os.chown(path, uid, gid)
            os.chmod(path, mode)  # mkdir's mode passes through the umask
        return True
    if not stat.S_ISDIR(st.st_mode):
        raise ValueError(f"{path} exists and is not a folder; move it away and run again")
    moved = stat.S_IMODE(st.st_mode) != mode or (st.st_uid, st.st_gid) != (uid, gid)
    if moved and not check:
        os.chown(path, uid, gid)
        os.chmod(path, mode)
    return moved


def current(path: str) -> tuple[bytes | None, os.stat_result | None]:
    """The bytes and stat of a regular file (through a link, as a write goes); None, None when absent."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None, None
    if not stat.S_ISREG(st.st_mode):
        raise ValueError(f"{path} exists and is not a regular file; move it away and run again")
    with open(path, "rb") as fh:
        return fh.read(), st


def staged(want: Wanted) -> str:
    """The new bytes in a temporary file beside the target, with the wanted owner and mode, fsynced."""
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(want.path) or ".", prefix=".sparkplay-write.")
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(want.data)
            out.flush()
            os.fchown(out.fileno(), want.uid, want.gid)
            os.fchmod(out.fileno(), want.mode)
            os.fsync(out.fileno())
    except BaseException:
        os.unlink(tmp)
        raise
    return tmp


def text(data: bytes | None) -> str:
    return "" if data is None else data.decode("utf-8", errors="replace")


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def converge(
    files: list[Wanted],
    check: bool,
    diff: bool,
    run: Callable[[str], tuple[int, str, str]],
    backup: Callable[[str], str],
) -> Outcome:
    """Each file in the order given: the same bytes, owner and mode are left alone; other bytes are staged,
    checked by its `validate` command (a `%s` for the staged file; run(argv) -> (rc, out, err)), the old file
    backed up (backup(path) -> backup path), and the staged one renamed over it. A failed check stops there,
    the target untouched: later files depend on earlier ones (a unit is checked by the tool written before)."""
    outcome = Outcome()
    for want in files:
        before, st = current(want.path)
        bytes_moved = before != want.data
        owned = st is not None and (st.st_uid, st.st_gid) == (want.uid, want.gid)
        attrs_moved = st is not None and (stat.S_IMODE(st.st_mode) != want.mode or not owned)
        if not (bytes_moved or attrs_moved):
            continue
        outcome.changed.append(want.path)
        if diff and bytes_moved:
            hidden = "(secret: not shown)" if want.secret else "(binary: not shown)" if want.binary else None
            outcome.diff.append(
                {
                    "before_header": want.path,
                    "after_header": want.path,
                    "before": hidden or text(before),
                    "after": hidden or text(want.data),
                }
            )
        if check:
            continue
        if not bytes_moved:
            os.chown(want.path, want.uid, want.gid)
            os.chmod(want.path, want.mode)
            continue
        tmp = staged(want)
        try:
            if want.validate:
                if "%s" not in want.validate:
                    raise ValueError(f"validate for {want.path} has no %s for the file to check")
                rc, out, err = run(want.validate % tmp)
                if rc != 0:
                    raise ValueError(f"{want.path} was not written: its check failed ({rc}): {(err or out).strip()}")
            if before is not None:
                backup(want.path)
            os.replace(tmp, want.path)
        except BaseException:
            if os.path.exists(tmp):
                os.unlink(tmp)
            raise
        dirfd = os.open(os.path.dirname(want.path) or ".", os.O_RDONLY)
        try:
            os.fsync(dirfd)
        finally:
            os.close(dirfd)
    return outcome


def shown(entries: list[dict]) -> list[dict]:
    """The `files` argument as it may be logged: each content as its size and sha256, never its bytes."""
    out = []
    for entry in entries:
        clean = {k: v for k, v in entry.items() if k not in ("content", "content_base64")}
        raw = entry.get("content_base64")
        data = base64.b64decode(raw) if raw is not None else (entry.get("content") or "").encode("utf-8")
        clean["content"] = f"({len(data)} bytes, sha256 {sha256(data)})"
        out.append(clean)
    return out
