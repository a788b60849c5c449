"""The overlay converter and verifier on a small generated safetensors checkpoint."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from sparkplay.nvfp4 import atlas, overlay
from sparkplay.nvfp4.safetensors import read_bytes, read_header
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
    proc = run_cli("overlay", "convert", "--source", str(source), "--output", str(out), "--match", MATCH,
                   "--expect", "6")  # fmt: skip
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


def test_a_conversion_killed_half_way_is_not_complete_and_a_rerun_finishes(source, tmp_path, monkeypatch):
    out = tmp_path / "overlay"
    real = overlay._rewrite_shard
    calls = []

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
    monkeypatch.setattr(overlay, "_rewrite_shard", real)
    result = overlay.convert(source, out, match=MATCH, expect=6)
    assert result.action == "converted" and result.moved_aside is not None  # the half-made one kept aside
    assert overlay.verify(out, expect=6) == []


def test_a_changed_source_manifest_means_convert_again(source, tmp_path):
    out = tmp_path / "overlay"
    (source / ".sparkplay").mkdir()
    (source / ".sparkplay" / "manifest.json").write_text('{"digest": "aaa"}')
    overlay.convert(source, out, match=MATCH, expect=6)
    assert overlay.convert(source, out, match=MATCH, expect=6).action == "already complete"
    (source / ".sparkplay" / "manifest.json").write_text('{"digest": "bbb"}')
    assert overlay.convert(source, out, match=MATCH, expect=6).action == "converted"
