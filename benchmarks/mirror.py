"""Checkpoint mirror throughput on the lab, against the ceiling and a plain rsync, before and after hardening.

Mirrors a generated tree (large shards plus many small files) from rank 0 to
rank 1 over the simulated cable, in one run, and prints GB/s for:
  (a) the practical ceiling: unencrypted TCP (nc) over the same cable writing
      the same files into rank 1's model root;
  (b) one plain rsync over ssh (what a good engineer would type first);
  (c) sparkplay's default: parallel streams through ssh to `sparkplay-ckpt sink`;
  (t) the tcp transport (the same streams over plain TCP, for a private cable);
  (r) the rsync transport (rsync over ssh, the fallback), for reference;
each of (c) and (t) twice: BEFORE, the tool as it was at --before (a git
revision; the receiver trusted its peer), and AFTER, the hardened tool as the
role runs it now (`sparkplay-ckpt sync`). "transfer" is the streams only,
from the first one opening to the last one done (the ratios the issue
tracks; the tcp receiver's start is shown apart); "end to end" adds what a run does around
it (before: mirror, then verify --full and mark on rank 1; after: sync, which
asks, prepares, sends, hashes and marks). Also the no-op re-run per rank
(a status check with a valid marker). The last line is one JSON object.

Needs root and Docker; brings the lab up and provisions it if needed.

    python benchmarks/mirror.py [--gb 2] [--streams 8] [--rounds 3] [--before 6291b8c]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

PROJECT = Path(__file__).resolve().parents[1]
ROOT = "/var/lib/sparkplay/models"
SRC = f"{ROOT}/bench-src"
OLD_SRC = f"{ROOT}/bench-src-before"  # the same files (hard links), with the old tool's manifest
TOOL = "/usr/local/lib/sparkplay/sparkplay-ckpt"
OLD_TOOL = "/usr/local/lib/sparkplay/sparkplay-ckpt-before"
PEER, ME = "192.168.100.11", "192.168.100.10"
BEFORE = "6291b8c0a07f81c33cb0bbe4771a1d4468f34cca"  # the last commit before the receiver was hardened


def node(rank: int, script: str, check: bool = True, stdin: bytes | None = None) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(
        ["docker", "exec", "-i", f"sparkplay-lab-rank{rank}", "sh", "-c", script],
        input=stdin,
        capture_output=True,
        check=False,
        timeout=3600,
    )
    if check and proc.returncode != 0:
        raise SystemExit(f"rank {rank}: {script!r} failed: {proc.stderr.decode(errors='replace')[-2000:]}")
    return subprocess.CompletedProcess(proc.args, proc.returncode, proc.stdout.decode(), proc.stderr.decode())


def timed(rank: int, script: str) -> tuple[float, str]:
    start = time.perf_counter()
    out = node(rank, script).stdout
    return time.perf_counter() - start, out


def fresh(dest: str) -> None:
    node(1, f"rm -rf {dest} && sync && echo 3 > /proc/sys/vm/drop_caches || true", check=False)


def setup(args: argparse.Namespace) -> int:
    subprocess.run(
        [sys.executable, "-m", "sparkplay", "lab", "up", "--project-dir", str(PROJECT)], check=True, capture_output=True
    )
    if node(1, "test -f /etc/sparkplay/fabric.env", check=False).returncode != 0:
        subprocess.run(
            ["ansible-playbook", "-i", "inventory/lab/hosts.yml", "provision.yml"],
            cwd=PROJECT,
            check=True,
            capture_output=True,
        )
    # the tool (models.yml installs it), netcat for the ceiling, and the old tool from git
    subprocess.run(
        [
            "ansible-playbook",
            "-i",
            "inventory/lab/hosts.yml",
            "models.yml",
            "-e",
            json.dumps({"checkpoint_staged": []}),
        ],
        cwd=PROJECT,
        check=True,
        capture_output=True,
    )
    old = subprocess.run(
        ["git", "show", f"{args.before}:src/sparkplay/nodetools/sparkplay_ckpt.py"],
        cwd=PROJECT,
        check=True,
        capture_output=True,
    ).stdout
    for rank in (0, 1):
        node(rank, "command -v nc >/dev/null || apt-get install -y -q netcat-openbsd >/dev/null")
        node(rank, f"cat > {OLD_TOOL} && chmod 755 {OLD_TOOL}", stdin=old)
    shards = 4
    shard_mb = int(args.gb * 1024 * 0.9 / shards)
    small = int(args.gb * 1024 * 0.1)  # 1 MiB each
    maker = (PROJECT / "molecule/lab/files/make_checkpoint.py").read_bytes()
    node(
        0,
        f"python3 - {SRC} --large {shards} --large-mb {shard_mb * 2} --small {small} --small-kb 1024 >/dev/null",
        stdin=maker,
    )
    node(0, f"{TOOL} manifest {SRC} --revision bench >/dev/null")
    node(
        0,
        f"rm -rf {OLD_SRC} && cp -al {SRC} {OLD_SRC} && rm -rf {OLD_SRC}/.sparkplay && "
        f"{OLD_TOOL} manifest {OLD_SRC} >/dev/null",
    )
    node(0, f"cat $(find {SRC} -type f) > /dev/null")  # the same warm page cache on the sender for every run
    return int(json.loads(node(0, f"cat {SRC}/.sparkplay/manifest.json").stdout)["bytes"])


# The hardened transports alone, as `sync` calls them (same Job, same sink or receiver on rank 1),
# so "transfer" compares like with like: the old `mirror` did nothing but move bytes either.
SEND_ONLY = """
import json, sys, time
from pathlib import Path
sys.path.insert(0, {tool!r})
from ckpt import manifest
from ckpt.sync import ssh_command
from ckpt.transports import Job, Progress, send
m = manifest.load(Path({src!r}) / ".sparkplay/manifest.json")
job = Job(root=Path({src!r}), host={peer!r}, dest={dest!r}, entries=m["files"], streams={streams}, restart=False,
          progress=Progress(m["bytes"]), ssh=ssh_command({cipher!r}, []), remote_tool={tool!r}, port=8731)
started = time.monotonic()
sent = send({transport!r}, job)
print(json.dumps({{"total": time.monotonic() - started, "streams": sent.seconds, "bytes": sent.transferred}}))
"""


def send_only(args: argparse.Namespace, transport: str, dest: str) -> tuple[float, dict[str, float]]:
    code = SEND_ONLY.format(
        tool=TOOL, src=SRC, peer=PEER, dest=dest, streams=args.streams, cipher=args.cipher, transport=transport
    )
    start = time.perf_counter()
    out = node(0, f"python3 - && ssh {PEER} sync", stdin=code.encode()).stdout
    return time.perf_counter() - start, json.loads(out.splitlines()[0])


def one_round(args: argparse.Namespace) -> dict[str, float]:
    t: dict[str, float] = {}
    # (a) the ceiling: unencrypted TCP, as parallel as the mirror (a pipe per shard, one tar stream for the rest)
    files = node(0, f"cd {SRC} && find . -path ./.sparkplay -prune -o -type f -size +64M -print").stdout.split()
    fresh(f"{ROOT}/bench-raw")
    listen = [
        f"(nc -l -p {5101 + i} > {ROOT}/bench-raw/{Path(f).name}) </dev/null >/dev/null 2>&1 &"
        for i, f in enumerate(files)
    ]
    untar = f"tar -x -C {ROOT}/bench-raw --exclude='*.safetensors'"
    listen.append(f"(nc -l -p 5100 </dev/null | {untar}) >/dev/null 2>&1 &")
    node(1, f"mkdir -p {ROOT}/bench-raw && " + " ".join(listen))
    time.sleep(0.5)
    # -q 0: the sender quits as soon as its input ends (-N sends the FIN); the clock stops when every
    # listener on rank 1 has written its last byte and exited, and rank 1 has synced
    send = [f"nc -q 0 -N {PEER} {5101 + i} < {SRC}/{f} &" for i, f in enumerate(files)]
    send.append(f"tar -C {SRC} --exclude='*.safetensors' -c . | nc -q 0 -N {PEER} 5100 &")
    drained = "while pgrep -x nc >/dev/null || pgrep -x tar >/dev/null; do sleep 0.02; done; sync"
    t["raw"], _ = timed(0, " ".join(send) + f" wait; ssh {PEER} '{drained}'")
    if node(1, f"du -sb {ROOT}/bench-raw | cut -f1").stdout.strip() == "0":
        raise SystemExit("the unencrypted ceiling moved no bytes")
    fresh(f"{ROOT}/bench-raw")

    # (b) one plain rsync over ssh
    fresh(f"{ROOT}/bench-rsync")
    t["rsync"], _ = timed(0, f"rsync -a -e 'ssh -o BatchMode=yes' {SRC}/ {PEER}:{ROOT}/bench-rsync/ && ssh {PEER} sync")
    fresh(f"{ROOT}/bench-rsync")

    streams, cipher = args.streams, args.cipher
    # (c) BEFORE: the old mirror through ssh, then the old role's verify and mark on rank 1
    dest = f"{ROOT}/bench-before"
    fresh(dest)
    old_mirror = f"{OLD_TOOL} mirror {OLD_SRC} --to {PEER} --dest {dest} --streams {streams} --cipher {cipher}"
    t["c_before"], _ = timed(0, f"{old_mirror} --remote-tool {OLD_TOOL} >/dev/null && ssh {PEER} sync")
    t["c_before_check"], _ = timed(
        1, f"{OLD_TOOL} verify {dest} --full >/dev/null && {OLD_TOOL} mark {dest} --revision bench >/dev/null"
    )
    fresh(dest)
    # (c) AFTER: the hardened streams alone, then the whole sync (ask, prepare, send, hash, mark)
    dest = f"{ROOT}/bench-after"
    fresh(dest)
    t["c_after"], _ = send_only(args, "ssh", dest)
    fresh(dest)
    sync = f"{TOOL} sync {SRC} --to {PEER} --dest {dest} --revision bench --streams {streams} --cipher {cipher}"
    t["c_after_e2e"], _ = timed(0, f"{sync} && ssh {PEER} sync")
    t["noop"], _ = timed(1, f"{TOOL} status {dest} --revision bench | grep -q '\"complete\": true'")
    t["noop_sync"], _ = timed(0, sync)  # a whole re-run of the sync: one status check over ssh
    fresh(dest)

    # (t) BEFORE: the old tcp transport (receiver started by hand, as the old role did)
    dest = f"{ROOT}/bench-tcp-before"
    fresh(dest)
    for rank in (0, 1):
        node(rank, "umask 077 && echo bench-secret-0123456789abcdef0123456789 > /run/sparkplay-bench.secret")
    node(
        1,
        f"({OLD_TOOL} receive {dest} --address {PEER} --port 8731 --secret-file /run/sparkplay-bench.secret "
        f"--allow {ME} --timeout 600 --transport tcp >/dev/null 2>&1 &)",
    )
    time.sleep(1)
    t["t_before"], _ = timed(
        0,
        f"{OLD_TOOL} mirror {OLD_SRC} --to {PEER} --dest {dest} --streams {streams} "
        "--transport tcp --port 8731 --password-file /run/sparkplay-bench.secret >/dev/null"
        f" && ssh {PEER} sync",
    )
    node(1, f"{OLD_TOOL} stop --port 8731 >/dev/null; rm -f /run/sparkplay-bench.secret")
    node(0, "rm -f /run/sparkplay-bench.secret")
    fresh(dest)
    # (t) AFTER: the hardened tcp transport (receiver started through ssh for this run, secret over ssh);
    # its start is timed apart, since the old receiver was started beforehand (by Ansible tasks in the role)
    dest = f"{ROOT}/bench-tcp-after"
    fresh(dest)
    whole, inside = send_only(args, "tcp", dest)
    t["t_receiver_start"] = inside["total"] - inside["streams"]
    t["t_after"] = whole - t["t_receiver_start"]
    fresh(dest)

    # (r) the rsync transport, for reference
    dest = f"{ROOT}/bench-rsyncssh"
    fresh(dest)
    _, out = timed(
        0,
        f"{TOOL} sync {SRC} --to {PEER} --dest {dest} --revision bench --streams {streams} "
        f"--cipher {cipher} --transport rsync",
    )
    t["r_after"] = json.loads(out.splitlines()[0])["stream_seconds"]  # rsync's own streams
    fresh(dest)
    return t


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gb", type=float, default=2.0, help="size of the generated tree")
    parser.add_argument("--streams", type=int, default=8)
    parser.add_argument("--cipher", default="aes128-gcm@openssh.com")
    parser.add_argument("--rounds", type=int, default=3, help="medians of this many rounds")
    parser.add_argument("--before", default=BEFORE, help="git revision of the tool to compare with")
    args = parser.parse_args()

    total = setup(args)
    rounds = [one_round(args) for _ in range(args.rounds)]
    t = {key: statistics.median(r[key] for r in rounds) for key in rounds[0]}
    gb = total / 1e9
    rate = {key: gb / seconds for key, seconds in t.items() if not key.startswith(("noop", "t_receiver"))}
    before_e2e = t["c_before"] + t["c_before_check"]
    print(f"medians of {args.rounds} rounds; tree {gb:.2f} GB, lab cable, 2 cores shared by both ends")
    print(f"(a) unencrypted TCP into rank 1's model root : {rate['raw']:6.3f} GB/s")
    print(f"(b) one rsync over ssh                       : {rate['rsync']:6.3f} GB/s")
    print(f"(c) ssh streams, transfer   before {rate['c_before']:6.3f}  after {rate['c_after']:6.3f} GB/s")
    print(
        f"    c/b                     before {rate['c_before'] / rate['rsync']:6.2f}  "
        f"after {rate['c_after'] / rate['rsync']:6.2f}"
    )
    print(
        f"    end to end              before {gb / before_e2e:6.3f}  after {rate['c_after_e2e']:6.3f} GB/s"
        f"  ({before_e2e:.1f} s vs {t['c_after_e2e']:.1f} s; before = mirror + verify/mark run locally on rank 1,"
        " after = one sync from rank 0 with its four checks over ssh)"
    )
    print(f"(t) tcp streams, transfer   before {rate['t_before']:6.3f}  after {rate['t_after']:6.3f} GB/s")
    print(
        f"    t/a                     before {rate['t_before'] / rate['raw']:6.2f}  "
        f"after {rate['t_after'] / rate['raw']:6.2f}"
    )
    print(
        f"    the tcp receiver's start through ssh, per run (after; before, the role started it in Ansible tasks): "
        f"{t['t_receiver_start']:.2f} s"
    )
    print(f"(r) rsync transport (after) : {rate['r_after']:6.3f} GB/s")
    print(f"no-op re-run per rank: status {t['noop']:.2f} s; a whole sync with nothing to send {t['noop_sync']:.2f} s")
    print(
        json.dumps(
            {
                "raw_gbps": round(rate["raw"], 3),
                "rsync_gbps": round(rate["rsync"], 3),
                "ssh_before_gbps": round(rate["c_before"], 3),
                "ssh_after_gbps": round(rate["c_after"], 3),
                "ratio_rsync_before": round(rate["c_before"] / rate["rsync"], 3),
                "ratio_rsync_after": round(rate["c_after"] / rate["rsync"], 3),
                "tcp_before_gbps": round(rate["t_before"], 3),
                "tcp_after_gbps": round(rate["t_after"], 3),
                "ratio_raw_tcp_before": round(rate["t_before"] / rate["raw"], 3),
                "ratio_raw_tcp_after": round(rate["t_after"] / rate["raw"], 3),
                "e2e_before_s": round(before_e2e, 2),
                "e2e_after_s": round(t["c_after_e2e"], 2),
                "rsync_transport_gbps": round(rate["r_after"], 3),
                "noop_s": round(t["noop"], 3),
                "tcp_receiver_start_s": round(t["t_receiver_start"], 3),
                "noop_sync_s": round(t["noop_sync"], 3),
            }
        )
    )


if __name__ == "__main__":
    main()
