"""What `doctor.yml` finds: the table it prints (a block per node, a row per cable twin) and the bundle of
facts `sparkplay doctor --bundle` writes for a bug report, with every secret taken out."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

COLUMNS = (
    "node",
    "rank",
    "preflight",
    "transport",
    "twin",
    "link",
    "mtu",
    "address",
    "jumbo ping",
    "ssh",
    "ib_write_bw",
)


def _rows(host: str, doc: Mapping[str, Any]) -> list[tuple[str, ...]]:
    fabric = doc.get("fabric") or {}
    env = doc.get("env") or {}
    twins = fabric.get("twins") or ["-"]
    rows = []
    for i, twin in enumerate(twins):
        netdev = (fabric.get("netdevs") or {}).get(twin, {})
        pings = [p for p in doc.get("pings", []) if p["ifname"] == twin]
        ssh = [s for s in doc.get("ssh", []) if s.get("twin_index") == i]
        bw = [b for b in doc.get("bandwidth", []) if b.get("twin") == twin]
        rows.append(
            (
                host if i == 0 else "",
                str(doc.get("rank", "?")) if i == 0 else "",
                ("ok" if doc.get("preflight") == "ok" else "FAILED") if i == 0 else "",
                (env.get("SPARKPLAY_FABRIC_TRANSPORT") or "no fabric.env") if i == 0 else "",
                twin,
                "up" if netdev.get("carrier") else "down" if netdev else "-",
                str(netdev.get("mtu", "-")),
                ",".join((doc.get("addresses") or {}).get(twin, [])) or "-",
                " ".join(f"{'ok' if p['ok'] else 'FAIL'}:{p['peer']}" for p in pings) or "-",
                " ".join(f"{'ok' if s['ok'] else 'FAIL'}:{s['peer']}" for s in ssh) or "-",
                " ".join(f"{b['gbps']} Gb/s" if b.get("gbps") is not None else "FAIL" for b in bw)
                or doc.get("bandwidth_note", "-"),
            )
        )
    return rows


def doctor_table(hosts: Iterable[str], hostvars: Mapping[str, Any]) -> list[str]:
    """Fixed-width lines, then each node's problems spelled out."""
    rows: list[tuple[str, ...]] = [COLUMNS]
    notes: list[str] = []
    for host in hosts:
        doc = hostvars[host].get("doctor_findings") or {}
        rows.extend(_rows(host, doc))
        if doc.get("preflight") not in (None, "ok"):
            notes.append(f"{host}: preflight: {doc['preflight']}")
        for problem in (doc.get("fabric") or {}).get("problems", []):
            notes.append(f"{host}: fabric: {problem}")
        if doc.get("serving"):
            notes.append(f"{host}: serving: {doc['serving']}")
        if doc.get("nccl_problem"):
            notes.append(f"{host}: WARNING {doc['nccl_problem']}")
        if doc.get("env"):
            keys = ("NCCL_SOCKET_IFNAME", "NCCL_IB_HCA", "NCCL_IB_GID_INDEX", "NCCL_IB_DISABLE")
            shown = " ".join(f"{k}={doc['env'][k]}" for k in keys if k in doc["env"])
            notes.append(f"{host}: fabric.env: {shown}")
    widths = [max(len(row[i]) for row in rows) for i in range(len(COLUMNS))]
    lines = ["  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row)).rstrip() for row in rows]
    return [*lines, "", *notes]


def _inet(stdout: str) -> list[str]:
    import json

    try:
        shown = json.loads(stdout)[0]
    except (ValueError, IndexError, KeyError):
        return []
    return [a["local"] for a in shown.get("addr_info", []) if a.get("family") == "inet"]


def collect(
    addr_results: Iterable[Mapping[str, Any]],
    ping_results: Iterable[Mapping[str, Any]],
    ssh_results: Iterable[Mapping[str, Any]],
    env_text: str | None,
    found: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """A node's findings from the registered results of doctor.yml's read-only probes, beside what the role
    `found` already (its preflight, its fabric, why it is not serving, ...)."""
    ssh: list[dict[str, Any]] = []
    seen: dict[str, int] = {}
    for result in ssh_results:
        if "rc" not in result:  # skipped (not rank 0)
            continue
        peer = result["item"]["peer"]
        index = seen.get(peer, 0)
        seen[peer] = index + 1
        ssh.append({"peer": peer, "address": result["item"]["address"], "twin_index": index, "ok": result["rc"] == 0})
    env: dict[str, str] = {}
    for line in (env_text or "").splitlines():
        if line.strip() and not line.lstrip().startswith("#") and "=" in line:
            key, value = line.split("=", 1)
            env[key.strip()] = value.strip()
    return {
        **(found or {}),
        "addresses": {r["item"]: _inet(r.get("stdout", "")) for r in addr_results if "item" in r},
        "pings": [
            {"ifname": r["item"]["ifname"], "peer": r["item"]["peer"], "ok": r.get("rc") == 0}
            for r in ping_results
            if "item" in r
        ],
        "ssh": ssh,
        "env": env or None,
    }


def ib_write_bw_gbps(output: str) -> float | None:
    """BW average [Gb/sec] from `ib_write_bw --report_gbits` output, or None."""
    lines = output.splitlines()
    for i, line in enumerate(lines):
        if "BW average" in line:
            for row in lines[i + 1 :]:
                fields = row.split()
                if len(fields) >= 4 and fields[0].isdigit():
                    try:
                        return float(fields[3])
                    except ValueError:
                        return None
    return None


# -- the diagnostics bundle (`sparkplay doctor --bundle FILE`) -------------------------------

OUTPUT_LIMIT = 20_000  # characters of one command's output kept in the bundle
SECRET_KEY = re.compile(r"(token|secret|passw|private|api[_-]?key|credential)", re.IGNORECASE)
_SECRET_WORD = r"(?:token(?![a-z])|secret|passw(?:or)?d?(?![a-z])|api[_-]?key|credential)"  # noqa: S105
SECRET_IN_TEXT = (
    # a secret-looking key whose value is a list (an engine's argument dump: 'api_key': ['k1', 'k2'])
    re.compile(
        rf"(?i)((?:--)?[A-Za-z0-9_.-]*{_SECRET_WORD}[A-Za-z0-9_]*[\"']?[ \t]*[=:][ \t]*)(?!<redacted>)"
        r"\[[^\]\n]+\]"
    ),
    re.compile(
        rf"(?i)((?:--)?[A-Za-z0-9_.-]*{_SECRET_WORD}"
        r"[A-Za-z0-9_]*[\"']?[ \t]*[=:][ \t]*[\"']?)(?!<redacted>)[^\s\"',;}]+"
    ),
    re.compile(r"(?i)(--[a-z-]*(?:token|secret|password|api-key)[a-z-]*[ \t]+)(?!<redacted>)(?!-)\S+"),
    re.compile(r"(?i)(\bbearer[ \t]+)(?!<redacted>)[^\s\"']+"),
    re.compile(r"(?i)(\bauthorization[\"']?[ \t]*[=:][ \t]*[\"']?(?:basic|token|digest)[ \t]+)(?!<redacted>)[^\s\"']+"),
    # credentials in a URL: scheme://user:PASSWORD@host
    re.compile(r"(?i)(\b[a-z][a-z0-9+.-]*://[^\s/:@\"']*:)(?!<redacted>)[^\s/@\"']+(?=@)"),
)
# tokens recognisable by their shape wherever they stand: Hugging Face, OpenAI-style, GitHub, GitLab, NVIDIA
# NGC, Slack, AWS access key ids
SECRET_VALUE = re.compile(
    r"\b(hf_[A-Za-z0-9]{20,}|sk-[A-Za-z0-9_-]{20,}|gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,}"
    r"|glpat-[A-Za-z0-9_-]{16,}|nvapi-[A-Za-z0-9_-]{20,}|xox[abprs]-[A-Za-z0-9-]{10,}|AKIA[0-9A-Z]{16})(?![A-Za-z0-9_-])"
)
REDACTED = "<redacted>"


def command_result(result: Mapping[str, Any]) -> dict[str, Any] | None:
    """One probe's outcome for the bundle: exit status and output, cut to a sane size (skipped: None)."""
    if "rc" not in result and not result.get("failed"):
        return None
    return {
        "rc": result.get("rc"),
        "stdout": str(result.get("stdout") or "")[-OUTPUT_LIMIT:],
        "stderr": str(result.get("stderr") or result.get("msg") or "")[-2000:],
    }


def commands(results: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """The bundle's commands: each probe's name (its loop item's) -> its outcome (command_result)."""
    return {str((r.get("item") or {}).get("name")): command_result(r) for r in results}


def redact(value: Any, secrets: Iterable[str] = ()) -> Any:
    """`value` with every secret gone: values under secret-looking keys, token-shaped strings, and the
    given secrets (the HF token the controller has) wherever they appear."""
    known = [s for s in secrets if s and len(s) >= 8]

    def clean(item: Any, key: str = "") -> Any:
        if SECRET_KEY.search(key) and item not in (None, "", [], {}):
            return REDACTED
        if isinstance(item, Mapping):
            return {str(k): clean(v, str(k)) for k, v in item.items()}
        if isinstance(item, list | tuple):
            return [clean(v) for v in item]
        if isinstance(item, str):
            text = SECRET_VALUE.sub(REDACTED, item)
            for secret in known:
                text = text.replace(secret, REDACTED)
            # anywhere in a line (env files, journals, argv, JSON): KEY=VALUE or KEY: VALUE whose key looks
            # secret, a secret-looking flag's value, a bearer token
            for pattern in SECRET_IN_TEXT:
                text = pattern.sub(rf"\1{REDACTED}", text)
            return text
        return item

    return clean(value)


def bundle_records(bundle: Mapping[str, Any], meta: Mapping[str, Any], secrets: Iterable[str] = ()) -> list[dict]:
    """The bundle as NDJSON records: one `meta`, one `deployment`, and per node one record per section."""
    records: list[dict[str, Any]] = [{"kind": "meta", **meta}]
    records.append({"kind": "deployment", "deployment": bundle.get("deployment")})
    findings = bundle.get("findings") or {}
    for host, node in sorted((bundle.get("nodes") or {}).items()):
        node = node or {}
        records.append({"kind": "node", "host": host, "section": "host", "data": node.get("host")})
        records.append({"kind": "node", "host": host, "section": "fabric", "data": node.get("fabric")})
        records.append({"kind": "node", "host": host, "section": "checks", "data": findings.get(host)})
        for name, result in sorted((node.get("commands") or {}).items()):
            records.append({"kind": "node", "host": host, "section": name, "data": result})
    return [redact(record, secrets) for record in records]
