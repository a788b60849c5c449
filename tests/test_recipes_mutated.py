"""Structured YAML recipes (compose files, llama-swap configs, Kubernetes manifests, sparkrun recipes) with their
values swapped for values of the wrong shape, as a hostile or careless file would have them: each one is an import
or a one-line refusal, never a traceback. Seeded, so a failure repeats."""

from __future__ import annotations

import random

import pytest
import yaml

from sparkplay.errors import SparkplayError
from sparkplay.recipes.store import catalog
from tests.conftest import PROJECT

FIXTURES = sorted(
    [
        *(PROJECT / "tests" / "fixtures" / "pasted").glob("*.y*ml"),
        *(PROJECT / "tests" / "fixtures" / "sparkrun").glob("*.yaml"),
    ]
)
WRONG = [None, 1, 2.5, True, "x", "", [], {}, ["a"], {"a": 1}, "$(X)", "${PORT}", "${env.HOME}", "-", [None], [{}]]


def mutated(node: object, rng: random.Random) -> None:
    """Each value, one time in twelve, replaced by a value of another shape; one in fifty removed."""
    if isinstance(node, dict):
        for key in list(node):
            roll = rng.random()
            if roll < 0.08:
                node[key] = rng.choice(WRONG)
            elif roll < 0.1:
                del node[key]
            else:
                mutated(node[key], rng)
    elif isinstance(node, list):
        for i, value in enumerate(node):
            if rng.random() < 0.08:
                node[i] = rng.choice(WRONG)
            else:
                mutated(value, rng)


@pytest.mark.parametrize("fixture", FIXTURES, ids=lambda p: p.name)
def test_a_mutated_structured_recipe_is_an_import_or_a_one_line_refusal(fixture):
    rng = random.Random(fixture.name)  # noqa: S311 - a seeded sequence to repeat, no secret
    for _ in range(40):
        docs = list(yaml.safe_load_all(fixture.read_text()))
        for doc in docs:
            mutated(doc, rng)
        text = yaml.safe_dump_all(docs)
        try:
            catalog.read_all(text.encode(), f"{fixture.name}-mutated", "0" * 64, None)
        except SparkplayError as exc:
            assert "\n" not in str(exc), text
