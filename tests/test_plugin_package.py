"""The collection's controller plugins reach the sparkplay package through one table each, and still load
without it (Galaxy's import check, ansible-doc), every call then naming the fix."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import pytest
from ansible.errors import AnsibleError

PROJECT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(PROJECT / "collections"))

from ansible_collections.sparkplay.spark.plugins.plugin_utils import sparkplay_package  # noqa: E402

FILTER_PLUGINS = sorted(p.stem for p in (PROJECT / "plugins" / "filter").glob("*.py"))


@pytest.mark.parametrize("name", FILTER_PLUGINS)
def test_every_filter_resolves_to_a_function_of_the_package(name: str) -> None:
    plugin = importlib.import_module(f"ansible_collections.sparkplay.spark.plugins.filter.{name}")
    filters = plugin.FilterModule().filters()
    assert set(filters) == set(plugin.FILTERS)
    for filter_name, function in filters.items():
        module, attribute = plugin.FILTERS[filter_name].split(":")
        assert function is getattr(importlib.import_module(module), attribute), filter_name


def test_a_filter_whose_package_is_missing_loads_and_refuses_with_the_fix() -> None:
    filters = sparkplay_package.resolve({"sparkplay_gone": "sparkplay_not_installed.rules:rule"})
    with pytest.raises(AnsibleError, match=r"sparkplay_not_installed.*install the sparkplay wheel"):
        filters["sparkplay_gone"]("anything")


def test_a_misspelt_function_fails_at_load_not_at_use() -> None:
    with pytest.raises(AttributeError):
        sparkplay_package.resolve({"sparkplay_typo": "sparkplay.topology:no_such_rule"})


@pytest.mark.parametrize("lookup", ["sparkplay_deployment", "sparkplay_recipe"])
def test_a_lookup_without_the_package_refuses_with_the_fix(lookup: str, monkeypatch: pytest.MonkeyPatch) -> None:
    plugin = importlib.import_module(f"ansible_collections.sparkplay.spark.plugins.lookup.{lookup}")
    monkeypatch.setattr(plugin, "SPARKPLAY_MISSING", ImportError("No module named 'sparkplay'"))
    with pytest.raises(AnsibleError, match="install the sparkplay wheel"):
        plugin.LookupModule().run(["x"], {})


def test_the_settings_lookup_without_the_package_refuses_with_the_fix(monkeypatch: pytest.MonkeyPatch) -> None:
    plugin = importlib.import_module("ansible_collections.sparkplay.spark.plugins.lookup.sparkplay_settings")
    for name in [n for n in sys.modules if n == "sparkplay" or n.startswith("sparkplay.")] + ["sparkplay"]:
        monkeypatch.setitem(sys.modules, name, None)  # the whole package: an import of any of it raises ImportError
    with pytest.raises(AnsibleError, match="install the sparkplay wheel"):
        plugin.LookupModule().run(["launch"], {})


def test_the_warm_callback_loads_every_filter_and_lookup_and_their_package_modules_in_the_controller() -> None:
    """Ansible forks a worker per task and host: what the controller did not import, each worker imports again
    (about half the controller's CPU in a run of the site, docs/benchmarks.md). Run in a fresh interpreter so
    that nothing this test session imported counts."""
    import json
    import subprocess

    code = (
        "import json, sys\n"
        f"sys.path.insert(0, {str(PROJECT / 'collections')!r})\n"
        "from ansible_collections.sparkplay.spark.plugins.callback import sparkplay_warm\n"
        "failed = sparkplay_warm.warm()\n"
        "print(json.dumps({'failed': failed, 'modules': sorted(sys.modules)}))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    loaded = json.loads(proc.stdout)
    assert loaded["failed"] == []
    modules = set(loaded["modules"])
    wanted = {f"ansible_collections.sparkplay.spark.plugins.filter.{name}" for name in FILTER_PLUGINS}
    wanted |= {
        f"ansible_collections.sparkplay.spark.plugins.lookup.{p.stem}"
        for p in (PROJECT / "plugins" / "lookup").glob("*.py")
    }
    for name in FILTER_PLUGINS:
        plugin = importlib.import_module(f"ansible_collections.sparkplay.spark.plugins.filter.{name}")
        wanted |= {target.split(":")[0] for target in plugin.FILTERS.values()}
    assert wanted - modules == set()


def test_the_projects_ansible_configuration_enables_the_warm_callback() -> None:
    import configparser

    config = configparser.ConfigParser()
    config.read(PROJECT / "ansible.cfg")
    enabled = [name.strip() for name in config["defaults"]["callbacks_enabled"].split(",")]
    assert "sparkplay.spark.sparkplay_warm" in enabled
