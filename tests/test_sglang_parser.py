"""SGLang's own argument parser on the argv every SGLang plan gives each rank (make test-sglang).

Real: the `sglang` package from the index (scripts/sglang_venv.py, in .cache/sglang) parses each rank's
`python3 -m sglang.launch_server ...` words exactly as its server does (tests/sglang/argv_check.py); nothing is
loaded. The plans are every SGLang recipe here: the catalog's, the registry fixtures and the pasted commands,
compose files and pages that import as SGLang, each planned on as many Spark nodes as its parallelism asks. A
flag this SGLang does not know, a value it refuses, or a flag sparkplay adds per rank in a form SGLang rejects
fails here without a GPU.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from sparkplay import importing
from sparkplay.errors import SparkplayError
from sparkplay.recipes.store import catalog
from tests import own_parser
from tests.conftest import PROJECT
from tests.own_parser import planned

pytestmark = pytest.mark.sglang

VENV = PROJECT / ".cache" / "sglang"
CHECK = PROJECT / "tests" / "sglang" / "argv_check.py"
FIXTURES = PROJECT / "tests" / "fixtures"
MODULE = ["-m", "sglang.launch_server"]


def sglang_recipes() -> dict[str, dict[str, Any]]:
    """Every recipe here whose engine is SGLang (each source's every launch, --pick by --pick)."""
    found = {}
    for name in catalog.names(catalog.catalog_dir(PROJECT)):
        doc = catalog.load_for_use(catalog.catalog_dir(PROJECT), name)
        if doc["engine"]["name"] == "sglang":
            found[f"catalog:{name}"] = doc
    for path in sorted(p for p in FIXTURES.rglob("*") if p.is_file()):
        for pick in range(1, 9):
            try:
                docs = importing.import_sources(str(path), pick=pick)
            except SparkplayError:
                break  # a refusal (the importer's own tests hold those), or no Nth launch
            for doc in docs:
                if doc["engine"]["name"] == "sglang":
                    found[f"{path.relative_to(FIXTURES)}#{pick}"] = doc
            if "launch" not in docs[0]["source"]:
                break  # a recipe file holds one launch; --pick chooses among a page's or a script's
    return found


def server_argvs(deployment: dict[str, Any]) -> list[tuple[int, list[str]]]:
    """Each rank's words after `python3 -m sglang.launch_server`."""
    return [(r["rank"], r["argv"][2:]) for r in deployment["ranks"] if r["argv"][:2] == MODULE]


RECIPES = sglang_recipes()


def sglang_check(python: Path, argvs: list[list[str]]) -> list[str | None]:
    return own_parser.check(python, CHECK, argvs, {})


@pytest.fixture(scope="module")
def sglang_python() -> Path:
    return own_parser.engine_python(VENV, "SGLang", "test-sglang", "scripts/sglang_venv.py")


@pytest.fixture(scope="module")
def verdicts(sglang_python: Path) -> dict[str, dict[int, str | None]]:
    return own_parser.verdicts(
        RECIPES, lambda doc: server_argvs(planned(doc)), lambda a: sglang_check(sglang_python, a)
    )


def test_the_corpus_holds_the_kinds_of_sglang_plan_sparkplay_writes() -> None:
    """Not only one shape: one node and several, a registry recipe and pasted commands."""
    plans = [planned(doc) for doc in RECIPES.values()]
    assert any(len(p["ranks"]) > 1 for p in plans) and any(len(p["ranks"]) == 1 for p in plans)
    assert any(key.startswith("sparkrun/") for key in RECIPES) and any(key.startswith("pasted/") for key in RECIPES)


@pytest.mark.parametrize("key", sorted(RECIPES))
def test_sglang_parses_every_rank_of_the_plan(key: str, verdicts: dict[str, dict[int, str | None]]) -> None:
    expected = own_parser.said_not_to_start(RECIPES[key])
    own_parser.assert_accepted(key, verdicts[key], "SGLang", "sglang.launch_server", expected)


def test_the_check_catches_what_sglang_refuses(sglang_python: Path) -> None:
    """The check can fail: an unknown flag and a bad value, each named by SGLang's parser."""
    unknown, bad_value, fine = sglang_check(
        sglang_python,
        [["--model-path", "/m", "--no-such-flag"], ["--model-path", "/m", "--tp", "two"], ["--model-path", "/m"]],
    )
    assert unknown and "--no-such-flag" in unknown
    assert bad_value and "two" in bad_value
    assert fine is None
