"""An engine image to another rank, only the layers it lacks (issue 59; sparkplay-serve image-send).

The rules run here without Docker; the archive itself is tested against the real Docker engine of this machine
(`lab`: root and a Docker engine): an image built on the lab's node image, its archive made with the node
image's layers held, the image removed, then `docker load` of the archive gives back the same image ID. The
peer is this same engine (a second rank's engine cannot exist here); benchmarks/image_layers.py runs a
second Docker engine for the figures.
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import json
import subprocess
from pathlib import Path

import pytest

from sparkplay.imageref import image_sends, image_sent_line
from sparkplay.nodetools.serve import image


def test_chain_ids_are_dockers():
    a, b = "sha256:" + "a" * 64, "sha256:" + "b" * 64
    assert image.chain_ids([a, b]) == [a, "sha256:" + hashlib.sha256(f"{a} {b}".encode()).hexdigest()]
    assert image.chain_ids([]) == []


def split_record(path: Path, entries: list[dict]) -> Path:
    with gzip.open(path, "wt", encoding="utf-8") as fh:
        fh.write("".join(json.dumps(e) + "\n" for e in entries))
    return path


@pytest.mark.parametrize("name", ["/etc/shadow", "../../etc/shadow", "a/../../x"])
def test_a_layer_record_naming_a_file_outside_its_layer_is_refused(tmp_path, name):
    split = split_record(tmp_path / "s.json.gz", [{"type": 1, "name": name, "size": 4}])
    with pytest.raises(image.CannotThin, match="outside the layer"):
        list(image.layer_bytes(split, tmp_path))


def test_a_layer_is_its_segments_and_files_and_a_short_file_or_other_bytes_fail(tmp_path):
    diff = tmp_path / "diff"
    diff.mkdir()
    (diff / "f").write_bytes(b"data")
    head, tail = b"H" * 512, b"\0" * 1024
    entries = [
        {"type": 2, "payload": base64.b64encode(head).decode()},
        {"type": 1, "name": "f", "size": 4},
        {"type": 2, "payload": base64.b64encode(tail).decode()},
    ]
    split = split_record(tmp_path / "s.json.gz", entries)
    whole = head + b"data" + tail
    assert image.layer_size(split) == len(whole) and b"".join(image.layer_bytes(split, diff)) == whole
    checked = image.Verified(image.layer_bytes(split, diff), "sha256:" + hashlib.sha256(whole).hexdigest())
    assert checked.read() == whole
    checked.check()
    wrong = image.Verified(image.layer_bytes(split, diff), "sha256:" + "0" * 64)
    wrong.read()
    with pytest.raises(image.CannotThin, match="store changed"):
        wrong.check()
    (diff / "f").write_bytes(b"da")
    with pytest.raises(image.CannotThin, match="shorter"):
        list(image.layer_bytes(split, diff))
    (diff / "f").unlink()
    (diff / "f").symlink_to("/etc/passwd")  # never followed out of the layer
    with pytest.raises(OSError):
        list(image.layer_bytes(split, diff))


def test_rank_0_sends_only_where_an_id_differs_and_says_how_it_went():
    leader = "sha256:" + "1" * 64
    assert not image_sends([{"stdout": leader + "\n"}, {"stdout": leader}], leader)
    assert image_sends([{"stdout": leader}, {"stdout": ""}], leader)
    assert not image_sends([{"stdout": ""}], "")  # rank 0 has none: nothing to send (checked elsewhere)
    thin = json.dumps({"how": "layers", "layers_sent": 1, "layers_held": 14, "bytes": 313 << 20, "seconds": 15.2})
    assert image_sent_line(thin, "vllm:1", "spark-1") == (
        "vllm:1 reached spark-1 in 15.2 s: 1 layer(s) it lacked, 313.0 MiB sent; 14 it held"
    )
    whole = json.dumps({"how": "whole", "why": "Docker stores images with 'zfs'", "bytes": 1 << 30, "seconds": 9})
    assert "whole in 9 s (1024.0 MiB sent): Docker stores images with 'zfs'" in image_sent_line(whole, "v", "s")


def docker(*args: str) -> str:
    return subprocess.run(["docker", *args], capture_output=True, text=True, check=True).stdout.strip()


@pytest.fixture
def two_layers(lab_host, tmp_path):
    """An image of two layers on this machine's Docker engine: the lab's node image and a small one on top."""
    from sparkplay.lab.image import ImageRecipe

    base = ImageRecipe().tag
    if subprocess.run(["docker", "image", "inspect", base], capture_output=True, check=False).returncode != 0:
        pytest.skip(f"the lab's node image {base} is not built (make test builds it first)")
    (tmp_path / "Dockerfile").write_text(f"FROM {base}\nRUN head -c 65536 /dev/urandom > /top.bin\n")
    tag = "sparkplay-test-layers:1"
    docker("build", "-q", "-t", tag, str(tmp_path))
    yield tag, base
    subprocess.run(["docker", "rmi", "-f", tag], capture_output=True, check=False)


@pytest.mark.lab
def test_an_archive_of_the_layers_a_peer_lacks_loads_as_the_same_image(two_layers, tmp_path):
    tag, base = two_layers
    root = Path(docker("info", "--format", "{{.DockerRootDir}}"))
    held = set(image.chain_ids(json.loads(docker("image", "inspect", "--format", "{{json .RootFS.Layers}}", base))))
    thin = image.plan(tag, "docker", root, held)
    assert [("split" in x) for x in thin["layers"]][-1] and sum("split" in x for x in thin["layers"]) == 1
    archive = tmp_path / "thin.tar"
    with archive.open("wb") as out:
        sent = image.write_archive(thin, out)
    assert 65536 <= sent < 1 << 20 and archive.stat().st_size < 1 << 20  # the top layer only, not the base
    image_id = docker("image", "inspect", "--format", "{{.Id}}", tag)
    docker("rmi", tag)
    docker("load", "-i", str(archive))
    assert docker("image", "inspect", "--format", "{{.Id}}", tag) == image_id
    # the peer holds all of it now: nothing left to send
    said = image.send(tag, ["docker"], "docker", root)
    assert (said["how"], said["layers_sent"], said["bytes"]) == ("layers", 0, 0)


@pytest.mark.lab
def test_what_cannot_go_by_layers_goes_whole_and_says_why(two_layers):
    tag, _ = two_layers
    image_id = docker("image", "inspect", "--format", "{{.Id}}", tag)
    root = Path(docker("info", "--format", "{{.DockerRootDir}}"))
    said = image.send(tag, ["docker"], "docker", root / "elsewhere")  # a store not where Docker keeps it
    assert said["how"] == "whole" and "FileNotFoundError" in said["why"] and said["bytes"] > 1 << 20
    assert docker("image", "inspect", "--format", "{{.Id}}", tag) == image_id
