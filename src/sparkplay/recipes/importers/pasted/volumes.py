"""Host folders a pasted docker command or compose service mounts, which sparkplay never mounts: each named at
import as not applied, and a flag that names a file inside one (a plugin, a chat template) said to fail."""

from __future__ import annotations

import posixpath
import re

from sparkplay.recipes.raw import RawRecipe

HF_CACHE = re.compile(r"(^|/)(\.cache/huggingface|huggingface|hf[-_]?cache)(/|$)", re.IGNORECASE)


def mount_note(spec: str) -> str:
    target = spec.split(":")[1] if ":" in spec and not spec.startswith(("type=", "source=", "src=")) else spec
    if HF_CACHE.search(target) or HF_CACHE.search(spec.split(":")[0]):
        return (
            f"{spec}: the Hugging Face cache: sparkplay downloads the model once, mirrors it to every rank "
            "and mounts its own model root instead"
        )
    return (
        f"{spec}: not applied: sparkplay mounts no host folder a recipe names (its engines see the model "
        "root and their own cache; docs/security.md); a model served from there is named by "
        "model.repo"
    )


def target(spec: str) -> str | None:
    """The folder a `-v`/`--mount` spec shows inside the container (None: not one that names a folder)."""
    if spec.startswith(("type=", "source=", "src=")):
        fields = dict(f.split("=", 1) for f in spec.split(",") if "=" in f)
        found = fields.get("target") or fields.get("dst") or fields.get("destination")
    else:
        parts = spec.split(":")
        found = parts[1] if len(parts) > 1 else None
    return posixpath.normpath(found) if found and found.startswith("/") else None


def files_in(specs: list[str], raw: RawRecipe) -> None:
    """A flag naming a file inside a volume sparkplay does not mount (a plugin, a chat template on the host
    the text ran on) would stop the engine at its start: said now, at import, with the fix."""
    targets = [t for spec in specs if (t := target(spec)) and not HF_CACHE.search(t) and t != "/"]
    for i, token in enumerate(raw.args):
        flag, equals, value = token.partition("=")
        if not equals:
            flag, value = (raw.args[i - 1], token) if i and raw.args[i - 1].startswith("-") else ("", token)
        if not flag.startswith("-") or not value.startswith("/"):
            continue
        where = next((t for t in targets if posixpath.normpath(value).startswith(t.rstrip("/") + "/")), None)
        if where:
            raw.note(
                "serve.args",
                "derived",
                f"{flag} {value}: a file in the volume {where}, which sparkplay does not mount: the engine will "
                "not find it and will not start; put the file in the model's folder (the checkpoint) and name it "
                "there, or drop the flag",
            )
