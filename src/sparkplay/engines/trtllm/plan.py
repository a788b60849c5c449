"""TensorRT-LLM across ranks as NVIDIA's DGX Spark playbook runs it: OpenMPI over ssh between containers.

One container per node from NVIDIA's release image (`nvcr.io/nvidia/tensorrt-llm/release`). On one node,
rank 0 runs `trtllm-serve REPO ...` itself. Across nodes (the playbook's "Run on two Sparks"): every other
rank runs only an ssh server in its container, on the cable address, port 2233 (the playbook's); rank 0 runs
`mpirun -np N --host ... trtllm-llmapi-launch trtllm-serve REPO --tp_size N ...`, whose OpenMPI reaches
the other containers over that ssh and starts one TensorRT-LLM rank in each. Rank 0 alone serves HTTP.

The trust is the one the peer_ssh role made: rank 0's peer key (mounted read-only into rank 0's container)
is authorised on the other nodes with `restrict` and `from=` the cable subnets (their root's
authorized_keys, mounted read-only as the ssh server's), and each ssh server presents its node's own host
key, which rank 0 pinned under the cable address (the client config names it as that address's key). An
ssh session gets the ssh server's environment, not the container's, so mpirun exports rank 0's (`-x`):
the cable interfaces must have the same names on every node (they do on Sparks), or the plan is refused.

The model is named by its hub id and read offline from a Hugging Face cache whose snapshot is the mirrored
checkpoint (as the Atlas GB10 images read theirs): trtllm-serve serves a model under its model argument, so
the API's model name is the repository's. No GPU, image or MPI is here: tests/test_engines_trtllm.py
holds the plans to golden files, and its flags to the options trtllm-serve's source defines.
"""

from __future__ import annotations

from typing import Any

from sparkplay import argv, checkpoints
from sparkplay.engines.context import (
    GPU_RDMA_CONFINED,
    HOST_NETWORK_IPC,
    Context,
    Node,
    engine_args,
    fabric_env,
    hub_cache,
    parallel_size,
)
from sparkplay.engines.trtllm.spec import CONFIG, PP, TP
from sparkplay.errors import BadInput

SSH_PORT = 2233  # the playbook's ssh port inside the containers
HF_HOME = "/sparkplay-hf"
SSH_DIR = "/sparkplay-ssh"  # in the containers: the keys and the client config, all read-only
CLIENT_CONFIG = "trtllm-ssh.conf"  # under /etc/sparkplay, the client config rank 0's mpirun reads
PEER_KEY = "/root/.ssh/sparkplay_peer_ed25519"  # the peer_ssh role's key on rank 0 (it runs as root)
KNOWN_HOSTS = "/root/.ssh/known_hosts"  # where the peer_ssh role pinned the peers' host keys
AUTHORIZED_KEYS = "/root/.ssh/authorized_keys"  # where it authorised rank 0's key on the others
HOST_KEY = "/etc/ssh/ssh_host_ed25519_key"  # the node's own host key, the one rank 0 pinned
# stated by the recipe's own fields (the model and its pinned revision, served from the mirror; serve.bind/port)
REPLACED = ("--host", "--port", "--revision", "--tokenizer")
OWNED = ("--gpus_per_node",)  # one GB10 per Spark
CONTAINER_OPTIONS = [*HOST_NETWORK_IPC, *GPU_RDMA_CONFINED, "--ulimit", "memlock=-1", "--ulimit", "stack=67108864"]
# what an OpenSSH server needs beyond the engine's confinement: its privilege-separated child chroots and
# drops to the sshd user (no other capability; the session is root's, as the peer trust is)
SSHD_CAPABILITIES = ["--cap-add", "SYS_CHROOT", "--cap-add", "SETUID", "--cap-add", "SETGID"]
# the server, after making the privilege separation folder it refuses to start without
SSHD = 'mkdir -p /run/sshd && exec /usr/sbin/sshd "$@"'


def _parallel(args: list[str], recipe: dict[str, Any], count: int) -> tuple[list[str], int]:
    tp = parallel_size(args, recipe["topology"]["tensor_parallel"], *TP)
    pp = parallel_size(args, recipe["topology"]["pipeline_parallel"], *PP)
    if tp * pp != count:
        raise BadInput(
            f"TensorRT-LLM's parallelism (tensor {tp} x pipeline {pp} = {tp * pp} GPUs) does not match the "
            f"{count} node(s), one GPU each",
            "make tensor x pipeline parallel equal the node count (--tp_size/--pp_size or topology)",
        )
    if tp > 1 and not argv.has_flag(args, *TP):
        args = [*args, "--tp_size", str(tp)]
    if pp > 1 and not argv.has_flag(args, *PP):
        args = [*args, "--pp_size", str(pp)]
    return args, tp


def _same_interfaces(nodes: tuple[Node, ...]) -> str:
    """The cable interfaces every rank names alike: mpirun gives every rank rank 0's environment."""
    names = {node.nccl_ifnames for node in nodes}
    if len(names) > 1:
        raise BadInput(
            f"the nodes' cable interfaces differ ({', '.join(sorted(names))}): TensorRT-LLM's MPI launch gives "
            "every rank rank 0's environment, so each would look for rank 0's interfaces",
            "name the cable interfaces alike on every node (provision.yml's fabric settings), or serve this "
            "recipe with another engine",
        )
    return names.pop()


def _client_config(workers: list[Node]) -> dict[str, Any]:
    """rank 0's ssh client config: each peer by its cable address, its host key checked against the one
    peer_ssh pinned for that address (a port other than 22 would look it up under [address]:2233)."""
    blocks = [
        f"Host {node.address}\n  HostKeyAlias {node.address}\n  Port {SSH_PORT}\n  User root\n"
        f"  IdentityFile {SSH_DIR}/key\n  IdentitiesOnly yes\n  UserKnownHostsFile {SSH_DIR}/known_hosts\n"
        "  StrictHostKeyChecking yes\n  BatchMode yes\n"
        for node in workers
    ]
    return {"path": f"/etc/sparkplay/{CLIENT_CONFIG}", "content": "".join(blocks), "mode": "0644"}


def _launch(ctx: Context, serve: list[str], env: dict[str, str], ifnames: str) -> list[str]:
    """rank 0's mpirun: one rank per node by cable address, over the client config, with the environment
    every rank needs exported from rank 0's."""
    hosts = ",".join(f"{node.address}:1" for node in ctx.nodes)
    exported = [word for name in sorted({*env, "PATH", "LD_LIBRARY_PATH"}) for word in ("-x", name)]
    return [
        "--allow-run-as-root",
        "-np",
        str(len(ctx.nodes)),
        "--host",
        hosts,
        "--mca",
        "plm_rsh_args",
        f"-F {SSH_DIR}/config",
        "--mca",
        "btl_tcp_if_include",
        ifnames,
        "--mca",
        "oob_tcp_if_include",
        ifnames,
        *exported,
        "trtllm-llmapi-launch",
        "trtllm-serve",
        *serve,
    ]


def plan(ctx: Context) -> dict[str, Any]:
    recipe = ctx.recipe
    args = engine_args(recipe, REPLACED, OWNED, "trtllm")
    if argv.has_flag(args, *CONFIG):
        raise BadInput(
            f"the recipe's --extra_llm_api_options {argv.flag_value(args, *CONFIG)} names a file on the host, "
            "which the engine's container does not have",
            "remove it from serve.args and give its settings as trtllm-serve flags",
        )
    repo = recipe["model"].get("repo")
    if not repo or ctx.checkpoint_dir("target") is None:
        raise BadInput("the trtllm recipe names no hub repository to serve", "set model.repo (org/name)")
    served = recipe["model"].get("served_name")
    if served not in (None, repo):
        raise BadInput(
            f"model.served_name {served!r}: trtllm-serve serves the model under its model argument, {repo}",
            f"set model.served_name to {repo} (or leave it unset)",
        )
    count = len(ctx.nodes)
    args, tp = _parallel(args, dict(recipe), count)
    memory = ctx.knobs.get("gpu_memory_utilization")
    if memory is not None:  # its name for the KV cache's share of what the weights leave free
        args = argv.with_flag(args, "--kv_cache_free_gpu_memory_fraction", str(memory))
    mounts: list[dict[str, Any]] = []
    files: list[dict[str, Any]] = []
    for ckpt in recipe["model"].get("checkpoints") or []:
        more, ref = hub_cache(ctx, ckpt["repo"], HF_HOME, "trtllm-hf-ref")
        mounts += more
        files.append(ref)
    ifnames = _same_interfaces(ctx.nodes)
    # the PyTorch backend serves a hub checkpoint as it is (the default of current releases, said for older ones)
    backend = [] if argv.has_flag(args, "--backend") else ["--backend", "pytorch"]
    serve = [repo, *backend, *args, "--gpus_per_node", "1", "--host", ctx.bind, "--port", str(ctx.port)]
    workers = [node for node in ctx.nodes if not node.leads]
    ranks = []
    # the recipe's OpenMPI settings were its own launch's (a hostfile, root's permission): the plan's mpirun
    # is sparkplay's, so they are not passed (the import says so of each)
    given = {k: v for k, v in recipe["serve"]["env"].items() if not k.startswith("OMPI_")}
    for node in ctx.nodes:
        env = {
            **fabric_env(dict(node.fabric_env)),
            **given,
            "HF_HOME": HF_HOME,
            "HF_HUB_OFFLINE": "1",
            "NCCL_SOCKET_IFNAME": node.nccl_ifnames,
            "UCX_NET_DEVICES": node.nccl_ifnames,
            "OMPI_MCA_btl_tcp_if_include": node.nccl_ifnames,
        }
        ranks.append(_rank(ctx, node, env, mounts, files, serve, workers, ifnames))
    requires = [
        {
            "host": n.host,
            "path": checkpoints.checkpoint_dir(ctx.model_root, c["repo"]),
            "what": f"the {c['role']} checkpoint {c['repo']}",
        }
        for n in ctx.nodes
        for c in recipe["model"].get("checkpoints") or []
    ]
    return {
        "ranks": ranks,
        # rank 0's mpirun holds the job: a worker gone ends it, and a worker back needs a new launch
        "leader_follows_workers": count > 1,
        "workers_follow_leader": False,  # an ssh server outlives the job it carried
        "directories": [],
        # the host's files the containers see beside sparkplay's folders: the peer trust, fixed here
        "host_paths": [PEER_KEY, KNOWN_HOSTS, AUTHORIZED_KEYS, HOST_KEY] if count > 1 else [],
        "requires": requires,
        "parallel": {"tensor": tp, "pipeline": count // tp, "data": 1, "backend": "mpi" if count > 1 else None},
    }


def _rank(
    ctx: Context,
    node: Node,
    env: dict[str, str],
    mounts: list[dict[str, Any]],
    files: list[dict[str, Any]],
    serve: list[str],
    workers: list[Node],
    ifnames: str,
) -> dict[str, Any]:
    ssh_in = f"{SSH_DIR}/"
    if node.leads and not workers:  # one node: the server itself
        entry, command = "trtllm-serve", list(serve)
        own_mounts, own_files = list(mounts), list(files)
    elif node.leads:
        entry, command = "mpirun", _launch(ctx, serve, env, ifnames)
        config = _client_config(workers)
        own_mounts = [
            *mounts,
            {"source": PEER_KEY, "target": ssh_in + "key", "readonly": True},
            {"source": KNOWN_HOSTS, "target": ssh_in + "known_hosts", "readonly": True},
            {"source": config["path"], "target": ssh_in + "config", "readonly": True},
        ]
        own_files = [*files, config]
    else:
        entry = "/bin/sh"
        command = [
            "-c",
            SSHD,
            "sshd",
            "-D",
            "-e",
            "-p",
            str(SSH_PORT),
            "-o",
            f"ListenAddress={node.address}",
            "-o",
            "PasswordAuthentication=no",
            "-o",
            "KbdInteractiveAuthentication=no",
            "-o",
            "PermitRootLogin=prohibit-password",
            "-o",
            f"AuthorizedKeysFile={ssh_in}authorized_keys",
            "-h",
            ssh_in + "host_key",
        ]
        own_mounts = [
            *mounts,
            {"source": AUTHORIZED_KEYS, "target": ssh_in + "authorized_keys", "readonly": True},
            {"source": HOST_KEY, "target": ssh_in + "host_key", "readonly": True},
        ]
        own_files = list(files)
    options = [*CONTAINER_OPTIONS, *([] if node.leads else SSHD_CAPABILITIES), "--entrypoint", entry]
    return {
        "rank": node.rank,
        "host": node.host,
        "role": "leader" if node.leads else "worker",
        "argv": command,
        "env": env,
        "mounts": own_mounts,
        "container_options": options,
        "files": own_files,
        "listen": [{"address": ctx.bind, "port": ctx.port}]
        if node.leads
        else [{"address": node.address, "port": SSH_PORT}],
        # the ssh server takes only rank 0's key, and only from the cable; the firewall keeps others off it too
        "peer_ports": [] if node.leads else [SSH_PORT],
        # rank 0 waits for every ssh server before it launches
        "wait_for": [f"{w.address}:{SSH_PORT}" for w in workers] if node.leads else [],
    }
