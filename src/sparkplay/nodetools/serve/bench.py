"""The bench on the leader: the batch-invariance check, then llama-benchy, as an unprivileged user."""

from __future__ import annotations

import argparse
import functools
import http.server
import os
import statistics
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from .common import API_KEY, _read_json, _write_json, http_json, use_api_key

# Fixed prompts of the invariance check: short, deterministic tasks whose answers run to the token limit.
INVARIANCE_PROMPTS = (
    "Count from one to thirty in words, separated by commas.",
    "List the planets of the solar system in order from the sun, with one fact about each.",
    "Write the English alphabet backwards, one letter per line.",
    "Explain step by step how to multiply 47 by 53.",
)


def answer_tokens(url: str, model: str, prompt: str, max_tokens: int, timeout: float) -> tuple[list[str], str] | None:
    """A temperature-0 answer as its tokens (the engine's logprobs), else its characters, and which of the two."""
    body = {
        "model": model,
        "messages": [{"role": "user", "content": prompt}],
        "temperature": 0,
        "seed": 0,
        "max_tokens": max_tokens,
        "logprobs": True,
    }
    status, answer = http_json(f"{url}/v1/chat/completions", body, timeout=timeout)
    if status != 200 or not isinstance(answer, dict) or not answer.get("choices"):
        return None
    choice = answer["choices"][0]
    content = (choice.get("logprobs") or {}).get("content")
    if isinstance(content, list) and content and all(isinstance(c, dict) and "token" in c for c in content):
        return [str(c["token"]) for c in content], "token"
    message = choice.get("message") or {}
    return list(message.get("content") or message.get("reasoning_content") or ""), "character"


def first_difference(alone: list[str], among: list[str]) -> int | None:
    for position, (a, b) in enumerate(zip(alone, among, strict=False)):
        if a != b:
            return position
    return None if len(alone) == len(among) else min(len(alone), len(among))


def invariance(url: str, model: str, levels: list[int], max_tokens: int, timeout: float) -> dict[str, Any]:
    """The same prompts alone, then among `level` concurrent requests: identical outputs, or where they part."""
    ask = functools.partial(answer_tokens, url, model, max_tokens=max_tokens, timeout=timeout)
    alone = {prompt: ask(prompt) for prompt in INVARIANCE_PROMPTS}
    units = {found[1] for found in alone.values() if found}
    differences: list[dict[str, Any]] = []
    for prompt, found in alone.items():
        if found is None:
            differences.append({"prompt": prompt, "concurrency": 1, "why": "no answer alone"})
    for level in (c for c in levels if c > 1):
        prompts = [INVARIANCE_PROMPTS[i % len(INVARIANCE_PROMPTS)] for i in range(level)]
        with ThreadPoolExecutor(max_workers=level) as pool:
            answers = list(pool.map(ask, prompts))
        for request, (prompt, found) in enumerate(zip(prompts, answers, strict=True)):
            reference = alone[prompt]
            if reference is None:
                continue
            if found is None:
                differences.append({"prompt": prompt, "concurrency": level, "request": request, "why": "no answer"})
                continue
            position = first_difference(reference[0], found[0])
            if position is not None:
                differences.append(
                    {
                        "prompt": prompt,
                        "concurrency": level,
                        "request": request,
                        "position": position,
                        "alone": "".join(reference[0][position : position + 8]),
                        "among": "".join(found[0][position : position + 8]),
                    }
                )
    return {
        "prompts": len(INVARIANCE_PROMPTS),
        "levels": [c for c in levels if c > 1],
        "max_tokens": max_tokens,
        "unit": units.pop() if len(units) == 1 else "token",
        "identical": not differences,
        "differences": differences,
    }


def bare_latency_ms(url: str, model: str, runs: int = 5) -> float:
    """The median of one-token requests sent with nothing but urllib: the floor the bench client adds to."""
    body = {"model": model, "messages": [{"role": "user", "content": "Hi"}], "temperature": 0, "max_tokens": 1}
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        http_json(f"{url}/v1/chat/completions", body, timeout=120)
        times.append((time.perf_counter() - started) * 1000)
    return round(statistics.median(times), 2)


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args: Any) -> None:  # the bench's output stays its own
        pass


def serve_corpus(corpus: str) -> tuple[str, http.server.ThreadingHTTPServer | None]:
    """A local corpus file as a loopback URL (llama-benchy reads its text from a URL); a URL as it is."""
    if "://" in corpus:
        return corpus, None
    path = Path(corpus).resolve()
    handler = functools.partial(_QuietHandler, directory=str(path.parent))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return f"http://127.0.0.1:{server.server_address[1]}/{path.name}", server


def drop_to(user: str, home: str | None) -> None:
    """Become `user` for good (groups, gid, uid), with HOME at `home`: what root read stays read, nothing more."""
    import pwd

    entry = pwd.getpwnam(user)
    os.setgroups([])
    os.setgid(entry.pw_gid)
    os.setuid(entry.pw_uid)
    if entry.pw_uid != 0:
        try:
            os.setuid(0)
        except PermissionError:
            pass
        else:  # pragma: no cover - the kernel refused to drop
            raise SystemExit(f"could not drop root for {user}")
    os.environ["HOME"] = home or entry.pw_dir


# llama-benchy takes its key only as --api-key, which every local user could read in the process table: a
# small launcher puts it into the program's own argument list, in its memory, from the environment (readable
# by the same user and root alone), then runs the console script's entry point.
BENCHY_KEY_ENV = "SPARKPLAY_BENCH_API_KEY"


BENCHY_LAUNCHER = """
import os, sys
from importlib.metadata import entry_points
program = sys.argv.pop(1)
(entry,) = [e for e in entry_points(group="console_scripts") if e.name == os.path.basename(program)]
sys.argv[0] = program
sys.argv[1:1] = ["--api-key", os.environ.pop("SPARKPLAY_BENCH_API_KEY")]
sys.exit(entry.load()())
"""


def benchy_argv(benchy: str, args: list[str]) -> tuple[list[str], dict[str, str]]:
    """llama-benchy's command line and environment: the key, if the API has one, only in the environment."""
    if not API_KEY:
        return [benchy, *args], dict(os.environ)
    python = str(Path(benchy).parent / "python")
    return [python, "-c", BENCHY_LAUNCHER, benchy, *args], {**os.environ, BENCHY_KEY_ENV: API_KEY[0]}


def cmd_bench(args: argparse.Namespace) -> int:
    use_api_key(args)
    if args.as_user:
        drop_to(args.as_user, args.home)
    result: dict[str, Any] = {
        "url": args.url,
        "model": args.model,
        "started": time.time(),
        "profile": {
            "pp": args.pp,
            "tg": args.tg,
            "depth": args.depth,
            "concurrency": args.concurrency,
            "runs": args.runs,
        },
    }
    result["invariance"] = invariance(args.url, args.model, args.concurrency, args.invariance_tokens, args.timeout)
    book_url, server = serve_corpus(args.corpus)
    report = Path(args.out).with_suffix(".benchy.json")
    argv, env = benchy_argv(
        args.benchy,
        [
            "--base-url",
            f"{args.url}/v1",
            "--model",
            args.model,
            "--tokenizer",
            args.tokenizer,
            "--book-url",
            book_url,
            "--pp",
            *map(str, args.pp),
            "--tg",
            *map(str, args.tg),
            "--depth",
            *map(str, args.depth),
            "--concurrency",
            *map(str, args.concurrency),
            "--runs",
            str(args.runs),
            "--latency-mode",
            "generation",
            "--skip-coherence",
            "--format",
            "json",
            "--save-result",
            str(report),
        ],
    )
    try:
        proc = subprocess.run(argv, env=env, capture_output=True, text=True, check=False, timeout=args.timeout * 10)
    finally:
        if server:
            server.shutdown()
    result["benchy"] = _read_json(str(report))
    result["benchy_log"] = (proc.stdout + proc.stderr)[-4000:]
    result["latency"] = {"bare_ms": bare_latency_ms(args.url, args.model)}
    if isinstance(result["benchy"], dict) and "latency_ms" in result["benchy"]:
        benchy_ms, bare_ms = float(result["benchy"]["latency_ms"]), result["latency"]["bare_ms"]
        result["latency"].update(benchy_ms=round(benchy_ms, 2), overhead_ms=round(benchy_ms - bare_ms, 2))
    result["finished"] = time.time()
    _write_json(args.out, result)
    if proc.returncode != 0 or not isinstance(result["benchy"], dict):
        print(f"llama-benchy failed (exit {proc.returncode}): {result['benchy_log'][-800:]}", file=sys.stderr)
        return 1
    return 0 if result["invariance"]["identical"] else 3
