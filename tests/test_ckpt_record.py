"""Rank 0's source of truth (sparkplay-ckpt's records, record.py): made once, never re-blessed.

Local folders only, with the tool as shipped; tests/test_models_lab.py corrupts rank 0's copy on the lab and
checks the next `up` refuses before anything is mirrored.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from tests.test_ckpt_tool import manifest_of, tool


@pytest.fixture
def ckpt(tmp_path: Path) -> Path:
    root = tmp_path / "models" / "demo"
    (root / "sub").mkdir(parents=True)
    (root / "model.gguf").write_bytes(os.urandom(4096))
    (root / "sub" / "tokenizer.json").write_bytes(b'{"v": 1}')
    return root


@pytest.fixture
def records(tmp_path: Path) -> Path:
    return tmp_path / "records"


def first(ckpt: Path, records: Path, revision: str = "staged") -> dict:
    rc, out, err = tool("manifest", str(ckpt), "--revision", revision, "--records", str(records), "--how", "staged")
    assert rc == 0, err
    return out


def flip(path: Path, at: int = 100) -> None:
    data = bytearray(path.read_bytes())
    data[at] ^= 0xFF
    path.write_bytes(bytes(data))


def test_the_first_verification_is_recorded_outside_the_folder_root_only(ckpt, records):
    out = first(ckpt, records)
    assert out["how"] == "staged" and out["replaced"] is None
    kept = json.loads(Path(out["record"]).read_text())
    assert kept["manifest"] == manifest_of(ckpt) and kept["revision"] == "staged" and kept["dir"] == str(ckpt)
    assert stat.S_IMODE(records.stat().st_mode) == 0o700 and stat.S_IMODE(Path(out["record"]).stat().st_mode) == 0o600
    assert not Path(out["record"]).is_relative_to(ckpt)
    status = tool("status", str(ckpt), "--revision", "staged", "--records", str(records))[1]
    assert status["complete"] and status["recorded"]


def test_a_changed_copy_is_refused_naming_the_file_and_nothing_is_marked(ckpt, records):
    first(ckpt, records)
    flip(ckpt / "model.gguf")
    status = tool("status", str(ckpt), "--revision", "staged", "--records", str(records))[1]
    assert not status["complete"] and "model.gguf" in status["why"]
    rc, out, _ = tool("manifest", str(ckpt), "--revision", "staged", "--records", str(records))
    assert rc == 3 and out["refused"] and out["bad"] == {"model.gguf": "sha256"}
    assert not (ckpt / ".sparkplay/complete.json").exists()  # no marker: no sync starts from this copy
    # the record is untouched: a second run refuses the same way
    assert tool("manifest", str(ckpt), "--revision", "staged", "--records", str(records))[0] == 3


@pytest.mark.parametrize(
    ("damage", "why"),
    [
        (lambda c: (c / "model.gguf").write_bytes((c / "model.gguf").read_bytes()[:1000]), "size"),  # truncated
        (lambda c: (c / "sub/tokenizer.json").unlink(), "missing"),
        (lambda c: (c / "extra.bin").write_bytes(b"x"), "not in the manifest"),
        (lambda c: ((c / "model.gguf").unlink(), (c / "model.gguf").symlink_to("sub/tokenizer.json")), "type"),
    ],
    ids=["truncated", "removed", "added", "made-a-link"],
)
def test_every_kind_of_change_is_refused(ckpt, records, damage, why):
    first(ckpt, records)
    damage(ckpt)
    rc, out, _ = tool("manifest", str(ckpt), "--revision", "staged", "--records", str(records))
    assert rc == 3 and why in out["bad"].values()


def test_a_forged_folder_manifest_and_marker_do_not_pass_for_the_record(ckpt, records):
    """Whoever changes the bytes can rewrite the folder's own manifest and marker: the record is not there."""
    first(ckpt, records)
    flip(ckpt / "model.gguf")
    assert tool("manifest", str(ckpt), "--revision", "staged")[0] == 0  # re-hashed without records: a new truth
    assert tool("status", str(ckpt), "--revision", "staged")[1]["complete"]  # the folder vouches for itself
    status = tool("status", str(ckpt), "--revision", "staged", "--records", str(records))[1]
    assert not status["complete"] and "recorded at its first verification" in status["why"]
    rc, out, _ = tool("verify", str(ckpt), "--full", "--records", str(records))
    assert rc == 3 and out["bad"] == {"model.gguf": "sha256"}


def test_the_same_bytes_touched_are_verified_again_not_hashed_anew(ckpt, records):
    out = first(ckpt, records)
    os.utime(ckpt / "model.gguf", ns=(0, 0))  # the marker is void, the bytes are the same
    (ckpt / ".sparkplay/manifest.json").write_text("{}")  # and the folder's manifest lost
    rc, again, err = tool("manifest", str(ckpt), "--revision", "staged", "--records", str(records))
    assert rc == 0 and again["reverified"] and again["recorded_at"] == out["recorded_at"], err
    assert manifest_of(ckpt) == json.loads(Path(out["record"]).read_text())["manifest"]
    assert tool("status", str(ckpt), "--revision", "staged", "--records", str(records))[1]["complete"]


def test_accept_takes_the_new_bytes_and_keeps_the_old_record(ckpt, records):
    out = first(ckpt, records)
    flip(ckpt / "model.gguf")
    rc, accepted, err = tool("manifest", str(ckpt), "--revision", "staged", "--records", str(records), "--accept")
    assert rc == 0 and accepted["how"] == "accepted" and accepted["changed"] == {"model.gguf": "sha256"}, err
    assert Path(accepted["replaced"]).is_file() and accepted["replaced"] != out["record"]
    assert tool("status", str(ckpt), "--revision", "staged", "--records", str(records))[1]["complete"]


def test_a_new_revision_is_a_new_record(ckpt, records):
    first(ckpt, records, "r1")
    flip(ckpt / "model.gguf")
    rc, out, err = tool("manifest", str(ckpt), "--revision", "r2", "--records", str(records))
    assert rc == 0 and out["how"] == "new revision" and out["previous_revision"] == "r1", err
    assert tool("status", str(ckpt), "--revision", "r2", "--records", str(records))[1]["recorded"]


def test_a_copy_marked_before_records_is_adopted_once(ckpt, records):
    assert tool("manifest", str(ckpt), "--revision", "staged")[0] == 0
    assert tool("status", str(ckpt), "--revision", "staged", "--records", str(records))[1]["recorded"] is False
    rc, out, err = tool("record", str(ckpt), "--revision", "staged", "--records", str(records))
    assert rc == 0 and out["changed"], err
    assert tool("record", str(ckpt), "--revision", "staged", "--records", str(records))[1]["changed"] is False
    flip(ckpt / "model.gguf")
    assert tool("manifest", str(ckpt), "--revision", "staged", "--records", str(records))[0] == 3


def test_a_copy_not_complete_is_not_adopted(ckpt, records):
    assert tool("manifest", str(ckpt), "--revision", "staged")[0] == 0
    flip(ckpt / "model.gguf")
    rc, _, err = tool("record", str(ckpt), "--revision", "staged", "--records", str(records))
    assert rc == 1 and "not complete" in err and not records.exists()


@pytest.mark.parametrize("bad", ["not json", '{"format": 1, "dir": "/elsewhere", "manifest": {}}', "[]"])
def test_a_damaged_record_is_an_error_that_names_it(ckpt, records, bad):
    out = first(ckpt, records)
    Path(out["record"]).write_text(bad)
    rc, _, err = tool("manifest", str(ckpt), "--revision", "staged", "--records", str(records))
    assert rc == 1 and out["record"] in err and "remove it" in err


def test_a_records_folder_that_is_a_link_is_refused(ckpt, records, tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    records.symlink_to(elsewhere)
    rc, _, err = tool("manifest", str(ckpt), "--revision", "staged", "--records", str(records))
    assert rc == 1 and "not a folder of this user's" in err and list(elsewhere.iterdir()) == []


def test_the_hubs_bookkeeping_is_not_part_of_the_checkpoint(ckpt, records):
    """huggingface_hub rewrites .cache/ when it fetches a file anew: the model's bytes are what is recorded."""
    meta = ckpt / ".cache/huggingface/download"
    meta.mkdir(parents=True)
    (meta / "model.gguf.metadata").write_text("abc\nnot-a-sha\n1.0\n")
    first(ckpt, records)
    assert all(not e["path"].startswith(".cache") for e in manifest_of(ckpt)["files"])
    (meta / "model.gguf.metadata").write_text("abc\nnot-a-sha\n2.0\n")
    assert tool("status", str(ckpt), "--revision", "staged", "--records", str(records))[1]["complete"]
