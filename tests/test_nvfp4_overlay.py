"""The overlay converter and verifier on a small generated safetensors checkpoint."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pytest

from sparkplay.nodetools import app
from sparkplay.nvfp4 import atlas, outputs, overlay
from sparkplay.nvfp4.safetensors import read_bytes, read_header
from sparkplay.nvfp4.testmodel import make_checkpoint
from tests.conftest import run_cli
from tests.nvfp4_fixture import MATCH, make_source


@pytest.fixture
def source(tmp_path: Path) -> Path:
    return make_source(tmp_path / "ckpt")


def test_convert_verify_and_layout(source, tmp_path):
    out = tmp_path / "overlay"
    result = overlay.convert(source, out, match=MATCH, expect=6)
    assert result.action == "converted" and result.converted == 6
    assert overlay.verify(out, expect=6) == []
    # the untouched shard and files are hardlinks to the source
    assert (out / "model-00003-of-00003.safetensors").stat().st_ino == (
        source / "model-00003-of-00003.safetensors"
    ).stat().st_ino
    assert (out / "config.json").read_text() == (source / "config.json").read_text()
    header, _, _ = read_header(out / "model-00001-of-00003.safetensors")
    name = "model.language_model.layers.45.mlp.experts.0.down_proj"
    assert (header[f"{name}.weight"].dtype, header[f"{name}.weight"].shape) == ("U8", (32, 32))
    assert (header[f"{name}.weight_scale"].dtype, header[f"{name}.weight_scale"].shape) == ("F8_E4M3", (32, 4))
    assert (header[f"{name}.weight_scale_2"].dtype, header[f"{name}.weight_scale_2"].shape) == ("F32", ())
    # other tensors carried byte-exact, converted ones bit-exact with the quantiser
    src_header = read_header(source / "model-00001-of-00003.safetensors")[0]
    assert read_bytes(out / "model-00001-of-00003.safetensors", header["model.embed_tokens.weight"]) == read_bytes(
        source / "model-00001-of-00003.safetensors", src_header["model.embed_tokens.weight"]
    )
    raw = read_bytes(source / "model-00001-of-00003.safetensors", src_header[f"{name}.weight"])
    qt = atlas.quantise(atlas.bf16_to_f32(np.frombuffer(raw, "<u2").reshape(32, 64)))
    assert read_bytes(out / "model-00001-of-00003.safetensors", header[f"{name}.weight"]) == qt.weight.tobytes()
    assert (
        read_bytes(out / "model-00001-of-00003.safetensors", header[f"{name}.weight_scale"])
        == qt.weight_scale.tobytes()
    )
    # the index names every tensor once, in the shard that holds it, with the new total size
    index = json.loads((out / overlay.INDEX).read_text())
    assert index["weight_map"][f"{name}.weight_scale_2"] == "model-00001-of-00003.safetensors"
    assert index["metadata"]["total_size"] == sum(
        i.nbytes
        for f in ("model-00001", "model-00002", "model-00003")
        for i in read_header(out / f"{f}-of-00003.safetensors")[0].values()
    )
    assert not (out / overlay.PARTIAL_DIR).exists()


def test_rerun_is_skipped_and_an_old_overlay_is_moved_aside(source, tmp_path):
    out = tmp_path / "overlay"
    overlay.convert(source, out, match=MATCH, expect=6)
    assert overlay.convert(source, out, match=MATCH, expect=6).action == "already complete"
    receipt = json.loads((out / overlay.RECEIPT).read_text())
    receipt["converter_version"] = "0.0.0-older"
    (out / overlay.RECEIPT).write_text(json.dumps(receipt))
    result = overlay.convert(source, out, match=MATCH, expect=6)
    assert result.action == "converted" and result.moved_aside is not None
    assert json.loads((result.moved_aside / overlay.RECEIPT).read_text())["converter_version"] == "0.0.0-older"
    assert overlay.verify(out) == []


def test_verify_finds_a_damaged_payload_a_changed_link_and_a_missing_receipt(source, tmp_path):
    out = tmp_path / "overlay"
    overlay.convert(source, out, match=MATCH, expect=6)
    info = read_header(out / "model-00002-of-00003.safetensors")[0][
        "model.language_model.layers.45.mlp.experts.1.up_proj.weight"
    ]
    path = out / "model-00002-of-00003.safetensors"
    data = bytearray(path.read_bytes())
    data[info.start + 3] ^= 0x10
    path.write_bytes(bytes(data))
    (out / "config.json").unlink()
    problems = overlay.verify(out)
    bad = "model.language_model.layers.45.mlp.experts.1.up_proj.weight"
    assert f"model-00002-of-00003.safetensors: {bad} does not match its receipt hash" in problems
    assert "config.json: linked file missing" in problems
    (out / overlay.RECEIPT).unlink()
    assert "the overlay is not complete" in overlay.verify(out)[0]


def test_wrong_count_or_dtype_is_refused_and_writes_nothing(source, tmp_path):
    out = tmp_path / "overlay"
    with pytest.raises(overlay.OverlayError, match=r"6 tensors match .* expected 864"):
        overlay.convert(source, out, match=MATCH, expect=864)
    with pytest.raises(overlay.OverlayError, match="not a 2-D BF16 matrix"):
        overlay.convert(
            source, out, match=r"^model\.(embed_tokens|language_model\.layers\.45\.norm)\.weight$", expect=None
        )
    assert not out.exists()


def test_cli_convert_and_verify(source, tmp_path):
    out = tmp_path / "overlay"
    proc = run_cli(
        "overlay", "convert", "--source", str(source), "--output", str(out), "--match", MATCH, "--expect", "6"
    )
    assert proc.returncode == 0, proc.stderr
    assert "converted, 6 matrices" in proc.stdout
    check = run_cli("overlay", "verify", str(out), "--expect", "6")
    assert check.returncode == 0 and "verified" in check.stdout
    bad = run_cli("overlay", "verify", str(out), "--expect", "864")
    assert bad.returncode == 1 and "6 matrices converted, expected 864" in bad.stdout


def test_modelopt_scheme_shares_each_experts_gate_up_scale(source, tmp_path):
    out = tmp_path / "overlay-modelopt"
    overlay.convert(source, out, scheme="modelopt", match=MATCH, expect=6)
    assert overlay.verify(out, expect=6) == []
    receipt = json.loads((out / overlay.RECEIPT).read_text())
    scales = {name: entry["scale2"] for name, entry in receipt["converted"].items()}
    for e in range(2):
        gate, up, down = (
            f"model.language_model.layers.45.mlp.experts.{e}.{p}_proj.weight" for p in ("gate", "up", "down")
        )
        assert scales[gate] == scales[up]
        assert scales[down] != scales[gate]  # down keeps its own
    assert receipt["scheme"] == "modelopt"


def test_overlay_loads_with_the_safetensors_library(source, tmp_path):
    from safetensors import safe_open

    out = tmp_path / "overlay"
    overlay.convert(source, out, match=MATCH, expect=6)
    name = "model.language_model.layers.45.mlp.experts.0.down_proj"
    with safe_open(str(out / "model-00001-of-00003.safetensors"), framework="numpy") as fh:
        kinds = {key: (fh.get_slice(key).get_dtype(), fh.get_slice(key).get_shape()) for key in fh.keys()}  # noqa: SIM118
        assert fh.get_tensor(f"{name}.weight").dtype == np.uint8  # numpy has no F8 dtype to load the scales into
        assert fh.get_tensor("model.embed_tokens.weight").tolist()[0] == [0.0, 1.0, 2.0, 3.0]
    assert kinds[f"{name}.weight"] == ("U8", [32, 32])
    assert kinds[f"{name}.weight_scale"] == ("F8_E4M3", [32, 4])
    assert kinds[f"{name}.weight_scale_2"] == ("F32", [])


def test_verify_catches_a_broken_index_and_a_missing_shard(source, tmp_path):
    out = tmp_path / "overlay"
    overlay.convert(source, out, match=MATCH, expect=6)
    index = json.loads((out / overlay.INDEX).read_text())
    index["weight_map"]["ghost.weight"] = "model-00001-of-00003.safetensors"
    (out / overlay.INDEX).write_text(json.dumps(index))
    assert any("index and the shard headers disagree" in p for p in overlay.verify(out))
    (out / "model-00002-of-00003.safetensors").unlink()
    assert any(p.startswith("model-00002-of-00003.safetensors:") for p in overlay.verify(out))


def test_a_conversion_killed_half_way_resumes_from_its_partial_receipts(source, tmp_path, monkeypatch):
    out = tmp_path / "overlay"
    real = overlay._rewrite_shard
    calls: list[str] = []

    def dies_on_the_second_shard(*args, **kwargs):
        calls.append(args[0].name)
        if len(calls) == 2:
            raise KeyboardInterrupt  # the process is killed mid-way
        return real(*args, **kwargs)

    monkeypatch.setattr(overlay, "_rewrite_shard", dies_on_the_second_shard)
    with pytest.raises(KeyboardInterrupt):
        overlay.convert(source, out, match=MATCH, expect=6)
    assert not (out / overlay.RECEIPT).exists()
    assert "not complete" in overlay.verify(out)[0]
    calls.clear()
    result = overlay.convert(source, out, match=MATCH, expect=6)
    assert result.action == "resumed" and result.moved_aside is None
    assert calls == ["model-00002-of-00003.safetensors"]  # the finished first shard was kept
    assert overlay.verify(out, expect=6) == []


def test_a_partial_shard_whose_source_changed_is_converted_again(source, tmp_path, monkeypatch):
    out = tmp_path / "overlay"
    real = overlay._rewrite_shard
    monkeypatch.setattr(
        overlay,
        "_rewrite_shard",
        lambda *a, **k: (
            (_ for _ in ()).throw(KeyboardInterrupt) if a[0].name.startswith("model-00002") else real(*a, **k)
        ),
    )
    with pytest.raises(KeyboardInterrupt):
        overlay.convert(source, out, match=MATCH, expect=6)
    monkeypatch.setattr(overlay, "_rewrite_shard", real)
    replace_with_other_weights(source, "model-00001-of-00003.safetensors", tmp_path)
    overlay.convert(source, out, match=MATCH, expect=6)
    assert_overlay_is_fresh(source, out, tmp_path)


def replace_with_other_weights(source: Path, shard: str, tmp_path: Path) -> None:
    """The shard swapped for the same shard of a checkpoint made with another seed (same names, same size)."""
    other = make_checkpoint(tmp_path / f"other-{shard}", experts=2, seed=99)
    before = (source / shard).stat().st_size
    shutil.copyfile(other / shard, source / shard)
    assert (source / shard).stat().st_size == before


def assert_overlay_is_fresh(source: Path, out: Path, tmp_path: Path) -> None:
    """The overlay holds exactly what a conversion of the source as it is now gives."""
    fresh = tmp_path / "fresh"
    shutil.rmtree(fresh, ignore_errors=True)
    overlay.convert(source, fresh, match=MATCH, expect=6)
    for shard in ("model-00001-of-00003.safetensors", "model-00002-of-00003.safetensors"):
        assert (out / shard).read_bytes() == (fresh / shard).read_bytes(), shard
    assert overlay.verify(out, expect=6) == []


@pytest.mark.parametrize(
    "shard",
    ["model-00001-of-00003.safetensors", "model-00002-of-00003.safetensors", "model-00003-of-00003.safetensors"],
)
def test_a_replaced_source_shard_is_seen_and_the_overlay_rebuilt(source, tmp_path, shard):
    out = tmp_path / "overlay"
    overlay.convert(source, out, match=MATCH, expect=6)
    replace_with_other_weights(source, shard, tmp_path)
    result = overlay.convert(source, out, match=MATCH, expect=6)
    assert result.action == "converted" and f"{shard} changed in the source" in result.reason
    assert_overlay_is_fresh(source, out, tmp_path)
    if shard.startswith("model-00003"):  # a linked file: the overlay's link is the new file
        assert (out / shard).read_bytes() == (source / shard).read_bytes()


def test_a_touched_but_unchanged_source_is_hashed_not_rebuilt(source, tmp_path):
    out = tmp_path / "overlay"
    overlay.convert(source, out, match=MATCH, expect=6)
    os.utime(source / "model-00001-of-00003.safetensors")  # mtime moves, bytes do not
    assert overlay.convert(source, out, match=MATCH, expect=6).action == "already complete"


def test_an_edited_source_index_means_rebuild(source, tmp_path):
    out = tmp_path / "overlay"
    overlay.convert(source, out, match=MATCH, expect=6)
    index = json.loads((source / overlay.INDEX).read_text())
    index["metadata"]["total_size"] = 12345
    (source / overlay.INDEX).write_text(json.dumps(index))
    assert overlay.convert(source, out, match=MATCH, expect=6).action == "converted"


def test_a_file_added_to_the_source_means_rebuild(source, tmp_path):
    out = tmp_path / "overlay"
    overlay.convert(source, out, match=MATCH, expect=6)
    (source / "tokenizer.json").write_text("{}")
    result = overlay.convert(source, out, match=MATCH, expect=6)
    assert result.action == "converted" and (out / "tokenizer.json").exists()


def _index(source: Path) -> dict:
    return json.loads((source / overlay.INDEX).read_text())


def _truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[:-10])


BAD_SOURCES = {
    "shard with experts missing": (lambda s: (s / "model-00002-of-00003.safetensors").unlink(), "is missing"),
    "shard without experts missing": (lambda s: (s / "model-00003-of-00003.safetensors").unlink(), "is missing"),
    "shard truncated": (lambda s: _truncate(s / "model-00001-of-00003.safetensors"), "not a whole safetensors"),
    "shard without experts truncated": (
        lambda s: _truncate(s / "model-00003-of-00003.safetensors"),
        "not a whole safetensors",
    ),
    "index not JSON": (lambda s: (s / overlay.INDEX).write_text("{not json"), "not a readable safetensors index"),
    "index without weight_map": (lambda s: (s / overlay.INDEX).write_text('{"metadata": {}}'), "has no weight_map"),
    "index weight_map a list": (lambda s: (s / overlay.INDEX).write_text('{"weight_map": []}'), "has no weight_map"),
    "tensor named but absent": (
        lambda s: (s / overlay.INDEX).write_text(
            json.dumps({"weight_map": {**_index(s)["weight_map"], "ghost.weight": "model-00003-of-00003.safetensors"}})
        ),
        "the index names ghost.weight in model-00003-of-00003.safetensors, which does not hold it",
    ),
    "shard outside the checkpoint": (
        lambda s: (s / overlay.INDEX).write_text(json.dumps({"weight_map": {"x.weight": "../elsewhere.safetensors"}})),
        "which is not a file inside the checkpoint",
    ),
    "not a folder": (lambda s: shutil.rmtree(s) or s.write_text("x"), "is not a checkpoint folder"),
}


@pytest.mark.parametrize("case", list(BAD_SOURCES))
def test_a_bad_source_is_one_line_before_anything_is_written(source, tmp_path, case):
    damage, says = BAD_SOURCES[case]
    damage(source)
    out = tmp_path / "overlay"
    with pytest.raises(overlay.OverlayError) as caught:
        overlay.convert(source, out, match=MATCH, expect=6)
    assert says in str(caught.value) and "\n" not in str(caught.value)
    assert not out.exists()


def test_cli_names_a_bad_source_and_exits_2(source, tmp_path):
    (source / "model-00002-of-00003.safetensors").unlink()
    out = tmp_path / "overlay"
    proc = run_cli(
        "overlay", "convert", "--source", str(source), "--output", str(out), "--match", MATCH, "--expect", "6"
    )
    assert proc.returncode == 2 and "model-00002-of-00003.safetensors, named by the index, is missing" in proc.stderr
    assert "Traceback" not in proc.stderr and not out.exists()
    argv = [
        sys.executable,
        "-m",
        "sparkplay.nvfp4",
        "convert",
        "--source",
        str(source),
        "--output",
        str(out),
        "--match",
        MATCH,
        "--expect",
        "6",
    ]
    node = subprocess.run(argv, capture_output=True, text=True, check=False)
    assert node.returncode == 2 and "is missing" in node.stderr and "Traceback" not in node.stderr


def test_two_runs_in_one_second_move_aside_under_distinct_names(source, tmp_path, monkeypatch):
    out = tmp_path / "overlay"
    frozen = datetime(2026, 12, 1, 4, 0, 0, 123456, tzinfo=UTC)
    monkeypatch.setattr(outputs, "datetime", type("Frozen", (), {"now": staticmethod(lambda tz=None: frozen)}))
    names = []
    for _ in range(3):
        out.mkdir()
        (out / "x").write_text("not an overlay")
        names.append(outputs.move_aside(out).name)
    assert len(set(names)) == 3 and names[0] == "overlay.old-20261201T040000.123456Z"


def test_older_moved_aside_overlays_are_pruned_but_a_foreign_one_is_kept(source, tmp_path):
    out = tmp_path / "overlay"
    foreign = tmp_path / "overlay.old-00000000T000000.000000Z"  # the user's own, named like one
    foreign.mkdir()
    (foreign / "notes.txt").write_text("mine")
    overlay.convert(source, out, match=MATCH, expect=6)
    for _ in range(3):  # an older converter made each one: every run moves one aside
        receipt = json.loads((out / overlay.RECEIPT).read_text())
        receipt["converter_version"] = "0.0.0-older"
        (out / overlay.RECEIPT).write_text(json.dumps(receipt))
        result = overlay.convert(source, out, match=MATCH, expect=6, keep_moved=1)
    aside = sorted(p.name for p in tmp_path.glob("overlay.old-*"))
    assert len(aside) == 2 and foreign.name in aside and result.moved_aside.name in aside
    assert foreign in result.kept and (foreign / "notes.txt").exists()


def test_verify_catches_a_flip_in_the_middle_of_a_linked_shard(source, tmp_path):
    out = tmp_path / "overlay"
    big = source / "model-00003-of-00003.safetensors"
    overlay.convert(source, out, match=MATCH, expect=6)
    data = bytearray(big.read_bytes())
    middle = len(data) // 2
    data[middle] ^= 0x01
    with big.open("r+b") as fh:  # in place: the overlay's hardlink is the same file
        fh.seek(middle)
        fh.write(bytes([data[middle]]))
    assert "model-00003-of-00003.safetensors: linked file changed since the overlay was made" in overlay.verify(out)


def test_verify_checks_the_index_hash_and_a_missing_weight_map(source, tmp_path):
    out = tmp_path / "overlay"
    overlay.convert(source, out, match=MATCH, expect=6)
    index = json.loads((out / overlay.INDEX).read_text())
    index["metadata"]["total_size"] += 1
    (out / overlay.INDEX).write_text(json.dumps(index, indent=2) + "\n")
    assert any("was edited since the overlay was made" in p for p in overlay.verify(out))
    (out / overlay.INDEX).write_text('{"metadata": {}}')
    assert any("missing or unreadable" in p for p in overlay.verify(out))


def test_linked_files_are_proven_by_the_checkpoints_verified_manifest(source, tmp_path):
    """sparkplay-ckpt's own manifest and marker (the real tool): unchanged linked files need no re-hash."""
    tool = app("ckpt")
    done = subprocess.run(
        [sys.executable, tool, "manifest", str(source), "--revision", "r1"], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    out = tmp_path / "overlay"
    overlay.convert(source, out, match=MATCH, expect=6)
    receipt = json.loads((out / overlay.RECEIPT).read_text())
    assert {s["proof"] for s in receipt["sources"].values()} == {"manifest"}
    report = overlay.verify_report(out)
    assert report.problems == [] and report.links_proven == 2 and report.links_hashed == 0
    big = source / "model-00003-of-00003.safetensors"
    with big.open("r+b") as fh:  # a flip in the middle: the file is no longer what the manifest hashed
        fh.seek(big.stat().st_size // 2)
        byte = fh.read(1)
        fh.seek(-1, os.SEEK_CUR)
        fh.write(bytes([byte[0] ^ 0x80]))
    report = overlay.verify_report(out)
    assert report.links_hashed == 1 and any("model-00003" in p for p in report.problems)
    proc = run_cli("overlay", "verify", str(out))
    assert proc.returncode == 1
