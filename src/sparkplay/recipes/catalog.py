"""The recipe catalog (recipes/NAME.yml): import, load, save — asking before replacing."""

from __future__ import annotations

import hashlib
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from sparkplay.errors import BadInput, Declined
from sparkplay.fsutil import atomic_write
from sparkplay.recipes import fetch, launcher, model, webjson
from sparkplay.recipes.diff import semantic_diff
from sparkplay.recipes.normalise import normalise

# Asked with the question, the lines of the diff and the file at stake;
# returns the answer. The CLI decides how (terminal, --yes, or no).
Confirm = Callable[[str, list[str], Path], bool]


def catalog_dir(project: Path) -> Path:
    return project / "recipes"


def recipe_path(catalog: Path, name: str) -> Path:
    return catalog / f"{model.check_name(name)}.yml"


def import_source(source: str, name: str | None = None) -> dict[str, Any]:
    """Read SOURCE (URL, .json, recipe.toml or sparkplay YAML) into a normalised, schema-valid recipe."""
    if name is not None:
        model.check_name(name)
    scheme = urlsplit(source).scheme
    if scheme in ("http", "https"):
        fetched = fetch.fetch_json(source)
        src = {"kind": "localairecipes", "location": source, "sha256": fetched.sha256, "canonical_url": None}
        doc = normalise(webjson.to_raw(fetched.data, src, name))
    elif scheme and len(scheme) > 1:  # not a Windows drive letter
        raise BadInput(f"cannot import from a {scheme}: URL", "give an https:// URL or a file path")
    else:
        path = Path(source)
        if not path.is_file():
            raise BadInput(
                f"{source} does not exist or is not a file", "give the path of a .json, .toml or .yml recipe"
            )
        body = path.read_bytes()
        if len(body) > fetch.MAX_BYTES:
            raise BadInput(f"{source} is larger than 1 MiB", "a recipe is small; check the file")
        sha = hashlib.sha256(body).hexdigest()
        text = body.decode("utf-8", errors="replace")
        suffix = path.suffix.lower()
        if suffix == ".json":
            src = {"kind": "localairecipes", "location": source, "sha256": sha, "canonical_url": None}
            doc = normalise(webjson.to_raw(fetch.parse_json_object(body, source), src, name))
        elif suffix == ".toml":
            src = {"kind": "launcher-toml", "location": source, "sha256": sha, "canonical_url": None}
            data = launcher.parse_toml(text, source)
            doc = normalise(launcher.to_raw(data, src, name, launcher.leading_comments(text)))
        elif suffix in (".yml", ".yaml"):
            doc = model.from_yaml(text, source)
            if name is not None:
                doc["name"] = name
        else:
            raise BadInput(f"{source}: unknown recipe format {suffix or '(no suffix)'}", "use .json, .toml or .yml")
    model.check_name(doc.get("name", ""))
    errors = model.schema_errors(doc)
    if errors:
        raise BadInput(f"the recipe from {source} is malformed: {errors[0]}", "fix the source or report it")
    return doc


def names(catalog: Path) -> list[str]:
    return sorted(p.stem for p in catalog.glob("*.yml")) if catalog.is_dir() else []


def load(catalog: Path, name: str) -> dict[str, Any]:
    path = recipe_path(catalog, name)
    if not path.is_file():
        known = ", ".join(names(catalog)) or "none yet"
        raise BadInput(f"unknown recipe {name!r} (known: {known})", "import it first: sparkplay recipe import SOURCE")
    return model.from_yaml(path.read_text(), str(path))


def load_for_use(catalog: Path, name: str) -> dict[str, Any]:
    """A recipe that is well formed and complete enough to deploy, or a one-line error naming the key."""
    doc = load(catalog, name)
    errors = model.errors(doc)
    if errors:
        first = errors[0]
        more = f" (and {len(errors) - 1} more: sparkplay recipe validate {name})" if len(errors) > 1 else ""
        raise BadInput(
            f"recipe {name} cannot be used: {first.key}: {first.message}{more}",
            f"{first.fix} in {recipe_path(catalog, name)}",
        )
    return doc


def backup(path: Path, backups: Path) -> Path:
    """Copy `path` into `backups` under a timestamped name before it is replaced."""
    backups.mkdir(parents=True, exist_ok=True)
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S.%fZ")
    target = backups / f"{path.name}.{stamp}"
    shutil.copy2(path, target)
    return target


@dataclass(frozen=True)
class SaveResult:
    path: Path
    action: str  # "created", "replaced", "unchanged"
    backup: Path | None = None


def save(catalog: Path, doc: dict[str, Any], confirm: Confirm) -> SaveResult:
    path = recipe_path(catalog, doc["name"])
    text = model.to_yaml(doc)
    if path.exists():
        old_text = path.read_text()
        if old_text == text:
            return SaveResult(path, "unchanged")
        try:
            old = model.from_yaml(old_text, str(path))
        except BadInput:
            old = {}
        lines = semantic_diff(old, doc) or ["no change to engine, model, flags or env (only notes or provenance)"]
        if not confirm(f"Replace recipe {doc['name']} ({path})?", lines, path):
            raise Declined(f"kept {path} as it was", "pass --yes to replace it or --name to save under another name")
        saved = backup(path, catalog / ".backups")
        atomic_write(path, text)
        return SaveResult(path, "replaced", saved)
    atomic_write(path, text)
    return SaveResult(path, "created")
