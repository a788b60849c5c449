"""What a path from a peer may be, and how to reach it beneath a folder without following links.

The receiver runs as root and reads names from the network, so a name is
checked before anything is opened, and every folder on the way is opened
relative to the one before with O_NOFOLLOW: a link anywhere on the way
stops the write instead of leading it elsewhere.
"""

from __future__ import annotations

import contextlib
import errno
import os
import posixpath
import stat

from .common import META

MAX_PATH = 4096  # bytes, as PATH_MAX
MAX_NAME = 255  # bytes, as NAME_MAX on ext4/xfs
DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class Refused(Exception):
    """A name or frame the receiver will not act on: (path, why)."""

    def __init__(self, path: object, why: str) -> None:
        super().__init__(f"refused {path!r}: {why}")
        self.path, self.why = path, why


def check_rel(rel: object) -> tuple[str, ...]:
    """The components of a relative path that stays beneath its folder, or Refused."""
    if not isinstance(rel, str) or not rel:
        raise Refused(rel, "a path must be a non-empty string")
    raw = rel.encode("utf-8", "surrogateescape")
    if b"\0" in raw:
        raise Refused(rel, "NUL in the path")
    if len(raw) > MAX_PATH:
        raise Refused(rel[:80] + "...", f"path longer than {MAX_PATH} bytes")
    if rel.startswith("/"):
        raise Refused(rel, "absolute path")
    parts = tuple(rel.split("/"))
    for part in parts:
        if part in ("", ".", ".."):
            raise Refused(rel, "empty, '.' or '..' component")
        if len(part.encode("utf-8", "surrogateescape")) > MAX_NAME:
            raise Refused(rel, f"a name longer than {MAX_NAME} bytes")
    if parts[0] == META:
        raise Refused(rel, f"{META}/ holds sparkplay's own bookkeeping; a peer never writes there")
    return parts


def check_link(rel: str, target: object) -> str:
    """A link target that is relative and resolves beneath the folder (outside META), or Refused."""
    if not isinstance(target, str) or not target:
        raise Refused(rel, "a link target must be a non-empty string")
    if "\0" in target or len(target.encode("utf-8", "surrogateescape")) > MAX_PATH:
        raise Refused(rel, "link target with NUL or too long")
    if target.startswith("/"):
        raise Refused(rel, f"absolute link target {target!r}")
    resolved = posixpath.normpath(posixpath.join(posixpath.dirname(rel), target))
    if resolved == ".." or resolved.startswith("../") or resolved == ".":
        raise Refused(rel, f"link target {target!r} leaves the folder")
    if resolved.split("/")[0] == META:
        raise Refused(rel, f"link target {target!r} points into {META}/")
    return target


class NotAFolder(Exception):
    """A component that is a link or not a folder."""


def open_dir_at(fd: int, name: str, create: bool) -> int:
    """The folder `name` beneath `fd`, never through a link; made first when missing and `create` (another
    stream may make it meanwhile: then what is there is opened, still without following links)."""
    try:
        try:
            return os.open(name, DIR_FLAGS, dir_fd=fd)
        except FileNotFoundError:
            if not create:
                raise
            with contextlib.suppress(FileExistsError):
                os.mkdir(name, 0o755, dir_fd=fd)
            return os.open(name, DIR_FLAGS, dir_fd=fd)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            raise NotAFolder(name) from None
        raise


def _unsafe(st: os.stat_result) -> bool:
    """Not root's, or writable by others without the sticky bit (they could rename what it holds)."""
    others = st.st_mode & (stat.S_IWGRP | stat.S_IWOTH) and not st.st_mode & stat.S_ISVTX
    return st.st_uid != 0 or bool(others)


def _check_links_on_the_way(path: str) -> None:
    """As root: every link met on the way to `path`, resolved as the kernel does, is root's, in a folder only
    root can change (a local user's link in a folder they can write, `shared/models -> /etc`, would aim
    root's writes anywhere)."""
    pending = [p for p in path.split("/") if p]
    done: list[str] = []
    hops = 0
    while pending:
        part = pending.pop(0)
        if part == ".":
            continue
        if part == "..":
            done = done[:-1]
            continue
        here = "/" + "/".join([*done, part])
        try:
            st = os.lstat(here)
        except FileNotFoundError:
            return  # made below, beneath folders already checked
        if not stat.S_ISLNK(st.st_mode):
            done.append(part)
            continue
        hops += 1
        if hops > MAX_HOPS or st.st_uid != 0 or _unsafe(os.lstat("/" + "/".join(done))):
            raise Refused(
                here, "is a link another user made or could replace (or links loop); sparkplay follows only root's"
            )
        target = os.readlink(here)  # noqa: PTH115 - a string path, as the walk holds it
        done = [] if target.startswith("/") else done
        pending = [p for p in target.split("/") if p] + pending


def open_tree(path: os.PathLike[str] | str, create: bool) -> int:
    """An fd for the folder `path`, opened from `/` one component at a time without following links
    (a link the user put on the way, such as a model root on another disk, is resolved once, first, and
    must be root's).

    Run as root, every folder on the way must be root's and writable by no one else unless sticky: a
    local user who could rename entries in one could swap a folder under root's writes.
    """
    if os.geteuid() == 0:
        _check_links_on_the_way(os.fspath(path))
    real = os.path.realpath(path)
    fd = os.open("/", DIR_FLAGS)
    try:
        done = ""
        for name in [p for p in real.split("/") if p]:
            try:
                nxt = open_dir_at(fd, name, create)
            except NotAFolder:
                raise Refused(real, f"{done}/{name} changed into a link or a file while it was opened") from None
            os.close(fd)
            fd, done = nxt, f"{done}/{name}"
            if os.geteuid() == 0 and _unsafe(os.fstat(fd)):
                raise Refused(
                    real,
                    f"{done} is writable by a user other than root: a local user could swap "
                    "folders under sparkplay's writes; fix its owner or mode",
                )
        return fd
    except BaseException:
        os.close(fd)
        raise


MAX_HOPS = 40  # the kernel's limit of links followed in one lookup (MAXSYMLINKS)


def resolve(rel: str, links: dict[str, str]) -> str:
    """Where `rel` leads in a tree whose links are `links` (path -> target), resolved as the kernel does:
    component by component, a link replaced by its target where it stands, `..` taken after that, so a
    chain of in-tree links that climbs out is seen (`a/b -> ..` then `x -> a/b/../..`). Refused when it
    leaves the tree, enters META or loops."""
    pending = rel.split("/")
    stack: list[str] = []
    hops = 0
    while pending:
        part = pending.pop(0)
        if part in ("", "."):
            continue
        if part == "..":
            if not stack:
                raise Refused(rel, "a chain of links leads out of the folder")
            stack.pop()
            continue
        here = "/".join([*stack, part])
        if here in links:
            hops += 1
            target = links[here]
            if hops > MAX_HOPS or target.startswith("/"):
                raise Refused(rel, "links loop or lead out of the folder")
            pending = target.split("/") + pending  # relative to the folder holding the link
            continue
        stack.append(part)
    if not stack or stack[0] == META:
        raise Refused(rel, "a chain of links leads to the folder itself or into sparkplay's bookkeeping")
    return "/".join(stack)


def open_parent(root_fd: int, parts: tuple[str, ...], create: bool) -> int:
    """An fd for the folder holding parts[-1], each component opened beneath the last without following links."""
    fd = os.dup(root_fd)
    try:
        for i, name in enumerate(parts[:-1]):
            try:
                nxt = open_dir_at(fd, name, create)
            except NotAFolder:
                raise Refused("/".join(parts), f"{'/'.join(parts[: i + 1])} is a link or not a folder") from None
            os.close(fd)
            fd = nxt
        return fd
    except BaseException:
        os.close(fd)
        raise


def lstat_at(dir_fd: int, name: str) -> os.stat_result | None:
    try:
        return os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return None


def clear_for(dir_fd: int, name: str, rel: str, keep_regular: bool) -> os.stat_result | None:
    """Make room for a new entry: remove a link (never its target) or, unless kept, a file.

    A regular file with other hard links is removed too, so writing never
    changes an inode that something outside this path shares. A folder in
    the way is refused: it is not the peer's to delete.
    """
    st = lstat_at(dir_fd, name)
    if st is None:
        return None
    if stat.S_ISDIR(st.st_mode):
        raise Refused(rel, "a folder is in the way")
    if keep_regular and stat.S_ISREG(st.st_mode) and st.st_nlink == 1:
        return st
    os.unlink(name, dir_fd=dir_fd)
    return None
