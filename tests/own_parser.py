"""What the engines' own-parser suites share (tests/test_vllm_parser.py, tests/test_sglang_parser.py): the
engine's checker run once in its virtualenv over every rank's words, and each recipe's verdicts by rank."""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

Argvs = list[tuple[int, list[str]]]


def planned(doc: dict[str, Any]) -> dict[str, Any]:
    """The plan on the smallest Spark cluster the recipe's parallelism fits (one GPU a node). What the recipe
    asks of the boundary is allowed, and any image trusted: the engine's parser is the check here."""
    from sparkplay import boundary
    from sparkplay.engines.plan import Options, build
    from sparkplay.errors import BadInput
    from tests.test_engines import ROOT, nodes

    allowed = tuple(r.name for r in boundary.requests(doc))
    refusals = []
    for count in range(1, 9):
        try:
            return build(doc, nodes(count), Options(model_root=ROOT, allow=allowed, trusted_images=("*",)))
        except BadInput as error:
            refusals.append(f"{count}: {error}")
    raise AssertionError("no node count plans it: " + "; ".join(refusals))


def engine_python(venv: Path, engine: str, target: str, script: str) -> Path:
    """The virtualenv's Python; missing, the test fails saying which make target builds it."""
    python = venv / "bin" / "python"
    if not python.exists():
        pytest.fail(f"{venv} has no {engine}: `make {target}` builds it ({script})")
    return python


def check(python: Path, checker: Path, argvs: list[list[str]], env: Mapping[str, str]) -> list[str | None]:
    """The engine's answer for each argv (None: accepted), from one run of its checker."""
    answer = subprocess.run(
        [python, checker],
        input=json.dumps(argvs),
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
        env={"PATH": "/usr/bin:/bin", "HF_HUB_OFFLINE": "1", **env},
    )
    assert answer.returncode == 0, answer.stderr[-3000:]
    return json.loads(answer.stdout)


def said_not_to_start(doc: dict[str, Any]) -> list[str]:
    """The files the import said the engine will not find (a flag naming a file in a volume sparkplay does
    not mount): a refusal naming one of them is the import's warning come true, not a wrong plan."""
    said = " ".join(str(n.get("detail", "")) for n in doc.get("provenance") or [])
    return re.findall(r"(/\S+): a file in the volume \S+, which sparkplay does not mount", said)


def assert_accepted(
    key: str, by_rank: Mapping[int, str | None], engine: str, program: str, expected: Sequence[str] = ()
) -> None:
    """Some rank of KEY's plan runs PROGRAM, and ENGINE's parser refused none but for a file in EXPECTED."""
    assert by_rank, f"{key}: no rank runs {program}"
    refused = {rank: why for rank, why in by_rank.items() if why and not any(path in why for path in expected)}
    assert refused == {}, f"{key}: {engine} refuses rank(s) {refused}"


def verdicts(
    recipes: Mapping[str, dict[str, Any]],
    argvs_of: Callable[[dict[str, Any]], Argvs],
    answer: Callable[[list[list[str]]], list[str | None]],
) -> dict[str, dict[int, str | None]]:
    """Recipe -> rank -> the engine's refusal (None: accepted), every rank of every plan asked in one run."""
    flat = [(key, rank, argv) for key, doc in recipes.items() for rank, argv in argvs_of(doc)]
    answers = answer([argv for _, _, argv in flat])
    found: dict[str, dict[int, str | None]] = {key: {} for key in recipes}
    for (key, rank, _), why in zip(flat, answers, strict=True):
        found[key][rank] = why
    return found
