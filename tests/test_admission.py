"""Each engine's memory claim per node, and the admission rule (no lab: the launch plans' shapes, a real GGUF)."""

from __future__ import annotations

from pathlib import Path

import pytest

from sparkplay.admission import GIB, RESERVE, Claim, admit, claims, shortfalls
from sparkplay.engines import registry
from sparkplay.errors import BadInput
from sparkplay.kvcache import kv_per_token

TOTAL = {"spark-a": 121 * GIB, "spark-b": 121 * GIB}


def ranks(argv: list[str], env: dict[str, str] | None = None, hosts: tuple[str, ...] = ("spark-a", "spark-b")) -> list:
    return [
        {"host": h, "role": "leader" if i == 0 else "worker", "argv": argv, "env": env or {}}
        for i, h in enumerate(hosts)
    ]


def test_vllm_claims_its_memory_fraction_of_each_node_and_its_process() -> None:
    found = claims("glm", "vllm", ranks(["serve", "m", "--gpu-memory-utilization", "0.5"]), TOTAL, 40 * GIB)
    assert [c.host for c in found] == ["spark-a", "spark-b"]
    assert found[0].bytes == int(0.5 * 121 * GIB) + registry.spec("vllm").overhead_bytes
    assert "preallocates 0.5 of 121.0 GiB" in found[0].how
    default = claims("glm", "vllm", ranks(["serve", "m"]), TOTAL, 40 * GIB)[0]
    assert default.bytes == int(0.9 * 121 * GIB) + registry.spec("vllm").overhead_bytes  # vLLM's own default


def test_sglang_and_atlas_read_their_own_fraction() -> None:
    sglang = claims("s", "sglang", ranks(["--mem-fraction-static=0.3"]), TOTAL, GIB)[0]
    assert sglang.bytes == int(0.3 * 121 * GIB) + registry.spec("sglang").overhead_bytes
    assert (
        claims("s", "sglang", ranks([]), TOTAL, GIB)[0].bytes
        == int(0.88 * 121 * GIB) + registry.spec("sglang").overhead_bytes
    )
    sparkglm = claims("a", "atlas", ranks([], {"SPARKGLM_GPU_MEMORY_UTILIZATION": "0.6"}), TOTAL, GIB)[0]
    gb10 = claims("a", "atlas", ranks(["serve", "--gpu-memory-utilization", "0.7"]), TOTAL, GIB)[0]
    assert sparkglm.bytes == int(0.6 * 121 * GIB) + registry.spec("atlas").overhead_bytes
    assert gb10.bytes == int(0.7 * 121 * GIB) + registry.spec("atlas").overhead_bytes


def test_a_fraction_engine_whose_weights_do_not_fit_its_budget_is_refused() -> None:
    with pytest.raises(BadInput, match=r"spark-a's share of the weights \(60.0 GiB\) is more than the vllm"):
        claims("big", "vllm", ranks(["--gpu-memory-utilization", "0.4"]), TOTAL, 120 * GIB)


def test_llamacpp_claims_its_share_of_the_weights_and_of_the_kv_cache(tmp_path: Path) -> None:
    from sparkplay.lab import tiny_gguf

    model = tiny_gguf.write(tmp_path / "tiny.gguf")
    per_token = kv_per_token(model)  # read from the header with llama.cpp's own reader
    assert per_token == tiny_gguf.LAYERS * tiny_gguf.HEADS * 2 * (tiny_gguf.HIDDEN // tiny_gguf.HEADS) * 2
    found = claims("tiny", "llamacpp", ranks(["-m", str(model), "-c", "4096"]), TOTAL, 10 * GIB, per_token)
    assert found[0].bytes == 5 * GIB + 4096 * per_token // 2 + registry.spec("llamacpp").overhead_bytes
    assert "of a 4096-token KV cache" in found[0].how
    alone = claims("tiny", "llamacpp", ranks(["-c", "512"], hosts=("spark-a",)), TOTAL, 3 * GIB, None)
    assert alone == [Claim("tiny", "spark-a", 3 * GIB + registry.spec("llamacpp").overhead_bytes, alone[0].how)]


def test_a_recipe_that_fits_on_one_node_but_not_the_other_is_refused_naming_that_node() -> None:
    new = claims("coder", "vllm", ranks(["--gpu-memory-utilization", "0.3"]), TOTAL, GIB)
    admitted = [Claim("chat", "spark-b", 70 * GIB, "vllm preallocates ...")]  # only on spark-b
    free = {"spark-a": 110 * GIB, "spark-b": 40 * GIB}
    short = shortfalls(new, admitted, free, TOTAL)
    assert [s.host for s in short] == ["spark-b"]
    with pytest.raises(BadInput) as refused:
        admit(new, admitted, free, TOTAL)
    line = str(refused.value)
    assert "coder does not fit on spark-b: it claims 39.3 GiB" in line and "admitted there: chat 70.0 GiB" in line
    assert "MemAvailable 40.0 GiB" in line and "short by" in line and "spark-a" not in line.split("Nothing")[0]
    assert "--force-admit" in line and "Nothing was changed" in line


def test_claims_admitted_before_count_even_when_the_memory_is_still_free() -> None:
    """A deployment admitted but still loading has not taken its memory: MemAvailable alone would admit both."""
    new = [Claim("b", "spark-a", 60 * GIB, "x")]
    admitted = [Claim("a", "spark-a", 60 * GIB, "y")]
    free = {"spark-a": 117 * GIB}
    assert shortfalls(new, admitted, free, TOTAL)[0].headroom == 121 * GIB - RESERVE - 60 * GIB
    assert shortfalls(new, [], free, TOTAL) == []
    # the same recipe again (a re-deploy) does not count against itself
    assert shortfalls(new, [Claim("b", "spark-a", 60 * GIB, "y")], free, TOTAL) == []


def test_the_override_admits_and_says_what_it_let_through() -> None:
    new = [Claim("b", "spark-a", 200 * GIB, "x")]
    lines = admit(new, [], {"spark-a": 100 * GIB}, TOTAL, force=True)
    assert len(lines) == 1 and "b does not fit on spark-a" in lines[0]
    assert admit([Claim("c", "spark-a", GIB, "x")], [], {"spark-a": 100 * GIB}, TOTAL) == []


def test_an_engine_with_no_known_claim_is_refused() -> None:
    with pytest.raises(BadInput, match="engine 'nosuch' is not one sparkplay knows"):
        claims("t", "nosuch", ranks([]), TOTAL, GIB)
