# ruff: noqa: E402  (validate-modules wants the documentation before the imports)
from __future__ import annotations

DOCUMENTATION = """
name: sparkplay_warm
type: aggregate
short_description: Load the collection's filters and lookups once, in the controller, before any task runs
description:
  - Ansible runs each task of each host in a worker process forked from the controller's process, so a
    plugin the controller has not loaded is loaded again by every worker that needs it. The collection's
    filters and lookups call the sparkplay package; importing it in a worker cost about half of the
    controller's CPU in a run of the whole site (profiled, docs/benchmarks.md).
  - This callback imports them once when the playbook starts; every worker forked after that finds them loaded.
  - It prints nothing and changes nothing; a plugin that cannot load here is left for its task to report.
author: sparkplay developers (@sparkplay)
requirements:
  - enabled in ansible.cfg (callbacks_enabled), as this project's is
"""

import importlib
import pkgutil
from typing import Any

from ansible.plugins.callback import CallbackBase

# the collection this file belongs to: ansible_collections.<namespace>.<name>.plugins
_PLUGINS = __name__.rsplit(".", 2)[0]


def warm() -> list[str]:
    """Import every filter and lookup plugin of the collection and resolve its filters; the names that failed."""
    failed = []
    for kind in ("filter", "lookup"):
        package = importlib.import_module(f"{_PLUGINS}.{kind}")
        for info in pkgutil.iter_modules(package.__path__):
            name = f"{package.__name__}.{info.name}"
            try:
                module = importlib.import_module(name)
                if kind == "filter":
                    module.FilterModule().filters()
            except Exception:  # its own task reports it, with the fix, when it is used
                failed.append(name)
    return failed


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "sparkplay.spark.sparkplay_warm"
    CALLBACK_NEEDS_ENABLED = True

    def v2_playbook_on_start(self, playbook: Any) -> None:
        for name in warm():
            self._display.vvv(f"sparkplay_warm: {name} did not load; its tasks will say why")
