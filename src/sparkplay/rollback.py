"""Whether a kept deployment still fits its node's memory before it is put back.

A way back is checked as `up` checks a plan (issue 54): what it was allowed (layout.rollback_refusal), and
admission: the claim its record states, beside what the node serves now. Deployments added since it last
ran may have taken the memory it had; putting it back anyway would have the kernel kill one of them.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from sparkplay import admission, probed
from sparkplay.served import records


def kept_record(doc: Mapping[str, Any]) -> dict[str, Any] | None:
    """The record among the kept deployment's files (the JSON file naming its unit), else None."""
    for entry in doc.get("files") or []:
        content = entry.get("content") if isinstance(entry, Mapping) else None
        if not isinstance(content, str) or not content.lstrip().startswith("{"):
            continue
        try:
            record = json.loads(content)
        except ValueError:
            continue
        if isinstance(record, dict) and record.get("unit") == doc.get("unit") and "role" in record:
            return record
    return None


def memory_refusal(doc: Any, probe: Mapping[str, Any], record_path: str, host: str, force: bool = False) -> str | None:
    """Why the kept deployment `doc` does not fit on `host` now (None when it does, states no claim, or the
    inventory forces admission): its record's claim against MemTotal less the reserve and the claims of the
    other deployments the node's records show (`probe`: sparkplay_probe's read of /proc/meminfo, the primary's
    record at `record_path` and the added ones), and MemAvailable with the memory of the deployment it
    replaces given back."""
    if not isinstance(doc, Mapping) or force:
        return None
    kept = kept_record(doc)
    claim = int(((kept or {}).get("claim") or {}).get("bytes") or 0)
    text = (probe.get("contents") or {}).get("/proc/meminfo")
    if kept is None or claim <= 0 or not text:
        return None
    total, available = admission.meminfo(text)
    slot = kept.get("slot")
    here = records({host: probed.record_texts(probe, record_path)})
    own = max((_bytes(r) for r in here if r.get("slot") == slot), default=0)
    others = [
        admission.Claim(str(r.get("recipe")), host, _bytes(r), str((r.get("claim") or {}).get("how") or "its record"))
        for r in here
        if r.get("slot") != slot and _bytes(r) > 0
    ]
    wanted = admission.Claim(str(doc.get("recipe")), host, claim, str((kept.get("claim") or {}).get("how")))
    short = admission.shortfalls([wanted], others, {host: available + own}, {host: total})
    if not short:
        return None
    return (
        f"{short[0].line()}: the kept deployment no longer fits beside what the node serves now; stop one "
        "(sparkplay stop NAME), or put it back anyway with serve_force_admit (--force-admit)"
    )


def _bytes(record: Mapping[str, Any]) -> int:
    try:
        return int((record.get("claim") or {}).get("bytes") or 0)
    except (TypeError, ValueError):
        return 0
