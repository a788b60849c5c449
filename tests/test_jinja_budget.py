"""The roles and playbooks interpret the Deployment; they do not shape data in Jinja (issue 42).

Counted: each `{{ ... }}` expression in roles/ and playbooks/ YAML (molecule scenarios apart), and each bare
condition (when, until, that, changed_when, failed_when: Jinja without braces), that uses a data-shaping
filter (map, select, combine, zip, ... below). Templates (.j2) are left out: they render files.
The ceiling only goes down: a change that needs more moves the rule into Python (sparkplay.layout,
sparkplay.served, a filter) instead.
"""

from __future__ import annotations

import re
from typing import Any

import yaml

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
CEILING = 36  # 119 (this count) before sparkplay.plays; 36 with it (the aim: 40)
CONDITIONS = ("when", "until", "that", "changed_when", "failed_when")


def bare_conditions(node: Any) -> list[str]:
    """The conditions of every task under `node` written without braces (Jinja all the same)."""
    found: list[str] = []
    if isinstance(node, dict):
        for key, value in node.items():
            if key in CONDITIONS:
                found += [c for c in (value if isinstance(value, list) else [value]) if isinstance(c, str)]
            found += bare_conditions(value)
    elif isinstance(node, list):
        for item in node:
            found += bare_conditions(item)
    return [c for c in found if "{{" not in c]


def shaping_expressions() -> dict[str, int]:
    found = {}
    for root in ("roles", "playbooks"):
        for path in sorted((PROJECT / root).rglob("*.yml")):
            if "molecule" in path.parts:
                continue
            text = path.read_text()
            count = sum(1 for e in EXPRESSION.findall(text) if FILTER.search(e))
            count += sum(1 for c in bare_conditions(yaml.safe_load(text)) if FILTER.search(c))
            if count:
                found[str(path.relative_to(PROJECT))] = count
    return found


def test_the_count_finds_what_it_counts():
    assert FILTER.search("{{ a | map(attribute='b') | list }}") and FILTER.search(
        "{{ x | ansible.builtin.combine(y) }}"
    )
    assert not FILTER.search("{{ a | default(b) | int }}") and not FILTER.search("{{ a | mapping }}")
    tasks = yaml.safe_load("- when: [a | select | list, b]\n  block: [{until: x | map('y')}]\n- that: '{{ c }}'")
    assert bare_conditions(tasks) == ["a | select | list", "b", "x | map('y')"]


def test_the_roles_shape_no_more_data_in_jinja_than_the_ceiling():
    found = shaping_expressions()
    total = sum(found.values())
    top = ", ".join(f"{path} {n}" for path, n in sorted(found.items(), key=lambda kv: -kv[1])[:6])
    print(f"\nJinja data-shaping expressions in roles/ and playbooks/: {total} (most: {top})")
    assert total <= CEILING, f"{total} data-shaping Jinja expressions (ceiling {CEILING}): most in {top}"
