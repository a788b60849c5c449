"""An engine image to another rank: only the layers it lacks, each verified by its digest.

Spark images are 15-25 GB and an update mostly changes a top layer. `docker save | docker load` sends all of it
every time; this sends a `docker load` archive that holds the image's config, its manifest and only the
layers the peer does not have (`docker load` opens a layer's file only when its chain is missing there, and
checks each layer it loads against the config's diff id: a wrong byte fails the load).

A layer's bytes come from Docker's own store on this node, as `docker save` makes them: the overlay2 folder of
the layer rebuilt into its tar with the layer's tar-split record (the headers and padding Docker kept), and
the result's sha256 checked against the layer's diff id before the archive ends. Anything this cannot do
(another storage driver, a store laid out otherwise, a digest-pinned reference, a digest that does not match)
is said in one line and the whole image goes as before (`--whole` forces it). What the peer says it holds
only decides what is left out: a peer that lies gets an archive its `docker load` refuses, and the whole
image follows.
"""

from __future__ import annotations

import argparse
import base64
import gzip
import hashlib
import io
import json
import os
import posixpath
import subprocess
import sys
import tarfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO

CHUNK = 1 << 20
SSH = ["ssh", "-o", "BatchMode=yes", "-o", "ConnectTimeout=10"]


class CannotThin(Exception):
    """Why only the whole image can go (one line)."""


def chain_ids(diff_ids: list[str]) -> list[str]:
    """Docker's chain id of each layer: the first its diff id, each next sha256("<chain> <diff>")."""
    chains: list[str] = []
    for diff in diff_ids:
        chains.append(diff if not chains else "sha256:" + hashlib.sha256(f"{chains[-1]} {diff}".encode()).hexdigest())
    return chains


def _hex(digest: str) -> str:
    algo, _, value = digest.partition(":")
    if algo != "sha256" or len(value) != 64 or any(c not in "0123456789abcdef" for c in value):
        raise CannotThin(f"{digest!r} is no sha256 digest")
    return value


def tar_split_entries(path: Path) -> Iterator[dict[str, Any]]:
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        for line in fh:
            if line.strip():
                yield json.loads(line)


def _member(entry: dict[str, Any]) -> str:
    name = entry.get("name")
    if name is None and entry.get("name_raw"):
        name = base64.b64decode(entry["name_raw"]).decode("utf-8", "surrogateescape")
    name = str(name or "")
    norm = posixpath.normpath(name)
    if name.startswith("/") or norm == ".." or norm.startswith("../"):
        raise CannotThin(f"the layer's record names {name!r}, outside the layer")
    return norm


def layer_size(split: Path) -> int:
    """The layer tar's size from its tar-split record: its kept segments and its files' sizes."""
    total = 0
    for entry in tar_split_entries(split):
        if entry.get("type") == 2:
            total += len(base64.b64decode(entry.get("payload") or ""))
        elif entry.get("type") == 1:
            total += int(entry.get("size") or 0)
    return total


def layer_bytes(split: Path, diff: Path) -> Iterator[bytes]:
    """The layer's tar, as `docker save` writes it: the kept segments, and each file's bytes from the layer's
    folder (a file shorter or longer than the record says fails: the layer changed under the store)."""
    for entry in tar_split_entries(split):
        if entry.get("type") == 2:
            yield base64.b64decode(entry.get("payload") or "")
            continue
        size = int(entry.get("size") or 0)
        if entry.get("type") != 1 or size == 0:
            continue
        path = diff / _member(entry)
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
        with os.fdopen(fd, "rb") as fh:
            left = size
            while left:
                piece = fh.read(min(CHUNK, left))
                if not piece:
                    raise CannotThin(f"{path} is shorter than its layer's record")
                left -= len(piece)
                yield piece


class Verified(io.RawIOBase):
    """A layer's bytes as a file to tarfile, hashed as they pass; `check` compares the hash with the diff id."""

    def __init__(self, pieces: Iterator[bytes], diff_id: str) -> None:
        self.pieces, self.diff_id, self.hash, self.buffer = pieces, diff_id, hashlib.sha256(), b""

    def readable(self) -> bool:
        return True

    def readinto(self, out: Any) -> int:
        while not self.buffer:
            piece = next(self.pieces, None)
            if piece is None:
                return 0
            self.hash.update(piece)
            self.buffer = piece
        n = min(len(out), len(self.buffer))
        out[:n], self.buffer = self.buffer[:n], self.buffer[n:]
        return n

    def check(self) -> None:
        if "sha256:" + self.hash.hexdigest() != self.diff_id:
            raise CannotThin(f"a layer rebuilt from the store is not {self.diff_id}: the store changed under it")


def docker_json(docker: str, *args: str) -> Any:
    done = subprocess.run([docker, *args], capture_output=True, text=True, check=False, timeout=120)
    if done.returncode != 0:
        raise CannotThin(f"`docker {' '.join(args[:2])}` failed: {done.stderr.strip()[:200]}")
    return json.loads(done.stdout)


def at_peer(peer: list[str], *args: str) -> str:
    """`peer` (the command that runs the peer's docker: ssh PEER DOCKER, or a local docker -H ...) with args."""
    done = subprocess.run([*peer, *args], capture_output=True, text=True, check=False, timeout=300)
    if done.returncode != 0:
        raise CannotThin(f"the peer's `docker {args[0]} {args[1]}` failed: {done.stderr.strip()[:200]}")
    return done.stdout


def peer_chains(peer: list[str]) -> set[str]:
    """The chain ids of every layer the peer's images hold (what `docker load` there will not need)."""
    ids = [i for i in at_peer(peer, "image", "ls", "-aq", "--no-trunc").split() if i.startswith("sha256:")]
    if not ids:
        return set()
    out = at_peer(peer, "image", "inspect", "--format", "{{json .RootFS.Layers}}", *sorted(set(ids))[:4096])
    held: set[str] = set()
    for line in out.splitlines():
        try:
            layers = json.loads(line)
        except ValueError:
            continue
        if isinstance(layers, list) and all(isinstance(d, str) for d in layers):
            held.update(chain_ids(layers))
    return held


def plan(image: str, docker: str, root: Path, held: set[str]) -> dict[str, Any]:
    """What goes: the image's config (its bytes from the store, their sha256 the image's id), every layer in
    the manifest, and the store's record and folder of each layer the peer lacks."""
    if "@" in image:
        raise CannotThin("a digest-pinned reference cannot be tagged by `docker load`")
    info = docker_json(docker, "info", "--format", "{{json .}}")
    if info.get("Driver") != "overlay2":
        raise CannotThin(f"Docker stores images with {info.get('Driver')!r}, not overlay2")
    found = docker_json(docker, "image", "inspect", image)[0]
    image_id, diffs = found["Id"], list(found["RootFS"]["Layers"])
    store = root / "image" / "overlay2"
    config = (store / "imagedb" / "content" / "sha256" / _hex(image_id)).read_bytes()
    if "sha256:" + hashlib.sha256(config).hexdigest() != image_id:
        raise CannotThin("the store's config of the image is not its id")
    layers = []
    for diff, chain in zip(diffs, chain_ids(diffs), strict=True):
        entry: dict[str, Any] = {"diff_id": diff, "chain_id": chain, "name": f"{_hex(diff)}/layer.tar"}
        if chain not in held:
            record = store / "layerdb" / "sha256" / _hex(chain)
            cache = (record / "cache-id").read_text().strip()
            if not cache or "/" in cache or cache.startswith("."):
                raise CannotThin(f"layer {chain} names no overlay2 folder")
            entry["split"], entry["diff"] = record / "tar-split.json.gz", root / "overlay2" / cache / "diff"
            entry["size"] = layer_size(entry["split"])
        layers.append(entry)
    return {"image": image, "id": image_id, "config": config, "layers": layers}


def write_archive(thin: dict[str, Any], out: BinaryIO) -> int:
    """The `docker load` archive of `plan`'s image to `out`: the bytes of the layers sent."""
    sent = 0
    with tarfile.open(fileobj=out, mode="w|", format=tarfile.USTAR_FORMAT) as archive:

        def add(name: str, size: int, data: Any) -> None:
            member = tarfile.TarInfo(name)
            member.size, member.mode, member.mtime = size, 0o644, 0
            archive.addfile(member, data)

        config_name = f"{_hex(thin['id'])}.json"
        add(config_name, len(thin["config"]), io.BytesIO(thin["config"]))
        for layer in thin["layers"]:
            if "split" in layer:
                data = Verified(layer_bytes(layer["split"], layer["diff"]), layer["diff_id"])
                add(layer["name"], layer["size"], io.BufferedReader(data, CHUNK))
                data.check()
                sent += layer["size"]
        manifest = [{"Config": config_name, "RepoTags": [thin["image"]], "Layers": [x["name"] for x in thin["layers"]]}]
        text = json.dumps(manifest).encode()
        add("manifest.json", len(text), io.BytesIO(text))
    return sent


def send(image: str, peer: list[str], docker: str, root: Path, whole: bool = False) -> dict[str, Any]:
    """The image to the peer's Docker (`peer`: the command that runs it, ssh over the cable on a cluster): its
    missing layers, or whole."""
    started = time.monotonic()
    why = "asked for the whole image (--whole)" if whole else None
    if not whole:
        try:
            thin = plan(image, docker, root, peer_chains(peer))
            load = subprocess.Popen([*peer, "load"], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
            try:
                sent = write_archive(thin, load.stdin)  # type: ignore[arg-type]
            finally:
                load.stdin.close()  # type: ignore[union-attr]
                said = load.stdout.read().decode(errors="replace") if load.stdout else ""
                load.wait()
            if load.returncode != 0:
                raise CannotThin(f"the peer's docker load refused the layers: {said.strip()[:200]}")
            total = len(thin["layers"])
            missing = sum(1 for x in thin["layers"] if "split" in x)
            return {
                "how": "layers",
                "layers_sent": missing,
                "layers_held": total - missing,
                "bytes": sent,
                "seconds": round(time.monotonic() - started, 1),
            }
        except (CannotThin, OSError, ValueError, KeyError, IndexError) as exc:
            why = str(exc) if isinstance(exc, CannotThin) else f"{type(exc).__name__}: {exc}"
    saver = subprocess.Popen([docker, "save", image], stdout=subprocess.PIPE)
    load = subprocess.Popen([*peer, "load"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    sent = 0
    try:
        while piece := saver.stdout.read(CHUNK):  # type: ignore[union-attr]
            load.stdin.write(piece)  # type: ignore[union-attr]
            sent += len(piece)
    except BrokenPipeError:
        pass  # the load ended early: its exit says why
    _out, err = load.communicate()  # closes its input: the archive ends
    if saver.wait() != 0 or load.returncode != 0:
        raise SystemExit(f"the whole image did not reach the peer either: {err.decode(errors='replace').strip()[:300]}")
    return {"how": "whole", "why": why, "bytes": sent, "seconds": round(time.monotonic() - started, 1)}


def cmd_image_send(args: argparse.Namespace) -> int:
    peer = [*SSH, args.peer, args.docker]
    result = send(args.image, peer, args.docker, Path(args.docker_root), args.whole)
    if result["how"] == "whole":
        print(f"sparkplay-serve image-send: sent the whole image: {result['why']}", file=sys.stderr)
    print(json.dumps(result))
    return 0


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--image", required=True)
    p.add_argument("--peer", required=True, help="the rank's cable address (the peer ssh trust reaches it)")
    p.add_argument("--docker", default="/usr/bin/docker")
    p.add_argument("--docker-root", default="/var/lib/docker", help="Docker's data root on this node")
    p.add_argument("--whole", action="store_true", help="send the whole image (docker save | docker load)")
    p.set_defaults(func=cmd_image_send)
