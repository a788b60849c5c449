"""scripts/pasted_sweep.py: the sweep over real pasted files counts imports and refusals, and a traceback is a
failure (exit 1), printed."""

from __future__ import annotations

import importlib.util

from sparkplay.recipes.store import catalog
from tests.conftest import PROJECT

spec = importlib.util.spec_from_file_location("pasted_sweep", PROJECT / "scripts" / "pasted_sweep.py")
assert spec and spec.loader
sweep = importlib.util.module_from_spec(spec)
spec.loader.exec_module(sweep)


def test_imports_and_refusals_are_counted_and_exit_zero(tmp_path, capsys):
    (tmp_path / "serve.sh").write_text("docker run --gpus all vllm/vllm-openai:v0.11.2 --model Qwen/Qwen3-8B\n")
    (tmp_path / "notes.txt").write_text("nothing to serve here\n")
    assert sweep.main([str(tmp_path), "--verbose"]) == 0
    out = capsys.readouterr().out
    assert "'imported': 1" in out and "'refused': 1" in out and "imported " in out and "refused " in out


def test_a_traceback_is_printed_and_fails_the_sweep(tmp_path, capsys, monkeypatch):
    (tmp_path / "serve.sh").write_text("vllm serve Qwen/Qwen3-8B\n")

    def broken(*_args, **_kwargs):
        raise KeyError("a bug")

    monkeypatch.setattr(catalog, "read_all", broken)
    assert sweep.main([str(tmp_path)]) == 1
    out = capsys.readouterr()
    assert "traceback" in out.out and "KeyError" in out.err
