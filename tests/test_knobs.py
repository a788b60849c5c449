"""Every knob the sample inventory documents is declared with a default and read by something (no lab).

A knob nobody reads is a promise that does nothing. The effect of the knobs
that flow into Python plans is tested where the plan is (tests/test_engines.py,
tests/test_ckpt_tool.py); the lab tests set others for real (transports,
bandwidth, stream counts, verify mode, confirm overwrite, subnets).
"""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from tests.conftest import PROJECT

SAMPLE = PROJECT / "inventory" / "sample" / "group_vars" / "sparkplay_nodes" / "main.yml"
KNOB = re.compile(r"^# ([a-z][a-z0-9]*_[a-z0-9_]+):(\s|$)", re.MULTILINE)  # knobs carry a role prefix


def documented() -> list[str]:
    return [m.group(1) for m in KNOB.finditer(SAMPLE.read_text())]


def defaults() -> dict[str, Path]:
    found: dict[str, Path] = {}
    for path in sorted(PROJECT.glob("roles/*/defaults/main.yml")):
        for name in yaml.safe_load(path.read_text()) or {}:
            found[name] = path
    return found


def readers(name: str, definition: Path) -> list[Path]:
    """Files other than the knob's definition that use it (tasks, templates, playbooks, other defaults)."""
    pattern = re.compile(rf"(?<![A-Za-z0-9_]){re.escape(name)}(?![A-Za-z0-9_])")
    places = [*PROJECT.glob("roles/*/tasks/*.yml"), *PROJECT.glob("roles/*/templates/*"),
              *PROJECT.glob("roles/*/handlers/*.yml"), *PROJECT.glob("roles/*/defaults/main.yml"),
              *PROJECT.glob("roles/*/vars/*.yml"),
              *PROJECT.glob("playbooks/*.yml"), *PROJECT.glob("playbooks/tasks/*.yml")]  # fmt: skip
    found = []
    for path in places:
        text = path.read_text()
        if path == definition:
            text = re.sub(rf"^{re.escape(name)}:.*$", "", text, flags=re.MULTILINE)  # its own line is not a reader
        if pattern.search(text):
            found.append(path)
    return found


def test_the_sample_documents_knobs():
    assert len(documented()) > 40 and "checkpoint_transport" in documented()


def test_every_documented_knob_has_a_default_and_a_reader():
    known = defaults()
    missing = [k for k in documented() if k not in known]
    assert not missing, f"documented in the sample but declared nowhere: {missing}"
    unread = [k for k in documented() if not readers(k, known[k])]
    assert not unread, f"documented knobs that nothing reads: {unread}"


def test_the_reader_search_sees_an_unread_knob():
    assert readers("sparkplay_no_such_knob_anywhere", PROJECT / "roles/sparkplay/defaults/main.yml") == []
    assert readers("checkpoint_stall_timeout", PROJECT / "roles/checkpoint/defaults/main.yml")
