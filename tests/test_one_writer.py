"""Every rule has one writer: a node path, a unit name, the API port rule or the leader rule written a
second time outside the module that owns it fails here (a grep over roles/, playbooks/, plugins/, src/).

Where a rule is a knob a role documents, its default is stated in that role's defaults/main.yml and
meta/argument_specs.yml too (Ansible needs it there); tests/test_deployment.py keeps those equal to the
owner's. READMEs explain and are not read.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.conftest import PROJECT

TREES = ("roles", "playbooks", "plugins", "src/sparkplay")
SUFFIXES = {".py", ".yml", ".yaml", ".j2", ".cfg", ".service", ".sh"}
# where a knob's default is stated for Ansible, beside its owner
STATED = re.compile(r"(^|/)(defaults/main\.yml|meta/argument_specs\.yml)$")

# rule -> (pattern, the file that writes it)
RULES: dict[str, tuple[str, str]] = {
    "the serve env file": (r"/etc/sparkplay/serve\.env", "src/sparkplay/engines/names.py"),
    "the serve record": (r"/etc/sparkplay/serve\.json", "src/sparkplay/engines/names.py"),
    "the fabric env file": (r"/etc/sparkplay/fabric\.env", "src/sparkplay/settings.py"),
    "the model root": (r"/var/lib/sparkplay/models", "src/sparkplay/settings.py"),
    "the state folder": (r"/var/lib/sparkplay(?!/models)", "src/sparkplay/engines/context.py"),
    "the node tools": (r"/usr/local/lib/sparkplay/sparkplay-", "src/sparkplay/engines/names.py"),
    "the unit folder": (r"/etc/systemd/system", "src/sparkplay/engines/names.py"),
    # (a template's file name, NAME.service.j2, is not the unit's name)
    "the serve unit": (r"sparkplay-serve\.service(?!\.j2)", "src/sparkplay/engines/names.py"),
    "the watcher unit": (r"sparkplay-serve-watch\.service(?!\.j2)", "src/sparkplay/engines/names.py"),
    "the watchdog unit": (r"sparkplay-serve-watchdog\.service(?!\.j2)", "src/sparkplay/engines/names.py"),
    "the firewall unit": (r"sparkplay-peer-firewall\.service(?!\.j2)", "src/sparkplay/engines/firewall.py"),
    # who leads: rank 0, compared anywhere (Python's ==, Jinja's ==, selectattr's 'eq', 0)
    "the leader rule": (
        r"rank['\"]?\s*(\|\s*int\s*)?(==|,\s*'eq',)\s*0\b|LEADER_RANK = 0",
        "src/sparkplay/topology.py",
    ),
    # where the API listens: the inventory's address else the recipe's (passing the inventory's value on,
    # empty when unset, is reading it; falling back to another value is writing the rule again)
    "the API address rule": (
        r"(serve_port|serve_bind)\s*(or\b|\|\s*default\((?!''\)|0\)))|or\s+serve\[.port.\]",
        "src/sparkplay/engines/context.py",
    ),
}

# files a rule's pattern may appear in for another reason, with the reason
EXEMPT = {
    "the unit folder": {"src/sparkplay/lab/image.py"},  # the lab's node image installs its own units there
}


def sources() -> list[Path]:
    found = [PROJECT / name for name in ("site.yml", "serve.yml", "plan.yml")]
    for tree in TREES:
        found += [p for p in (PROJECT / tree).rglob("*") if p.is_file() and p.suffix in SUFFIXES]
    # a role's molecule scenario checks those paths on a node, as the tests do: it writes none of them
    return [p for p in found if "egg-info" not in str(p) and "molecule" not in p.relative_to(PROJECT).parts]


@pytest.mark.parametrize("rule", RULES)
def test_a_rule_is_written_once(rule: str) -> None:
    pattern, owner = RULES[rule]
    writers = []
    for path in sources():
        name = path.relative_to(PROJECT).as_posix()
        if STATED.search(name) or name in EXEMPT.get(rule, ()):
            continue
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            if re.search(pattern, line):
                writers.append(f"{name}:{number}")
    owned = [w for w in writers if w.startswith(owner + ":")]
    assert owned, f"{rule}: its owner {owner} no longer writes it (update RULES)"
    assert writers == owned, f"{rule} is written outside {owner}: {', '.join(set(writers) - set(owned))}"


def test_the_grep_sees_a_second_writer(tmp_path: Path) -> None:
    """The patterns match the forms a second writer would take (so the test above can fail)."""
    samples = {
        "the leader rule": ["when: sparkplay_rank | int == 0", "selectattr('rank', 'eq', 0)", "if node.rank == 0:"],
        "the API address rule": ['port: "{{ serve_port | default(recipe.port) }}"', "int(serve_port or 8000)"],
        "the state folder": ["bench_dir: /var/lib/sparkplay/bench"],
        "the serve unit": ["systemctl restart sparkplay-serve.service"],
    }
    for rule, lines in samples.items():
        for line in lines:
            assert re.search(RULES[rule][0], line), (rule, line)
