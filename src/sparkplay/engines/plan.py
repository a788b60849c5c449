"""The launch plan: what runs on each rank, built from a recipe and the inventory's facts.

A plan is plain data (JSON-safe dicts) so Ansible can template units from it
and tests can compare it. Shape (docs/serving.md has the full list):

    {recipe, engine, runtime, image, packages, served_name, unit, api, health,
     leader_follows_workers, workers_follow_leader, directories, ranks: [{rank, host, role, argv, env,
     exec, mounts, files, listen, wait_for}, ...]}

`exec` is the complete argv systemd starts (the docker client with its
options for the docker runtime, the engine binary for the native one);
`argv` is the engine's own command line inside it.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from sparkplay import addresses, argv, boundary, imageref, topology
from sparkplay.engines import answers, firewall, mods, registry, systemd
from sparkplay.engines.context import Context, Node, Options, environment, served_name
from sparkplay.engines.names import CONTAINER, ENV_FILE, engine_home, engine_user, for_slot
from sparkplay.errors import BadInput
from sparkplay.recipes import model, secrets

DOCKER = "/usr/bin/docker"
CONFIG_DIR = "/etc/sparkplay"  # the engine's own files the plan writes (Atlas profile): a container may read them


# a secret flag an engine also reads from a variable (the hub's token: vLLM, SGLang and llama.cpp all read
# HF_TOKEN through huggingface_hub or their own common args), moved to the 0600 env file like the API key
SECRET_FLAG_ENV = {"--hf-token": "HF_TOKEN", "-hft": "HF_TOKEN"}

# the flags an API's key is given by (Atlas's own is --auth-token, sparkrun's atlas runtime says)
KEY_FLAGS = ("--api-key", "--auth-token")


def api_key_to_env(engine: str, rank_plan: dict[str, Any]) -> str | None:
    """Move an API key flag of this rank into the engine's own variable (its spec's api_key_env: a key given as
    a flag would sit in a world-readable unit and in `ps`, so it travels in the 0600 env file instead); the
    variable's name, if any."""
    name = registry.spec(engine).api_key_env
    given = next((flag for flag in KEY_FLAGS if argv.has_flag(rank_plan["argv"], flag)), None)
    key = argv.flag_value(rank_plan["argv"], given) if given else None
    if given is not None:
        if name is None or key is None or given != "--api-key":
            raise BadInput(
                f"the recipe gives {engine} {given} on the command line, where it would sit in a world-readable "
                "unit and in ps",
                "remove it; sparkplay knows no variable this engine reads its key from",
            )
        rank_plan["argv"] = argv.without_flags(rank_plan["argv"], "--api-key")
        rank_plan["env"][name] = key
    for flag in secrets.flags_in(rank_plan["argv"]):
        variable = SECRET_FLAG_ENV.get(flag)
        value = argv.flag_value(rank_plan["argv"], flag)
        if variable is None or value is None:
            raise BadInput(
                f"the recipe gives {engine} {flag} on the command line, where its secret would sit in a "
                "world-readable unit and in ps",
                "remove it from serve.args; sparkplay knows no variable this engine reads it from",
            )
        rank_plan["argv"] = argv.without_flags(rank_plan["argv"], flag)
        rank_plan["env"][variable] = value
    return name if name and rank_plan["env"].get(name) else None


SMOKE_PROMPT = "What is 17*23?"


def docker_exec(
    rank_plan: Mapping[str, Any], image: str, docker: str = DOCKER, container: str = CONTAINER, env_file: str = ENV_FILE
) -> list[str]:
    """The foreground `docker run` systemd supervises: named, removed on exit, env from the 0600 file."""
    if not imageref.is_reference(image):  # it would be read as one of docker's options
        raise BadInput(f"engine.image {image!r} is not a container image reference", "fix engine.image in the recipe")
    argv = [docker, "run", "--rm", "--name", container, "--env-file", env_file, *rank_plan["container_options"]]
    for mount in rank_plan["mounts"]:
        if any("," in mount[k] or "=" in mount[k] for k in ("source", "target")):
            raise BadInput(f"mount path {mount['source']!r} has ',' or '='", "use paths without them (docker --mount)")
        spec = f"type=bind,source={mount['source']},target={mount['target']}"
        argv += ["--mount", spec + (",readonly" if mount.get("readonly") else "")]
    return [*argv, image, *rank_plan["argv"]]


Adapter = Callable[[Context], dict[str, Any]]


def adapter(engine: str) -> Adapter:
    """The engine's per-rank launch: `plan` of its package's plan module."""
    registry.spec(engine)  # an engine sparkplay does not know is refused, naming those it does
    found: Adapter = importlib.import_module(f"sparkplay.engines.{engine}.plan").plan
    return found


def container_settings(options: Sequence[str], serve: Mapping[str, Any]) -> list[str]:
    """The container's options with the recipe's resource limits (each replacing sparkplay's own setting of
    that limit) and the user it runs as (a sparkrun executor_config; the schema confines both)."""
    out = list(options)
    for limit in serve.get("ulimits") or []:
        name = limit.split("=", 1)[0]
        at = next((i for i in range(len(out) - 1) if out[i] == "--ulimit" and out[i + 1].split("=")[0] == name), None)
        if at is None:
            out += ["--ulimit", limit]
        else:
            out[at + 1] = limit
    if serve.get("container_user"):
        out += ["--user", str(serve["container_user"])]
    return out


def check_knobs(engine: str, knobs: Mapping[str, Any], overrides: Mapping[str, Any]) -> None:
    """Knobs are named in the schema and read by the engine: anything else would be set and do nothing."""
    known = set(model.schema()["properties"]["knobs"]["properties"])
    unknown = sorted(set(overrides) - known)
    if unknown:
        raise BadInput(f"serve_knobs names {', '.join(unknown)}, not a knob", f"use one of {', '.join(sorted(known))}")
    read = registry.spec(engine).knobs_read
    unread = sorted(k for k, v in knobs.items() if v is not None and read is not None and k not in read)
    if unread:
        specs = registry.specs().values()
        readers = sorted(s.name for s in specs if s.knobs_read is None or unread[0] in s.knobs_read)
        raise BadInput(
            f"knob {', '.join(unread)} is set but the {engine} engine does not read it",
            f"remove it from serve_knobs or the recipe's knobs (it applies to {', '.join(readers) or 'no engine'})",
        )


def check_nodes(nodes: Sequence[Node], recipe: Mapping[str, Any]) -> tuple[Node, ...]:
    ordered = tuple(sorted(nodes, key=lambda n: n.rank))
    ranks = [n.rank for n in ordered]
    if ranks != list(range(len(ranks))):
        raise BadInput(f"ranks {ranks} are not 0..{len(ranks) - 1}", "give each node a distinct sparkplay_rank from 0")
    topology.check_node_count(recipe, len(ordered))
    return ordered


def build(recipe: Mapping[str, Any], nodes: Sequence[Node], options: Options) -> dict[str, Any]:
    """The launch plan for every rank; raises BadInput naming what to fix."""
    boundary.confine(recipe)
    ctx = Context(recipe, check_nodes(nodes, recipe), options)
    names = for_slot(options.slot)
    allowed = (
        boundary.enforce(recipe, options.allow, options.knobs, options.bind, options.trusted_images)
        if options.allow is not None
        else []
    )
    engine = recipe["engine"]["name"]
    check_knobs(engine, ctx.knobs, options.knobs)
    deployment = adapter(engine)(ctx)
    runtime = recipe["engine"]["runtime"]
    state = options.state_dir.rstrip("/") or "/"
    mods.apply(deployment, recipe, runtime, state)  # a recipe's mods run in its container before the engine
    ours = [ctx.model_root, state]
    home = engine_home(state, options.slot)  # a native engine's user and home: the deployment's own
    user = engine_user(options.slot)
    api_key_env = None
    for rank_plan in deployment["ranks"]:
        rank_plan["address"] = ctx.nodes[rank_plan["rank"]].address
        rank_plan["env"] = dict(rank_plan["env"])
        found = api_key_to_env(engine, rank_plan)
        api_key_env = found if rank_plan["role"] == "leader" else api_key_env
        rank_plan["env"] = environment(rank_plan["env"])
        if runtime == "docker":
            cache = ctx.knobs.get("prefix_cache_dir")
            # the adapter's own fixed host files (an engine's peer trust), never a recipe's
            own = list(deployment.get("host_paths", []))
            boundary.confine_mounts(
                rank_plan["mounts"], [*ours, CONFIG_DIR, *own, *([cache] if cache else [])], rank_plan["rank"]
            )
            rank_plan["container_options"] = container_settings(rank_plan["container_options"], recipe["serve"])
            rank_plan["exec"] = docker_exec(
                rank_plan, recipe["engine"]["image"], options.docker, names["container"], names["env_file"]
            )
        else:
            # the program is the adapter's; what follows comes from the recipe and stays in our folders
            boundary.confine_args(rank_plan["argv"][1:], ours, f"rank {rank_plan['rank']}'s engine argument")
            rank_plan["exec"] = list(rank_plan["argv"])
    url = f"http://{addresses.client_address(ctx.bind)}:{ctx.port}"
    return {
        "recipe": recipe["name"],
        "title": recipe["title"],
        "engine": engine,
        "runtime": runtime,
        "image": recipe["engine"]["image"] if runtime == "docker" else None,
        "image_dir": recipe["engine"].get("image_dir") if runtime == "docker" else None,
        "docker": options.docker if runtime == "docker" else None,
        "container": names["container"] if runtime == "docker" else None,
        # the adapter's own needs first, then the recipe's (native)
        "packages": list(dict.fromkeys([*deployment.get("packages", []), *(recipe["engine"].get("packages") or [])]))
        if runtime == "native"
        else [],
        # native: how the engine role installs a program no Debian package provides (vLLM's CPU build)
        "install": deployment.get("install") if runtime == "native" else None,
        "served_name": served_name(recipe),
        "slot": options.slot,
        "unit": names["units"]["serve"],
        "env_file": names["env_file"],
        # native: the engine's own user and systemd sandbox; docker: the client needs root's socket
        "user": user if runtime == "native" else None,
        "home": home if runtime == "native" else None,
        "sandbox": systemd.sandbox(user, home, [ctx.model_root]) if runtime == "native" else [],
        "privileged": allowed,
        "api": {"bind": ctx.bind, "port": ctx.port, "url": url, "key_env": api_key_env},
        "health": {
            "timeout_s": int(options.health_timeout_s or recipe["serve"].get("health_timeout_s") or 900),
            "prompt": SMOKE_PROMPT,
            # whether the watchdog holds the model to the answer it gave after the deploy (answers.py)
            "answers": answers.check(engine, [r["argv"] for r in deployment["ranks"]]),
        },
        "leader_follows_workers": bool(deployment.get("leader_follows_workers")),
        "workers_follow_leader": bool(deployment.get("workers_follow_leader")),
        "directories": deployment.get("directories", []),
        "requires": deployment.get("requires", []),
        "parallel": deployment.get("parallel"),
        "firewall": firewall.plan_for(
            deployment["ranks"], [n.fabric_env for n in ctx.nodes], ctx.options.slot, names["units"]["firewall"]
        ),
        "ranks": deployment["ranks"],
    }


def stand_in_nodes(count: int) -> list[Node]:
    """`count` ranks with documentation addresses (RFC 5737) on a two-twin cable, for rehearsing a plan."""
    twins = "enp1s0f1np1,enP2p1s0f1np1"
    return [
        Node.from_facts(
            f"rank{rank}",
            {
                "rank": rank,
                "machine": "aarch64",
                "fabric_env": {
                    "SPARKPLAY_FABRIC_TWINS": twins,
                    "SPARKPLAY_FABRIC_ADDRESSES": f"192.0.2.{10 + rank},198.51.100.{10 + rank}",
                },
            },
        )
        for rank in range(count)
    ]


def rehearse(recipe: Mapping[str, Any], model_root: str) -> None:
    """Build the recipe's plan for its own node count on stand-in nodes: what the recipe alone decides
    (parallelism against nodes, flags sparkplay owns, paths, knobs) fails here, before anything is kept."""
    build(recipe, stand_in_nodes(int(recipe["topology"]["nodes"] or 1)), Options(model_root=model_root, allow=None))


def env_not_passed(recipe: Mapping[str, Any], model_root: str) -> list[str]:
    """The recipe's environment keys that no rank's engine receives as the recipe gives them (the adapter sets
    them itself: interfaces from host facts, rank addresses, the offline hub): found by planning with each value
    replaced by a marker, so the adapters stay the one place that says which keys they own."""
    env = recipe["serve"]["env"]
    if not env:
        return []
    nodes, options = stand_in_nodes(int(recipe["topology"]["nodes"] or 1)), Options(model_root=model_root, allow=None)
    marked = {k: f"sparkplay-marker-{i}" for i, k in enumerate(env)}
    try:
        ranks = build({**recipe, "serve": {**recipe["serve"], "env": marked}}, nodes, options)["ranks"]
    except BadInput:  # an adapter that reads a value (none does today): compare the recipe's own values
        marked = {k: str(v) for k, v in env.items()}
        ranks = build(recipe, nodes, options)["ranks"]

    def passed(rank: Mapping[str, Any], key: str, marker: str) -> bool:  # as the environment, or in a file it reads
        return rank["env"].get(key) == marker or any(marker in str(f.get("content", "")) for f in rank["files"])

    return [k for k, v in marked.items() if not all(passed(rank, k, v) for rank in ranks)]
