"""What every part of the serve tool shares: endpoints, the API's key, HTTP, the units' journals."""

from __future__ import annotations

import argparse
import json
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

JOURNAL_LINES = 40


TCP_ESTABLISHED, TCP_CLOSE_WAIT, TCP_LISTEN = "01", "08", "0A"


PROC = Path("/proc")


def _endpoint(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    return host.strip("[]"), int(port)


def main_uid(unit: str) -> int | None:
    """The user the unit's main process runs as, or None while it has none."""
    pid = unit_show(unit, "MainPID").get("MainPID", "0")
    try:
        status = (PROC / pid / "status").read_text() if pid not in ("", "0") else ""
    except OSError:
        return None
    uid = next((line.split()[1] for line in status.splitlines() if line.startswith("Uid:")), None)
    return int(uid) if uid is not None else None


def unit_show(unit: str, *props: str, peer: str | None = None) -> dict[str, str]:
    argv = ["systemctl", "show", unit, "--property=" + ",".join(props)]
    if peer:
        argv = ["ssh", "-o", "BatchMode=yes", "-o", "ConnectTimeout=5", peer, *argv]
    out = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False).stdout
    return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)


# the API's key, when the engine has one: read from the 0600 env file (never an argument of this tool)
API_KEY: list[str] = []


def env_file_value(path: str, name: str, native: bool) -> str | None:
    """`name`'s value in an env file sparkplay wrote: systemd's quoted form (native) or docker's bare one."""
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        key, sep, value = line.partition("=")
        if sep and key == name:
            if native and len(value) >= 2 and value[0] == value[-1] == '"':
                out, escaped = [], False
                for c in value[1:-1]:
                    if escaped or c != "\\":
                        out.append(c)
                        escaped = False
                    else:
                        escaped = True
                return "".join(out)
            return value
    return None


def use_api_key(args: argparse.Namespace) -> None:
    if getattr(args, "api_key_env", None):
        key = env_file_value(args.env_file, args.api_key_env, args.env_format == "native")
        API_KEY[:] = [key] if key else []


def http_json(url: str, body: dict[str, Any] | None = None, timeout: float = 10.0) -> tuple[int, Any]:
    data = json.dumps(body).encode() if body is not None else None
    headers = {"Content-Type": "application/json"}
    if API_KEY:
        headers["Authorization"] = f"Bearer {API_KEY[0]}"
    request = urllib.request.Request(url, data=data, headers=headers)  # noqa: S310
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:  # noqa: S310 - our own API URL
            text = response.read().decode("utf-8", "replace")
            status = response.status
    except urllib.error.HTTPError as exc:
        return exc.code, None
    except (OSError, ValueError):
        return 0, None
    try:
        return status, json.loads(text)
    except ValueError:
        return status, text


def probe(url: str, model: str) -> dict[str, Any]:
    health, _ = http_json(f"{url}/health", timeout=5)
    status, listing = http_json(f"{url}/v1/models", timeout=5) if health == 200 else (0, None)
    names = []
    if status == 200 and isinstance(listing, dict):
        names = [str(m.get("id")) for m in listing.get("data") or [] if isinstance(m, dict)]
    return {"health": health == 200, "models": names, "served": model in names}


# what an engine answers for a route its model does not serve (llama.cpp, vLLM, SGLang): try the next kind
NOT_THIS_KIND = (400, 404, 405, 422, 501)


def completion(url: str, model: str, prompt: str, max_tokens: int, timeout: float = 120) -> dict[str, Any] | None:
    """The model's answer to `prompt` through the endpoint it serves: a chat completion; for a model that
    refuses one (an embedding or reranking model), an embedding, then a ranking. None: no proper answer."""
    started = time.monotonic()
    body = {
        "model": model,
        "messages": [{"role": "user", "content": prompt}],
        "temperature": 0,
        "max_tokens": max_tokens,
    }
    status, answer = http_json(f"{url}/v1/chat/completions", body, timeout=timeout)
    if status == 200 and isinstance(answer, dict) and answer.get("choices"):
        message = answer["choices"][0].get("message") or {}
        text = message.get("content") or message.get("reasoning_content") or ""
        if not text:
            return None
        return {
            "text": text,
            "tokens": (answer.get("usage") or {}).get("completion_tokens"),
            "seconds": round(time.monotonic() - started, 3),
        }
    if status not in NOT_THIS_KIND:
        return None
    status, answer = http_json(f"{url}/v1/embeddings", {"model": model, "input": prompt}, timeout=timeout)
    if status == 200 and isinstance(answer, dict) and answer.get("data"):
        vector = (answer["data"][0] or {}).get("embedding") if isinstance(answer["data"][0], dict) else None
        if not isinstance(vector, list) or not vector or not all(isinstance(x, int | float) for x in vector):
            return None
        return {
            "text": f"an embedding of {len(vector)} numbers",
            "endpoint": "embeddings",
            "tokens": (answer.get("usage") or {}).get("prompt_tokens"),
            "seconds": round(time.monotonic() - started, 3),
        }
    if status not in NOT_THIS_KIND:
        return None
    documents = [prompt, "The sky is blue."]
    status, answer = http_json(
        f"{url}/v1/rerank", {"model": model, "query": prompt, "documents": documents}, timeout=timeout
    )
    results = answer.get("results") if status == 200 and isinstance(answer, dict) else None
    if not isinstance(results, list) or len(results) != len(documents):
        return None
    return {
        "text": f"a ranking of {len(results)} documents",
        "endpoint": "rerank",
        "tokens": None,
        "seconds": round(time.monotonic() - started, 3),
    }


def journal(unit: str, peer: str | None = None) -> str:
    argv = ["journalctl", "-u", unit, "-n", str(JOURNAL_LINES), "--no-pager", "-o", "short-iso"]
    if peer:
        argv = ["ssh", "-o", "BatchMode=yes", "-o", "ConnectTimeout=5", peer, *argv]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"(journal unavailable: {exc})"
    return (done.stdout or done.stderr).strip()


def _read_json(path: str) -> Any:
    try:
        return json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return None


def _write_json(path: str, data: Any) -> None:
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    scratch = target.with_name(target.name + ".tmp")
    scratch.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    scratch.replace(target)
