"""The recipe boundary: what a recipe may ask of the hosts it runs on, decided in one place.

A recipe comes from anywhere and sparkplay applies it as root, so nothing in
it reaches a host except through this module. Everything a recipe can say
that touches a host is one of three things:

- confined: a path inside sparkplay's own folders (the model root, the state
  folder), normalised, with no `..`; `confine()` refuses anything else;
- refused: names that could only be an attack (a checkpoint id with `..`, a
  system folder as a cache, a host path in a native engine's flags);
- a privileged request (`requests()`): a host bind, an added capability, a
  Debian package the engine does not need, an environment name that changes
  how programs load code, an API beyond loopback. It is shown at import and
  before `up`, and runs only when the inventory allows it by name
  (`serve_allow`); `enforce()` refuses it otherwise. A recipe cannot grant
  itself anything: the allow list and the inventory's own settings are the
  only sources of permission, and a value the inventory sets itself is the
  user's choice, not the recipe's request.

It is applied at import and again whenever a plan is computed (a recipe file
can be edited after import). docs/security.md has the threat model.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from sparkplay import addresses, codepaths, imageref
from sparkplay.engines import registry
from sparkplay.errors import BadInput

# what a recipe may set on its engine's container beyond sparkplay's own options (serve.ulimits, container_user)
CONTAINER_ULIMIT = re.compile(r"^(nofile|stack|nproc|core|memlock)=(-1|[0-9]+)(:(-1|[0-9]+))?\Z")
CONTAINER_USER = re.compile(r"^(root|[0-9]+(:[0-9]+)?|[a-z_][a-z0-9_-]{0,31})\Z")

# knobs whose effect reaches past the engine's own folders
PRIVILEGED_KNOBS = {
    "prefix_cache_dir": "bind-mounts the host folder {value} read-write into the engine's container",
    "display_carveout": "adds the SYS_ADMIN capability to the engine's container",
}

# the image repositories trusted unless the inventory says otherwise (serve_trusted_images): each engine's
# official images and the catalog's publishers (its package's spec.images); `ORG/*` takes every repository
# under ORG; `*` alone trusts every image (the check off)
TRUSTED_IMAGES = registry.trusted_images()

# Hugging Face's rule for repo ids (huggingface_hub validate_repo_id): [\w.-] parts, no '--' or '..', 96 long
_REPO_PART = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*\Z")
# folders a disk cache must never be, or be inside: the system's own, and the home folders
SYSTEM_TREES = tuple(
    "/etc /usr /bin /sbin /lib /lib32 /lib64 /libx32 /boot /dev /proc /sys /run /var/run /var/lib/dpkg /var/lib/apt "
    "/var/log /var/spool /root /snap".split()
)
SYSTEM_FOLDERS = frozenset("/ /tmp /var /var/tmp /var/lib /var/cache /home /opt /srv /mnt /media /usr/local".split())
# Debian policy 5.6.1: lower-case letters, digits, '+', '-', '.'; at least two long, starting alphanumeric
_DEB_PACKAGE = re.compile(r"^[a-z0-9][a-z0-9+.-]+\Z")
_SHM = re.compile(r"^[0-9]{1,6}(\.[0-9]+)?[bkmgt]?b?\Z", re.IGNORECASE)
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_IMAGE_ALLOW = re.compile(r"image:[^@\s]+@sha256:[0-9a-f]{64}")
_IMAGE_DIR = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]*(/[A-Za-z0-9_][A-Za-z0-9_.-]*)*\Z")


@dataclass(frozen=True)
class Request:
    """A privileged request: `name` is what `serve_allow` lists to allow it. Code a recipe brings (a mod, a
    pre_exec, a preamble) is named by the recipe and the whole sha256 of that code: an allow given for one
    recipe's commands admits no other recipe, nor other commands (a short prefix could be matched)."""

    name: str
    key: str  # the recipe field that asks
    what: str  # what it does to a host, one line

    def __str__(self) -> str:
        return f"{self.key}: {self.what} (privileged: runs only with serve_allow: [{self.name}] in the inventory)"


# serve_allow's forms of code a recipe brings: scoped to the recipe, pinned by the whole sha256
_SCOPED = re.compile(
    r"(?:mod:(?P<recipe>[a-z0-9][a-z0-9._-]{0,63})/(?P<mod>[A-Za-z0-9][A-Za-z0-9_.-]*)"
    r"|(?P<kind>pre_exec|preamble):(?P<owner>[a-z0-9][a-z0-9._-]{0,63}))@(?P<sha>[0-9a-f]{64})"
    r"|code:[a-z0-9][a-z0-9._-]{0,63}/--[a-z][a-z0-9-]*"
)
# the forms before issue 38: a mod by name alone or a 12-digit (48-bit) prefix, a pre_exec/preamble prefix
_OLD_FORM = re.compile(
    r"(?:mod:(?P<mod>[A-Za-z0-9][A-Za-z0-9_.-]*)(?:@[0-9a-f]{12})?|(?P<kind>pre_exec|preamble):[0-9a-f]{12})"
)


def requests(recipe: Mapping[str, Any], trusted: Iterable[str] = TRUSTED_IMAGES) -> list[Request]:
    """Every privileged request the recipe makes, in a stable order (`trusted`: the image repositories the
    inventory trusts)."""
    engine, serve = recipe["engine"], recipe["serve"]
    found: list[Request] = []
    knobs = recipe.get("knobs") or {}
    for knob, what in PRIVILEGED_KNOBS.items():
        if knobs.get(knob) not in (None, False, 0, ""):
            found.append(Request(knob, f"knobs.{knob}", what.format(value=knobs[knob])))
    if engine["runtime"] == "native":
        # the Debian packages the engine's native runtime needs (what its plan runs): others are requests
        needed = registry.spec(engine["name"]).native_packages
        for package in engine.get("packages") or []:
            if needed is None or not needed.match(str(package)):
                found.append(
                    Request(
                        f"package:{package}",
                        "engine.packages",
                        f"installs the Debian package {package} as root (the {engine['name']} engine does not need it)",
                    )
                )
    for name, what in codepaths.env_requests(engine["name"], engine["runtime"], serve.get("env") or {}):
        found.append(Request(f"env:{name}", f"serve.env.{name}", what))
    for flag, value in codepaths.code_flags(serve.get("args") or []):
        if flag in codepaths.PLUGIN_FILES:  # a file no pin covers (the checkpoint's and the image's are pinned)
            what = codepaths.CODE_FLAGS[flag].format(value=value)
            found.append(Request(f"code:{recipe['name']}/{flag}", f"serve.args {flag}", what))
    for mod in engine.get("mods") or []:
        what = f"runs {mod['name']}/run.sh as root in the engine's container before the engine"
        found.append(Request(f"mod:{recipe['name']}/{mod['name']}@{mod['sha256']}", "engine.mods", what))
    for kind, when in (("pre_exec", "before the engine"), ("preamble", "in the shell that then starts the engine")):
        commands = engine.get(kind)
        if commands:
            first = str(commands["commands"][0])
            first = first[:60] + "..." if len(first) > 60 else first
            what = f"runs {len(commands['commands'])} command(s) by bash as root in every rank's engine container"
            asked = f"{kind}:{recipe['name']}@{commands['sha256']}"
            found.append(Request(asked, f"engine.{kind}", f"{what} {when} (the first: {first})"))
    image = _image_request(recipe, trusted)
    if image:
        found.append(image)
    if not addresses.is_loopback(str(serve.get("bind") or addresses.LOOPBACK_ADDRESS)):
        found.append(
            Request("bind", "serve.bind", f"the API listens on {serve['bind']}, beyond the leader, unauthenticated")
        )
    return found


def image_trusted(image: str, trusted: Collection[str]) -> bool:
    """Whether the image's repository is one the inventory trusts (exactly, or under an `ORG/*` entry), or a
    bare name: a Docker Official Image (Docker curates that namespace) or one built on the node (from the
    image folder the user put there, engine.image_dir, or by the user's own build)."""
    repo = imageref.repository(image)
    if repo is None:
        return False
    if "/" not in repo or "*" in trusted:
        return True
    for entry in trusted:
        text = str(entry)
        if text.endswith("/*"):
            prefix = imageref.repository(text[:-2] + "/x")
            if prefix and repo.startswith(prefix[:-1]):
                return True
        elif imageref.repository(text) == repo:
            return True
    return False


def _image_request(recipe: Mapping[str, Any], trusted: Iterable[str]) -> Request | None:
    """An engine image from outside the trusted repositories: code the recipe chooses, run as root in its
    container. Allowed only pinned: image:REPO@DIGEST (an unpinned one names no digest, so no allow fits)."""
    engine = recipe["engine"]
    image = str(engine.get("image") or "")
    if engine["runtime"] != "docker" or not image or image_trusted(image, tuple(trusted)):
        return None
    repo = imageref.repository(image)
    if repo is None:  # no image reference at all: the recipe's own error (model.problems) stops it
        return None
    digest = image.partition("@")[2] if imageref.pinned(image) else ""
    what = f"runs the image {image}, from outside the repositories the inventory trusts, as the engine"
    if not digest:
        what += " (not pinned by digest: `sparkplay apply` pins its tag; the allow names that digest)"
    return Request(f"image:{repo}@{digest}" if digest else f"image:{repo}", "engine.image", what)


def effective(
    recipe: Mapping[str, Any],
    inventory_knobs: Mapping[str, Any],
    bind: str | None,
    trusted: Iterable[str] = TRUSTED_IMAGES,
) -> list[Request]:
    """The requests that still come from the recipe once the inventory's own settings are applied: a knob
    the inventory sets (even to null) and an API address it chooses are the user's, not the recipe's."""
    return [
        r
        for r in requests(recipe, trusted)
        if not (r.name in PRIVILEGED_KNOBS and r.name in inventory_knobs) and not (r.name == "bind" and bind)
    ]


def enforce(
    recipe: Mapping[str, Any],
    allow: Collection[str],
    inventory_knobs: Mapping[str, Any],
    bind: str | None,
    trusted: Iterable[str] = TRUSTED_IMAGES,
) -> list[str]:
    """Refuse the first privileged request the inventory does not allow; return the names allowed and used."""
    used = []
    for request in effective(recipe, inventory_knobs, bind, trusted):
        if request.name.startswith("image:") and "@" not in request.name:
            raise BadInput(
                f"recipe {recipe['name']}: engine.image {recipe['engine']['image']} is not among the images the "
                "inventory trusts (serve_trusted_images) and is not pinned by digest",
                f"run `sparkplay apply {recipe['name']}` to pin its tag, then allow the image:REPO@DIGEST it "
                "prints; or add its repository to serve_trusted_images if you trust everything it publishes",
            )
        if request.name not in allow:
            raise BadInput(
                f"recipe {recipe['name']}: {request.key} {request.what}: a privileged request the inventory "
                "does not allow",
                f"if you trust the recipe, add {request.name!r} to serve_allow in the inventory; "
                "otherwise remove it from the recipe",
            )
        used.append(request.name)
    return used


def check_allow(allow: Iterable[Any], recipe: Mapping[str, Any] | None = None) -> frozenset[str]:
    """The inventory's serve_allow, each entry one a recipe could request. An entry of the old forms (a mod
    by name alone, a 12-digit hash) is refused with the form that replaces it (the exact entry, when the
    recipe in use asks for that code)."""
    names = []
    for entry in allow:
        text = str(entry)
        old = _OLD_FORM.fullmatch(text)
        if old:
            prefix = f"mod:{(recipe or {}).get('name')}/{old['mod']}@" if old["mod"] else f"{old['kind']}:"
            wanted = [r.name for r in (requests(recipe) if recipe else []) if r.name.startswith(prefix)]
            form = "mod:RECIPE/NAME@SHA256" if old["mod"] else f"{old['kind']}:RECIPE@SHA256"
            raise BadInput(
                f"serve_allow entry {text!r} names code by a short hash or a name alone, which another recipe's "
                "code could match",
                f"write {wanted[0]!r}"
                if wanted
                else f"write {form} (the whole sha256, as `sparkplay recipe import` and `up` print it)",
            )
        known = (
            text in PRIVILEGED_KNOBS
            or text == "bind"
            or (text.startswith("package:") and len(text) > 8)
            or (text.startswith("env:") and bool(_ENV_NAME.fullmatch(text[4:])))
            or bool(_SCOPED.fullmatch(text))
            or bool(_IMAGE_ALLOW.fullmatch(text) and imageref.repository(text[6:].partition("@")[0]))
        )
        if not known:
            raise BadInput(
                f"serve_allow names {text!r}, which is no privileged request",
                f"use {', '.join(sorted(PRIVILEGED_KNOBS))}, bind, package:NAME, env:NAME, mod:RECIPE/NAME@SHA256, "
                "pre_exec:RECIPE@SHA256, preamble:RECIPE@SHA256, code:RECIPE/--FLAG or image:REPO@sha256:DIGEST "
                "(as the import shows them)",
            )
        names.append(text)
    return frozenset(names)


def check_trusted(entries: Iterable[Any]) -> tuple[str, ...]:
    """The inventory's serve_trusted_images: image repositories (`ORG/NAME`, `REGISTRY/ORG/NAME`) or `ORG/*`."""
    found = []
    for entry in entries:
        text = str(entry)
        if text == "*":
            found.append(text)
            continue
        name = text[:-2] + "/x" if text.endswith("/*") else text
        if "@" in text or (not text.endswith("/*") and ":" in text.rsplit("/", 1)[-1]) or not imageref.repository(name):
            raise BadInput(
                f"serve_trusted_images names {text!r}, which is no image repository",
                "give repositories without tag or digest (vllm/vllm-openai, nvcr.io/nvidia/vllm) or ORG/* "
                "(nvcr.io/nvidia/*)",
            )
        found.append(text)
    return tuple(found)


def check_repo(repo: Any, key: str) -> str:
    """A Hugging Face repo id (org/name) that can only name a folder under the model root."""
    text = str(repo)
    parts = text.split("/")
    if (
        len(parts) != 2
        or len(text) > 96
        or not all(_REPO_PART.fullmatch(p) for p in parts)
        or ".." in text
        or "--" in text
        or any(p.endswith(".") for p in parts)
    ):
        raise BadInput(
            f"{key} {text!r} is not a Hugging Face repo id",
            "give org/name: letters, digits, '-', '_' and '.', no '..' or '--', at most 96 characters",
        )
    return text


def inside(path: str, folders: Iterable[str]) -> bool:
    """Whether an absolute path, normalised, is one of `folders` or beneath one."""
    norm = posixpath.normpath(path)
    normed = [posixpath.normpath(f) for f in folders]
    return any(norm == f or norm.startswith(f.rstrip("/") + "/") for f in normed)


def check_host_folder(value: Any, key: str, ours: Iterable[str]) -> str:
    """A host folder the user names for the engine to write (the disk prefix cache): absolute, plain, and
    neither a system folder, a home, nor inside sparkplay's own folders (the engine would write there)."""
    text = str(value)
    if not text.startswith("/") or ".." in text.split("/") or "\n" in text or "//" in text:
        raise BadInput(f"{key} {text!r} is not an absolute path", f"give {key} an absolute folder without '..'")
    norm = posixpath.normpath(text)
    ours = list(ours)
    overlaps = inside(norm, ours) or any(inside(o, [norm]) for o in ours)
    if norm in SYSTEM_FOLDERS or inside(norm, SYSTEM_TREES) or overlaps:
        raise BadInput(
            f"{key} {text!r} is a system or sparkplay folder",
            f"give {key} a folder of its own on a local disk, e.g. /nvme/sparkplay-prefix-cache",
        )
    return norm


def confine_args(args: Iterable[str], folders: Iterable[str], what: str) -> None:
    """A native engine runs on the host: every path its flags name stays inside sparkplay's folders."""
    folders = list(folders)
    previous = ""
    for arg in args:
        value = arg.split("=", 1)[1] if arg.startswith("-") and "=" in arg else arg
        flag = previous if previous.startswith("-") and value == arg else ""  # the flag this value belongs to
        shown = f"{flag} {arg}".strip()
        if ".." in value.split("/"):
            raise BadInput(f"{what} {shown!r} climbs out of its folder ('..')", "give a path without '..'")
        if value.startswith(("/", "~")) and (value.startswith("~") or not inside(value, folders)):
            raise BadInput(
                f"{what} {shown!r} names a host path outside sparkplay's folders ({', '.join(folders)})",
                "remove the flag, or name a file inside the model root",
            )
        previous = arg


_DEB_FIX = "give package names only (lower-case letters, digits, '+', '-', '.')"
_LIMIT_FIX = "give nofile, stack, nproc, core or memlock as NAME=SOFT[:HARD]"


def confine(recipe: Mapping[str, Any]) -> None:
    """Refuse what a recipe can only ask as an attack; every check names the field and the fix."""
    model, engine, serve = recipe["model"], recipe["engine"], recipe["serve"]
    if model.get("repo"):
        check_repo(model["repo"], "model.repo")
    for i, ckpt in enumerate(model.get("checkpoints") or []):
        check_repo(ckpt["repo"], f"model.checkpoints[{i}].repo")
    image_dir = engine.get("image_dir")
    if image_dir and (not _IMAGE_DIR.match(str(image_dir)) or ".." in str(image_dir).split("/")):
        raise BadInput(
            f"engine.image_dir {image_dir!r} is not a folder name under the image build root",
            "give a relative folder name (letters, digits, '.', '_', '-'), no '..'",
        )
    shm = serve.get("shm_size")
    if shm is not None and not _SHM.match(str(shm)):
        raise BadInput(f"serve.shm_size {shm!r} is not a size", "give a size such as 32g")
    # each item of these lists by its rule (the schema's, kept for a recipe edited after import)
    for key, items, ok, what, fix in (
        ("engine.packages", engine.get("packages"), _DEB_PACKAGE.fullmatch, "a Debian package name", _DEB_FIX),
        ("serve.ulimits", serve.get("ulimits"), CONTAINER_ULIMIT.match, "a resource limit sparkplay sets", _LIMIT_FIX),
    ):
        for item in items or []:
            if not ok(str(item)):
                raise BadInput(f"{key} {item!r} is not {what}", fix)
    user = serve.get("container_user")
    if user is not None and not CONTAINER_USER.match(str(user)):
        raise BadInput(f"serve.container_user {user!r} is not a user name or uid[:gid]", "give root, 0 or 1000:1000")
    for name in serve.get("env") or {}:
        twin = codepaths.refused_twin(str(name))
        if twin:
            raise BadInput(f"serve.env.{name} {twin}", "give the flag in serve.args, where it is checked, or remove it")
    if engine["runtime"] == "native":  # the engine's own argv is confined once planned (plan.build)
        for name, value in (serve.get("env") or {}).items():
            if ".." in str(value).split("/"):
                raise BadInput(f"serve.env.{name} {value!r} climbs out of its folder ('..')", "give it without '..'")


def confine_mounts(mounts: Iterable[Mapping[str, Any]], folders: Iterable[str], rank: int) -> None:
    """A container sees only sparkplay's folders of the host (and a folder the inventory allowed)."""
    folders = list(folders)
    for mount in mounts:
        source = str(mount["source"])
        if not source.startswith("/") or ".." in source.split("/") or not inside(source, folders):
            raise BadInput(
                f"rank {rank}'s container would see the host path {source}, outside sparkplay's folders",
                "remove what asks for it from the recipe, or allow it in the inventory (serve_allow)",
            )
