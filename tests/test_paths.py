"""Where an installed sparkplay keeps the user's data, and the catalog read in two layers (no lab).

An installed wheel holds the project read-only (sparkplay/_project); the
user's recipes, backups, the lab inventory and results go to per-user
folders (XDG), overridable by environment variables; a checkout keeps
everything in itself, as before. The installed layout is simulated here by
pointing paths.BUNDLED at a copy of the project; tests/test_install_lab.py
installs the real wheel.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from sparkplay import paths
from sparkplay.errors import BadInput, Declined
from sparkplay.recipes import model
from sparkplay.recipes.store import catalog
from tests.conftest import PROJECT


@pytest.fixture()
def installed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A project copied where an installed wheel would have it, and a home of its own."""
    bundled = tmp_path / "site-packages" / "sparkplay" / "_project"
    bundled.mkdir(parents=True)
    shutil.copy2(PROJECT / "ansible.cfg", bundled)
    shutil.copytree(PROJECT / "playbooks", bundled / "playbooks")
    shutil.copytree(PROJECT / "recipes", bundled / "recipes", ignore=shutil.ignore_patterns(".*"))
    monkeypatch.setattr(paths, "BUNDLED", bundled)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    for name in (
        "XDG_DATA_HOME",
        "XDG_CACHE_HOME",
        "XDG_CONFIG_HOME",
        "SPARKPLAY_DATA_DIR",
        "SPARKPLAY_CACHE_DIR",
        "SPARKPLAY_INVENTORY",
        "SPARKPLAY_PROJECT_DIR",
    ):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)  # an empty folder, no checkout above it
    return bundled


def test_a_checkout_keeps_its_data_in_itself() -> None:
    assert not paths.is_installed(PROJECT)
    assert paths.data_dir(PROJECT) == PROJECT and paths.cache_dir(PROJECT) == PROJECT / ".cache"
    assert catalog.catalog_dir(PROJECT) == PROJECT / "recipes"
    assert not paths.BUNDLED.exists()  # a checkout (or an editable install) carries no copy of itself
    assert catalog.shipped_beneath(catalog.catalog_dir(PROJECT)) is None


def test_installed_data_goes_to_the_users_folders(
    installed: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "home"
    assert paths.is_installed(installed)  # (project_dir() finding it from an empty folder: test_install_lab.py)
    assert paths.data_dir(installed) == home / ".local/share/sparkplay"
    assert paths.cache_dir(installed) == home / ".cache/sparkplay"
    assert paths.default_inventory(installed) == home / ".config/sparkplay/inventory"
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("SPARKPLAY_INVENTORY", str(tmp_path / "mine"))
    assert paths.data_dir(installed) == tmp_path / "xdg/sparkplay"
    assert paths.default_inventory(installed) == tmp_path / "mine"
    monkeypatch.setenv("SPARKPLAY_DATA_DIR", str(tmp_path / "data"))
    assert catalog.catalog_dir(installed) == tmp_path / "data/recipes"
    monkeypatch.setenv("XDG_DATA_HOME", "relative/ignored")  # the spec: a relative value is ignored
    monkeypatch.delenv("SPARKPLAY_DATA_DIR")
    assert paths.data_dir(installed) == home / ".local/share/sparkplay"


def test_the_shipped_catalog_is_read_beneath_the_users_and_never_written(installed: Path) -> None:
    user = catalog.catalog_dir(installed)
    shipped = installed / "recipes"
    assert catalog.shipped_beneath(user) == shipped
    assert "lab-tiny" in catalog.names(user)  # nothing imported yet: the shipped recipes are there
    assert catalog.recipe_path(user, "lab-tiny") == shipped / "lab-tiny.yml"
    assert catalog.load_for_use(user, "lab-tiny")["engine"]["name"] == "llamacpp"
    before = (shipped / "lab-tiny.yml").read_bytes()
    doc = catalog.load(user, "lab-tiny")
    doc["context_length"] = 256
    with pytest.raises(Declined):
        catalog.save(user, doc, lambda *_: False)  # shadowing a shipped recipe is asked about
    saved = catalog.save(user, doc, lambda *_: True)
    assert saved.path == user / "lab-tiny.yml" and saved.action == "replaced" and saved.backup is None
    assert (shipped / "lab-tiny.yml").read_bytes() == before  # the shipped one is untouched
    assert catalog.load(user, "lab-tiny")["context_length"] == 256  # the user's shadows it
    assert catalog.names(user).count("lab-tiny") == 1


def test_an_unknown_recipe_names_both_layers(installed: Path) -> None:
    with pytest.raises(
        BadInput, match="unknown recipe 'nope' \\(known: glm53, glm53-atlas, lab-small, lab-tiny, lab-vllm\\)"
    ):
        catalog.load(catalog.catalog_dir(installed), "nope")
    assert model.check_name("lab-tiny") == "lab-tiny"


def test_one_version_for_the_wheel_the_collection_and_the_nodes() -> None:
    import yaml

    from sparkplay import __version__

    assert yaml.safe_load((PROJECT / "galaxy.yml").read_text())["version"] == __version__
    assert f"## {__version__}" in (PROJECT / "CHANGELOG.md").read_text()
