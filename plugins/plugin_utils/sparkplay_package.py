"""The sparkplay Python package, as the collection's controller plugins reach it.

The collection's filters and lookups hold no rules of their own: they call the sparkplay package,
which must be installed in the Python that runs Ansible (README: Install). Where it is not, the
plugins still load (ansible-doc, Galaxy's import check) and every call fails with the fix.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any

from ansible.errors import AnsibleError

MISSING = (
    "the sparkplay Python package cannot be imported by the Python that runs Ansible ({error}): "
    "install the sparkplay wheel into it (README: Install)"
)


def missing(error: ImportError) -> AnsibleError:
    return AnsibleError(MISSING.format(error=error))


def load(target: str) -> Any:
    """ "module:name" of the sparkplay package, at call time; refused with the fix where it cannot be imported."""
    module, attribute = target.split(":")
    try:
        return getattr(importlib.import_module(module), attribute)
    except ImportError as error:
        raise missing(error) from None


def _refusing(error: ImportError) -> Callable[..., Any]:
    def refuse(*_args: Any, **_kwargs: Any) -> Any:
        raise missing(error)

    return refuse


def resolve(table: Mapping[str, str]) -> dict[str, Callable[..., Any]]:
    """Filter name -> "module:function" becomes name -> the function; every one refuses with the fix when
    the package cannot be imported."""
    resolved = {}
    for name, target in table.items():
        module, attribute = target.split(":")
        try:
            resolved[name] = getattr(importlib.import_module(module), attribute)
        except ImportError as error:
            resolved[name] = _refusing(error)
    return resolved
