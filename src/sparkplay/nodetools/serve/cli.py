"""The command line of sparkplay-serve (the package's docstring has every subcommand)."""

from __future__ import annotations

import argparse

from .bench import cmd_bench
from .drain import add_arguments as add_drain_arguments
from .drain import cmd_drain
from .explain import cmd_explain
from .gateway_main import add_arguments as add_gateway_arguments
from .gateway_main import cmd_gateway
from .group import cmd_restart_workers
from .image import add_arguments as add_image_arguments
from .memory import cmd_memguard, cmd_release
from .ports import cmd_run, cmd_wait_ports
from .ready import cmd_probe, cmd_ready, cmd_verify_unit
from .swapper import add_arguments as add_swapper_arguments
from .swapper import cmd_swapper
from .watch import cmd_watch
from .watchdog import cmd_watchdog


def _engine_command(sub: argparse._SubParsersAction, name: str) -> argparse.ArgumentParser:
    """A subcommand that talks to one engine's API: its URL and the model it serves."""
    p = sub.add_parser(name)
    p.add_argument("--url", required=True)
    p.add_argument("--model", required=True)
    return p


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="sparkplay-serve", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("wait-ports")
    p.add_argument("endpoints", nargs="+")
    p.add_argument("--timeout", type=float, default=600)
    p.set_defaults(func=cmd_wait_ports)
    p = sub.add_parser("run")
    p.add_argument("--wait-for", action="append", default=[])
    p.add_argument("--bind", action="append", default=[], help="an address of this node the engine binds")
    p.add_argument("--timeout", type=float, default=0, help="seconds, then exit 1 (0: as long as it takes)")
    p.add_argument("argv", nargs=argparse.REMAINDER)
    p.set_defaults(func=cmd_run)
    p = sub.add_parser("watch")
    p.add_argument("--unit", required=True)
    p.add_argument("--peer", dest="peers", action="append", required=True)
    p.add_argument("--interval", type=float, default=1.0)
    p.set_defaults(func=cmd_watch)
    p = sub.add_parser("restart-workers")
    p.add_argument("--unit", required=True)
    p.add_argument("--peer", dest="peers", action="append", required=True, help="a worker's cable address, in order")
    p.set_defaults(func=cmd_restart_workers)
    p = _engine_command(sub, "ready")
    p.add_argument("--unit", required=True)
    p.add_argument("--peer", dest="peers", action="append", default=[])
    p.add_argument("--timeout", type=int, default=900)
    p.add_argument("--interval", type=float, default=2.0)
    p.add_argument("--prompt", default="What is 17*23?")
    p.add_argument("--max-tokens", type=int, default=16)
    p.add_argument("--progress")
    p.add_argument("--receipt", help="where a start's receipt is kept (written when this wait follows a start)")
    p.add_argument("--container", help="the docker runtime's container (its processes hold the API's port)")
    p.set_defaults(func=cmd_ready)
    p = _engine_command(sub, "watchdog")
    p.add_argument("--unit", required=True)
    p.add_argument("--worker", dest="workers", action="append", default=[], help="a worker's cable address, in order")
    p.add_argument("--interval", type=float, default=30)
    p.add_argument("--failures", type=int, default=3)
    p.add_argument("--grace", type=float, default=900)
    p.add_argument("--max-restarts", type=int, default=2)
    p.add_argument("--window", type=float, default=3600)
    p.add_argument("--probe-timeout", type=float, default=30)
    p.add_argument(
        "--look-interval", type=float, default=2.0, help="seconds between looks for a cable, peer or node gone"
    )
    p.add_argument(
        "--answer-check", choices=["exact", "exempt"], default="exempt", help="hold the model to its first answer"
    )
    p.add_argument("--answer-why", default="", help="why it is exempt (status shows it)")
    p.add_argument("--model-dir", action="append", default=[], help="a folder it serves from (re-verified)")
    p.add_argument("--ckpt-tool", help="the checkpoint tool that re-verifies them (the serve role passes it)")
    p.add_argument("--restart-timeout", type=float, default=900)
    p.add_argument("--prompt", default="What is 17*23?")
    p.add_argument("--max-tokens", type=int, default=4)
    p.add_argument("--state", required=True, help="its counters' file (the serve role's serve_watchdog_state)")
    p.add_argument("--pause", default="/etc/sparkplay/watchdog.pause")
    p.add_argument("--metrics-port", type=int, default=0)
    p.add_argument("--metrics-bind", default="127.0.0.1")
    p.add_argument("--container", help="the docker runtime's container (its processes hold the API's port)")
    p.add_argument("--fabric-env", help="the fabric role's env file (names the cable's twins)")
    p.set_defaults(func=cmd_watchdog)
    p = sub.add_parser("gateway")
    add_gateway_arguments(p)
    p.set_defaults(func=cmd_gateway)
    p = sub.add_parser("drain", help="wait until the gateway moved a model's route and the API it left holds nothing")
    add_drain_arguments(p)
    p.set_defaults(func=cmd_drain)
    p = sub.add_parser("image-send", help="an engine image to another rank: only the layers it lacks")
    add_image_arguments(p)
    p = sub.add_parser("swapper")
    add_swapper_arguments(p)
    p.set_defaults(func=cmd_swapper)
    p = _engine_command(sub, "bench")
    p.add_argument("--benchy", required=True, help="the llama-benchy program")
    p.add_argument("--tokenizer", required=True, help="a tokenizer.json, a folder holding one, or a hub name")
    p.add_argument("--corpus", required=True, help="a text file on this node, or a URL")
    p.add_argument("--out", required=True)
    p.add_argument("--pp", type=int, nargs="+", default=[512])
    p.add_argument("--tg", type=int, nargs="+", default=[128])
    p.add_argument("--depth", type=int, nargs="+", default=[0])
    p.add_argument("--concurrency", type=int, nargs="+", default=[1, 2, 4, 8])
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--invariance-tokens", type=int, default=48)
    p.add_argument("--timeout", type=float, default=600, help="seconds per request")
    p.add_argument("--as-user", help="started as root: read the key, then run as this user")
    p.add_argument("--home", help="HOME for --as-user")
    p.set_defaults(func=cmd_bench)
    p = _engine_command(sub, "probe")
    p.add_argument("--unit", help="the engine's unit: a port held by another process is named, never asked")
    p.add_argument("--container", help="the engine's container (docker runtime)")
    p.add_argument("--receipt", help="the last start's receipt, read back into the answer")
    p.set_defaults(func=cmd_probe)
    p = sub.add_parser("explain", help="why a rank is not serving (status, doctor, the watchdog)")
    p.add_argument("--unit", required=True)
    p.add_argument("--fabric-env", help="the fabric role's env file (names the cable's twins)")
    p.add_argument(
        "--model-dir",
        action="append",
        default=[],
        help="a folder the engine serves from: files replaced since it started are named (repeatable)",
    )
    p.set_defaults(func=cmd_explain)
    p = sub.add_parser("memguard", help="hold the unit's engine to its memory limit (started beside the unit's start)")
    p.add_argument("--unit", required=True)
    p.add_argument("--max", type=int, required=True, help="bytes: the engine is killed above this")
    p.add_argument("--high", type=int, default=0, help="bytes: reclaimed hard above this (0: --max)")
    p.add_argument("--container", help="the docker runtime's container: its limit is docker's")
    p.add_argument("--docker", default="/usr/bin/docker")
    p.set_defaults(func=cmd_memguard)
    p = sub.add_parser("memguard-release", help="after a stop: the unit's memory cgroup and guard state removed")
    p.add_argument("--unit", required=True)
    p.set_defaults(func=cmd_release)
    p = sub.add_parser("verify-unit")
    p.add_argument("file")
    p.add_argument("name")
    p.set_defaults(func=cmd_verify_unit)
    for name in ("ready", "watchdog", "probe", "bench"):
        p = sub.choices[name]
        p.add_argument("--api-key-env", help="the variable in --env-file that holds the API's key")
        p.add_argument("--env-file", help="the rank's env file (the Deployment's; needed with --api-key-env)")
        p.add_argument("--env-format", choices=["native", "docker"], default="docker")
    args = parser.parse_args(argv)
    if getattr(args, "api_key_env", None) and not args.env_file:
        parser.error("--api-key-env needs --env-file (the file that holds the key)")
    return int(args.func(args))
