"""The one rule for every file of variables sparkplay writes where Ansible reads it (the stack lock, the model
lock, beside the inventory): its values are data, never templates.

Ansible templates a string it finds in a var file when a play reads it. A value that came from a node, a hub
or a recipe (a revision, a package version, a recipe's name) could hold `{{ lookup('pipe', ...) }}`, and a git
branch may legitimately contain `{{`. So every string such a file holds that carries a template's markers is
written with YAML's `!unsafe` tag, which Ansible never renders, and every other string as a quoted string (its
keys are sparkplay's own names).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import yaml

TEMPLATE_MARKS = ("{{", "{%", "{#")


class _Unsafe(str):
    """A string to be written as `!unsafe 'text'`."""


class _Dumper(yaml.SafeDumper):
    pass


def _unsafe(dumper: yaml.SafeDumper, value: _Unsafe) -> yaml.ScalarNode:
    return dumper.represent_scalar("!unsafe", str(value), style="'")


_Dumper.add_representer(_Unsafe, _unsafe)


def _tagged(value: Any) -> Any:
    """Plain Python values (Ansible hands its own subclasses of str, int, dict and list to a filter, which a
    safe YAML dumper refuses), every string tagged."""
    if isinstance(value, Mapping):
        return {str(k): _tagged(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_tagged(v) for v in value]
    if isinstance(value, str):
        # only a string that holds a template's markers is tagged: Ansible 2.19 resolves an `!unsafe` scalar as
        # YAML would an untagged plain one ('12' an int, a date a datetime), while a quoted plain string stays one
        return _Unsafe(value) if any(mark in value for mark in TEMPLATE_MARKS) else str(value)
    if isinstance(value, bool):
        return bool(value)
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value)
    return value


def dump(data: Mapping[str, Any]) -> str:
    """YAML of `data` with every string value tagged `!unsafe` (keys stay plain: they are variable names)."""
    return yaml.dump(_tagged(dict(data)), Dumper=_Dumper, sort_keys=False, allow_unicode=True, width=120)


def load(text: str) -> Any:
    """Read such a file back in Python (the CLI's readers): `!unsafe` strings as plain strings."""

    class Loader(yaml.SafeLoader):
        pass

    Loader.add_constructor("!unsafe", lambda loader, node: loader.construct_scalar(node))
    return yaml.load(text, Loader=Loader)  # noqa: S506 (a SafeLoader with one more tag)
