"""What serves is what was verified: the words of a checkpoint refused or repaired, and the deployments whose
engines serve a file replaced since they started (the checkpoint role's findings, `verify`'s restarts)."""

from __future__ import annotations

import posixpath
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from sparkplay import plays
from sparkplay.errors import BadInput

# What differed in a checkpoint file, in words (the node tool's one-word findings: state.verify, record.py)
DIFFERED = {
    "sha256": "its bytes differ",
    "size": "its size differs (truncated or grown)",
    "missing": "missing",
    "type": "no longer a plain file",
    "link": "a link to somewhere else",
    "not in the manifest": "a file added",
    "not in the record": "a file added",
}


def differences(bad: Mapping[str, str], limit: int = 6) -> str:
    """'model.gguf: its bytes differ; tokenizer.json: missing' (and how many more), sorted by path."""
    items = sorted(bad.items())
    text = "; ".join(f"{path}: {DIFFERED.get(why, why)}" for path, why in items[:limit])
    return text + (f" (and {len(items) - limit} more)" if len(items) > limit else "")


def refusal(source: Mapping[str, Any], answer: Mapping[str, Any], host: str) -> str:
    """Why rank 0's copy is refused, naming each file, and the fixes (one line: the role's failure message)."""
    name, dest = source.get("name"), source.get("dest")
    when = answer.get("recorded_at")
    since = f"since its first verification ({when})" if when else "since it was hashed into its manifest"
    fetch = ", or remove it and run again to download it anew" if source.get("kind") == "hf" else ""
    return (
        f"Rank 0's copy of {name} ({dest} on {host}) changed {since}: {differences(answer.get('bad') or {})}. "
        f"Nothing was mirrored. Restore the file from a good copy{fetch}; to serve these bytes as they are, "
        f"run `sparkplay up RECIPE --accept-changed {name}` (checkpoint_accept_changed) or give it a new revision."
    )


def finding(source: Mapping[str, Any], host: str, result: Mapping[str, Any]) -> list[dict[str, Any]]:
    """A receiving rank's mirror result as findings: each file its verified copy had wrong, re-sent from rank 0."""
    found = result.get("found") or {}
    return [
        {"checkpoint": source.get("name"), "host": host, "file": path, "what": why, "repaired": True}
        for path, why in sorted(found.items())
    ]


def verify_lines(findings: Sequence[Mapping[str, Any]]) -> list[str]:
    """What `verify` (and `up`) found on the ranks, a line per file."""
    return [
        f"{f['host']}: {f['checkpoint']}/{f['file']}: {DIFFERED.get(f['what'], f['what'])}; "
        + ("re-mirrored from rank 0's verified copy" if f.get("repaired") else "not repaired")
        for f in findings
    ]


def accepted_name(name: str) -> str:
    """A checkpoint name given to --accept-changed: a plain name, as the deployment's checkpoints are named."""
    if not name or "/" in name or name.startswith(".") or any(c.isspace() or ord(c) < 32 for c in name):
        raise BadInput(
            f"--accept-changed {name!r} is not a checkpoint name", "give the name the refusal printed (e.g. lab-tiny)"
        )
    return name


def replaced_units(explained: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """From a looped `explain` over a node's records: each deployment whose engine here serves a file replaced
    since it started ({unit, recipe, role, host, replaced: [paths]})."""
    found = []
    for result in explained:
        record = result.get("item") or {}
        replaced = plays.answer(result, {}).get("replaced") or []
        if replaced and record.get("unit"):
            found.append(
                {
                    "unit": record["unit"],
                    "recipe": record.get("recipe"),
                    "role": record.get("role"),
                    "host": record.get("host"),
                    "replaced": [str(r.get("path")) for r in replaced if isinstance(r, Mapping)],
                }
            )
    return found


def explain_argv(record: Mapping[str, Any], tool: str, fabric_env: str) -> list[str]:
    """The serve tool's `explain` for one deployment record: why its rank is not serving, and the files under its
    folders replaced since its engine started."""
    argv = [str(record.get("tool") or tool), "explain", "--unit", str(record["unit"]), "--fabric-env", fabric_env]
    return argv + [f"--model-dir={folder}" for folder in record.get("models") or []]


def probe_argv(record: Mapping[str, Any], tool: str) -> list[str]:
    """The serve tool's `probe` of a leader's API (its key read by root from the 0600 env file, never an arg)."""
    argv = [str(record.get("tool") or tool), "probe", "--url", str(record.get("api_url"))]
    argv += ["--model", str(record.get("served_name")), "--unit", str(record["unit"])]
    if record.get("runtime") == "docker":
        argv += ["--container", str(record.get("container"))]
    if record.get("api_key_env"):
        argv += ["--api-key-env", str(record["api_key_env"]), "--env-file", str(record.get("env_file"))]
        argv += ["--env-format", str(record.get("runtime"))]
    if record.get("state_dir"):
        argv += ["--receipt", receipt_file(str(record["state_dir"]), str(record["unit"]))]
    return argv


def receipt_file(state: str, unit: str) -> str:
    """Where the leader keeps its deployment's last start's receipt (the serve tool's `ready` writes it after
    a start, `probe` reads it for status): under the state folder, named by the deployment's unit."""
    return posixpath.join(state, "receipts", f"{unit}.json")


def reload_plan(records: Sequence[Mapping[str, Any]], replaced: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """This node's part of the restarts: every deployment with a replaced file on any rank restarts on every
    rank, its workers first, then its leader (`replaced`: the cluster's rows, from replaced_units)."""
    units = sorted({str(row["unit"]) for row in replaced if row.get("unit")})
    mine = [dict(r) for r in records if r.get("unit") in units]
    return {
        "units": units,
        "workers": [r for r in mine if r.get("role") != "leader"],
        "leaders": [r for r in mine if r.get("role") == "leader"],
    }
