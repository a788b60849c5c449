"""The roles and playbooks interpret the Deployment; they do not shape data in Jinja (issue 42).

Counted: each `{{ ... }}` expression in roles/ and playbooks/ YAML (molecule scenarios apart) that uses a
data-shaping filter (map, select, combine, zip, ... below). Templates (.j2) are left out: they render files.
The ceiling only goes down: a change that needs more moves the rule into Python (sparkplay.layout,
sparkplay.deployments, a filter) instead.
"""

from __future__ import annotations

import re

from tests.conftest import PROJECT

SHAPING = (
    "map",
    "select",
    "selectattr",
    "rejectattr",
    "reject",
    "combine",
    "zip",
    "dict",
    "items2dict",
    "dict2items",
    "json_query",
    "flatten",
    "unique",
    "groupby",
    "from_json",
    "b64decode",
)
FILTER = re.compile(r"\|\s*(?:ansible\.builtin\.)?(?:" + "|".join(SHAPING) + r")\b")
EXPRESSION = re.compile(r"\{\{.*?\}\}", re.S)
CEILING = 106  # 115 before sparkplay.layout (2026-12-05); the aim is 40


def shaping_expressions() -> dict[str, int]:
    found = {}
    for root in ("roles", "playbooks"):
        for path in sorted((PROJECT / root).rglob("*.yml")):
            if "molecule" in path.parts:
                continue
            count = sum(1 for e in EXPRESSION.findall(path.read_text()) if FILTER.search(e))
            if count:
                found[str(path.relative_to(PROJECT))] = count
    return found


def test_the_count_finds_what_it_counts():
    assert FILTER.search("{{ a | map(attribute='b') | list }}") and FILTER.search(
        "{{ x | ansible.builtin.combine(y) }}"
    )
    assert not FILTER.search("{{ a | default(b) | int }}") and not FILTER.search("{{ a | mapping }}")


def test_the_roles_shape_no_more_data_in_jinja_than_the_ceiling():
    found = shaping_expressions()
    total = sum(found.values())
    top = ", ".join(f"{path} {n}" for path, n in sorted(found.items(), key=lambda kv: -kv[1])[:6])
    print(f"\nJinja data-shaping expressions in roles/ and playbooks/: {total} (most: {top})")
    assert total <= CEILING, f"{total} data-shaping Jinja expressions (ceiling {CEILING}): most in {top}"
