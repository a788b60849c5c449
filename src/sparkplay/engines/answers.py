"""Whether a deployment's answer can be held to the one it gave after its deploy (the watchdog's answer check).

A fixed prompt at temperature 0 gives the same tokens every time from an engine that computes one request
alone the same way each start: llama.cpp does (its CPU and CUDA kernels are fixed at build). Engines that
batch requests together or pick their GPU kernels at start (vLLM, SGLang, TensorRT-LLM, Atlas) may give
another, equally right, answer after a restart; speculative decoding (a draft model, MTP, n-grams) can change
the tokens accepted. Those are exempt, and status says so, rather than crying wolf after every restart.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sparkplay.engines import registry

# flags that turn on speculative decoding, in any engine's spelling
SPECULATIVE = (
    "--speculative-config",
    "--speculative-algorithm",
    "--speculative-draft-model-path",
    "--spec-type",
    "--model-draft",
    "-md",
    "--draft-model",
)


def check(engine: str, argvs: Sequence[Sequence[str]]) -> dict[str, Any]:
    """{mode: exact|exempt, why}: how the watchdog holds this deployment's answers."""
    flags = {a.split("=", 1)[0] for argv in argvs for a in argv}
    speculative = sorted(flags & set(SPECULATIVE))
    if speculative:
        return {"mode": "exempt", "why": f"speculative decoding ({speculative[0]}) may accept other tokens"}
    if not registry.spec(engine).answers_exact:
        return {
            "mode": "exempt",
            "why": f"{engine} batches requests and picks its kernels at start: an answer may differ after a restart",
        }
    return {"mode": "exact", "why": None}
