"""The recipe catalog (recipes/NAME.yml): import, load, save — asking before replacing."""

from __future__ import annotations

import hashlib
import re
import shutil
import sys
import tomllib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypedDict, Unpack
from urllib.parse import urlsplit

import yaml

from sparkplay import paths
from sparkplay.errors import BadInput, Declined
from sparkplay.fsutil import atomic_write
from sparkplay.recipes import model
from sparkplay.recipes.diff import semantic_diff
from sparkplay.recipes.importers import launcher, webjson
from sparkplay.recipes.importers.pasted import compose, gguf_hub, kubernetes, llama_swap, page
from sparkplay.recipes.importers.pasted.shell import Origin
from sparkplay.recipes.importers.sparkrun import recipe as sparkrun
from sparkplay.recipes.normalise import normalise
from sparkplay.recipes.store import choices, fetch
from sparkplay.recipes.store.pasted import origin, pasted, shell_text

# a YAML mapping's first line (`key: value`): shell text never starts so
YAML_KEY = re.compile(r"^(#[^\n]*\n\s*)*[A-Za-z_][A-Za-z0-9_.-]*:(\s|$)")

# Asked with the question, the lines of the diff and the file at stake;
# returns the answer. The CLI decides how (terminal, --yes, or no).
Confirm = Callable[[str, list[str], Path], bool]


def catalog_dir(project: Path) -> Path:
    """The user's catalog: recipes imported go here (the checkout's recipes/, else a per-user folder)."""
    return paths.data_dir(project) / "recipes"


def shipped_beneath(catalog: Path) -> Path | None:
    """The read-only catalog installed with sparkplay, read beneath the user's one (None in a checkout)."""
    shipped = paths.BUNDLED / "recipes"
    if not shipped.is_dir() or (catalog.exists() and catalog.resolve() == shipped.resolve()):
        return None
    return shipped


def own_path(catalog: Path, name: str) -> Path:
    """Where NAME is written: always the user's catalog."""
    return catalog / f"{model.check_name(name)}.yml"


def recipe_path(catalog: Path, name: str) -> Path:
    """Where NAME is read from: the user's file, else the shipped one (a user's import shadows it)."""
    own = own_path(catalog, name)
    shipped = shipped_beneath(catalog)
    if not own.exists() and shipped is not None and (shipped / own.name).is_file():
        return shipped / own.name
    return own


def only_one(docs: list[dict[str, Any]], source: str) -> dict[str, Any]:
    """The one recipe of a source; a compose file's several are refused, naming each, until --pick chooses."""
    if len(docs) > 1:
        listed = "; ".join(f"{i}) {d['name']}" for i, d in enumerate(docs, 1))
        raise BadInput(f"{source} holds {len(docs)} engine launches ({listed})", "choose one with --pick N")
    return docs[0]


class Reading(TypedDict, total=False):
    """How a source is read, by keyword (read_sources and the importer's own entry points alike): the recipe's
    name, KEY=VALUE corrections, folders of sparkrun mods, which of a compose file's launches, and a script's
    arguments."""

    name: str | None
    sets: Sequence[str]
    mods_from: Sequence[Path]
    pick: int | None
    arguments: Sequence[str]  # a script's, as it is run with them (`--arg`)


def read_sources(source: str, **how: Unpack[Reading]) -> list[dict[str, Any]]:
    """Read SOURCE (an https URL, a file, or - for standard input) into normalised, schema-valid recipes with
    every field known: one, or one per service of a compose file.

    The importer is chosen by the content, never by the file name: a JSON
    object is a recipe website's, TOML is the launcher's recipe.toml, YAML
    with `recipe_version` (or a container and a model) is sparkrun's, YAML
    with sparkplay's schema is sparkplay's own, YAML with `services` is a
    compose file, HTML or Markdown is a page read for the commands in its
    code blocks, and anything else is read as shell text (a command line or a
    script). `sets` (KEY=VALUE, dotted keys) fill or correct fields after the
    import; a recipe that still cannot run is refused, naming the field and
    the --set that fixes it.
    """
    name, sets = how.get("name"), how.get("sets") or ()
    if name is not None:
        model.check_name(name)
    body, sha, content_type = _body(source)
    arguments = how.get("arguments") or ()
    script = origin(source, arguments)
    try:
        docs = read_all(body, source, sha, name, content_type, how.get("mods_from") or (), how.get("pick"), script)
        if arguments and not script.used:
            raise BadInput(f"{source} is no script: --arg gives a script its arguments", "import it without --arg")

        def fill(doc: dict[str, Any]) -> None:
            for assignment in sets:
                apply_set(doc, assignment, source)
            gguf_hub.apply(doc)  # llama.cpp's -hf, after --set (a model.path given there is used as it is)

        docs = choices.each(docs, fill, source)
    except BadInput as exc:  # every error names the input it is about
        if source in exc.problem:
            raise
        raise BadInput(f"{source}: {exc.problem}", exc.fix) from None
    return choices.each(docs, lambda doc: _check_complete(doc, source), source)


def _body(source: str) -> tuple[bytes, str, str]:
    scheme = urlsplit(source).scheme
    if scheme in ("http", "https"):
        fetched = fetch.fetch(source)
        return fetched.body, fetched.sha256, fetched.content_type
    if scheme and len(scheme) > 1:  # not a Windows drive letter
        raise BadInput(f"cannot import from a {scheme}: URL", "give an https:// URL, a file path or - for stdin")
    if source == "-":
        body = sys.stdin.buffer.read(fetch.MAX_BYTES + 1)
    else:
        path = Path(source)
        if not path.is_file():
            raise BadInput(
                f"{source} does not exist or is not a file",
                "give the path of a recipe, command line, compose file or page (- reads stdin)",
            )
        body = path.read_bytes()
    if len(body) > fetch.MAX_BYTES:
        raise BadInput(f"{source} is larger than 1 MiB", "a recipe is small; check the file")
    return body, hashlib.sha256(body).hexdigest(), ""


def _check_complete(doc: dict[str, Any], source: str) -> None:
    model.check_name(doc.get("name", ""))
    errors = model.schema_errors(doc)
    if errors:
        raise BadInput(f"the recipe from {source} is malformed: {errors[0]}", "fix the source or report it")
    missing = model.errors(doc)
    if missing:
        first, more = _first_of(missing, "")
        raise BadInput(
            f"{source}: {first.key} cannot be determined from the recipe: {first.message}{more}",
            f"{first.fix}, or import with --set {first.key}=VALUE",
        )


def _first_of(errors: list[model.Problem], where: str) -> tuple[model.Problem, str]:
    """The first of ERRORS, and " (and N more...)" when there are others (WHERE says where to see them)."""
    return errors[0], f" (and {len(errors) - 1} more{where})" if len(errors) > 1 else ""


def read(
    body: bytes, where: str, sha: str, name: str | None, content_type: str = "", mods_from: Sequence[Path] = ()
) -> dict[str, Any]:
    """The one normalised recipe a source's bytes hold."""
    return only_one(read_all(body, where, sha, name, content_type, mods_from), where)


def read_all(
    body: bytes,
    where: str,
    sha: str,
    name: str | None,
    content_type: str = "",
    mods_from: Sequence[Path] = (),
    pick: int | None = None,
    script: Origin | None = None,
) -> list[dict[str, Any]]:
    """The normalised recipes from a source's bytes, by what the bytes are (`script`: shell text's origin)."""
    text = body.decode("utf-8", errors="replace")
    if not text.strip():
        raise BadInput(f"{where} is empty", "give a recipe, a command line or script, a compose file or a page")
    head = text.lstrip()[:1]

    def source(kind: str) -> dict[str, Any]:
        return {"kind": kind, "location": where, "sha256": sha, "canonical_url": None}

    # `[` opens a JSON array, and also a shell test (`[ -f .env ] && ...`) or a Markdown link or badge
    if head == "{" or (head == "[" and fetch.is_json(text)):
        data = fetch.parse_json_object(body, where, content_type)
        if compose.is_compose(data):
            return pasted(
                compose.find(data, where, _folder(where)), source("compose"), name, pick, where, "a compose file"
            )
        return [normalise(webjson.to_raw(data, source("localairecipes"), name))]
    if head == "<" or "html" in content_type.lower():
        return pasted(page.find(text, True, where), source("page"), name, pick, where, "an HTML page")
    try:
        data: Any = model.parsed(lambda: tomllib.loads(text), where)
    except tomllib.TOMLDecodeError as exc:
        if where.lower().endswith(".toml"):  # the name only sharpens the error; the content chose the importer
            raise BadInput(f"{where} is not valid TOML ({exc})", "fix the TOML syntax") from None
        data = None
    if isinstance(data, dict) and data and launcher.is_launcher(data):
        return [normalise(launcher.to_raw(data, source("launcher-toml"), name, launcher.leading_comments(text)))]
    if (manifests := _manifests(text, where)) is not None:
        found = kubernetes.find(manifests, where)
        return pasted(found, source("kubernetes"), name, pick, where, "a Kubernetes manifest")
    try:
        doc = model.parsed(lambda: yaml.safe_load(text), where)
    except yaml.YAMLError:
        # a mapping with a syntax error is named by its line; a page's `Status: ...` lines are no mapping
        if YAML_KEY.match(text.lstrip()) and not (page.is_markdown(text) or page.is_prose(text)):
            model.from_yaml(text, where)
        doc = None
    if not isinstance(doc, dict):
        return shell_text(text, source, name, pick, where, script)
    if compose.is_compose(doc):
        return pasted(compose.find(doc, where, _folder(where)), source("compose"), name, pick, where, "a compose file")
    if llama_swap.is_config(doc):
        return pasted(llama_swap.find(doc, where), source("llama-swap"), name, pick, where, "a llama-swap config")
    if sparkrun.is_sparkrun(doc):
        return [normalise(sparkrun.to_raw(doc, source("sparkrun"), name, where, mods_from))]
    if doc.get("schema") != model.SCHEMA_ID:
        if page.is_markdown(text):
            return pasted(page.find(text, False, where), source("page"), name, pick, where, "a Markdown page")
        raise BadInput(
            f"{where} is not a recipe sparkplay knows (a website's JSON, a recipe.toml, a sparkrun or sparkplay YAML, "
            "a compose file, a page, or a command line)",
            "check the file; sparkrun recipes carry recipe_version, sparkplay's carry schema: " + model.SCHEMA_ID,
        )
    if name is not None:
        doc["name"] = name
    return [doc]


def _folder(where: str) -> Path | None:
    """The folder a local file lies in (a compose project's, for its .env); None for a URL or stdin."""
    path = origin(where, ()).path  # the one rule for what is a local file
    return Path(path).parent if path else None


def _manifests(text: str, where: str) -> list[Any] | None:
    """The documents of a YAML stream (`---` between them) when they are Kubernetes objects; else None."""
    if "apiVersion" not in text or "kind" not in text:
        return None
    try:
        docs = model.parsed(lambda: list(yaml.safe_load_all(text)), where)
    except yaml.YAMLError:
        return None
    return docs if any(kubernetes.is_object(d) for d in docs) else None


def apply_set(doc: dict[str, Any], assignment: str, where: str) -> None:
    """One `--set KEY=VALUE`: KEY a dotted path to a field the recipe has; VALUE read as YAML (so 2, true
    and null are what they say), then checked with the rest of the recipe."""
    key, sep, value = assignment.partition("=")
    if not sep or not key:
        raise BadInput(f"--set {assignment!r} is not KEY=VALUE", "write it as --set engine.image=REPO:TAG")
    parts = key.split(".")
    node: Any = doc
    for part in parts[:-1]:
        node = node.get(part) if isinstance(node, dict) else None
    # a mapping of names (the environment, the knobs) takes new entries; elsewhere only fields the recipe has
    open_mapping = parts[:-1] in (["serve", "env"], ["knobs"])
    if not isinstance(node, dict) or (parts[-1] not in node and not open_mapping):
        raise BadInput(f"--set {key}: the recipe has no field {key}", "name a field `sparkplay recipe show` lists")
    try:
        parsed = yaml.safe_load(value) if value else None
    except yaml.YAMLError:
        parsed = value
    as_text = isinstance(parsed, str) or (parsed is None and value) or parts[:-1] == ["serve", "env"]
    node[parts[-1]] = value if as_text else parsed  # the environment holds text: false stays "false"
    ckpts = doc["model"].setdefault("checkpoints", [])
    target = next((c for c in ckpts if c["role"] == "target"), None)
    if key == "model.revision" and target:  # the target checkpoint is pinned with the model
        target["revision"] = node[parts[-1]]
    elif key == "model.repo" and isinstance(node[parts[-1]], str):  # and it is the target checkpoint's repository
        if target is None:
            ckpts.insert(
                0,
                {
                    "role": "target",
                    "repo": node[parts[-1]],
                    "revision": doc["model"].get("revision"),
                    "size_bytes": None,
                    "mount": None,
                    "license": None,
                },
            )
        else:
            target["repo"] = node[parts[-1]]
    doc.setdefault("provenance", []).append({"key": key, "how": "set", "detail": f"--set at import of {where}"})


def names(catalog: Path) -> list[str]:
    layers = [catalog, shipped_beneath(catalog)]
    return sorted({p.stem for layer in layers if layer is not None and layer.is_dir() for p in layer.glob("*.yml")})


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
        first, more = _first_of(errors, f": sparkplay recipe validate {name}")
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
    """Write to the user's catalog; replacing a recipe (the user's, or a shipped one it would shadow) asks."""
    path, current = own_path(catalog, doc["name"]), recipe_path(catalog, doc["name"])
    text = model.to_yaml(doc)
    if current.exists():
        old_text = current.read_text()
        if old_text == text:
            return SaveResult(path, "unchanged")
        try:
            old = model.from_yaml(old_text, str(path))
        except BadInput:
            old = {}
        lines = semantic_diff(old, doc) or ["no change to engine, model, flags or env (only notes or provenance)"]
        if not confirm(f"Replace recipe {doc['name']} ({path})?", lines, path):
            raise Declined(f"kept {path} as it was", "pass --yes to replace it or --name to save under another name")
        saved = backup(path, catalog / ".backups") if path.exists() else None  # a shipped one stays where it is
        atomic_write(path, text)
        return SaveResult(path, "replaced", saved)
    atomic_write(path, text)
    return SaveResult(path, "created")
