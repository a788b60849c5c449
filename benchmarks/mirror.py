"""Checkpoint mirror throughput on the lab, against the ceiling and a plain rsync, in one run.

Mirrors a generated tree (large shards plus many small files) from rank 0 to
rank 1 over the simulated cable and prints GB/s for:
  (a) the practical ceiling: unencrypted TCP (tar | nc) over the same cable
      writing the same files into rank 1's model root; also TCP into /dev/null;
  (b) one plain rsync-over-ssh stream;
  (c) sparkplay's mirror (sparkplay-ckpt mirror, the role's defaults: parallel streams, each
      through an ssh session to `sparkplay-ckpt sink` on rank 1);
  and for reference the other transports: rsync over ssh (rsync), plain TCP (tcp), rsyncd;
with the ratios c/a and c/b, and the time of a no-op re-run (the status
check each rank makes, which is all a re-run does). The last line is one
JSON object with raw_gbps, rsync_gbps, mirror_gbps, ratio_raw, ratio_rsync, noop_s.

Needs root and Docker; brings the lab up and provisions it if needed.

    python benchmarks/mirror.py [--gb 2] [--streams 8] [--cipher aes128-gcm@openssh.com]
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
TOOL = "/usr/local/lib/sparkplay/sparkplay-ckpt"
PEER = "192.168.100.11"


def node(rank: int, script: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["docker", "exec", f"sparkplay-lab-rank{rank}", "sh", "-c", script],
        capture_output=True, text=True, check=check, timeout=3600,
    )  # fmt: skip


def timed(rank: int, script: str) -> float:
    start = time.perf_counter()
    node(rank, script)
    return time.perf_counter() - start


def fresh(dest: str) -> None:
    node(1, f"rm -rf {dest} && sync && echo 3 > /proc/sys/vm/drop_caches || true", check=False)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gb", type=float, default=2.0, help="size of the generated tree")
    parser.add_argument("--streams", type=int, default=8)
    parser.add_argument("--cipher", default="aes128-gcm@openssh.com")
    parser.add_argument("--rounds", type=int, default=3, help="medians of this many rounds")
    args = parser.parse_args()

    subprocess.run([sys.executable, "-m", "sparkplay", "lab", "up", "--project-dir", str(PROJECT)], check=True,
                   capture_output=True)  # fmt: skip
    if node(1, "test -f /etc/sparkplay/fabric.env", check=False).returncode != 0:
        subprocess.run(["ansible-playbook", "-i", "inventory/lab/hosts.yml", "provision.yml"], cwd=PROJECT,
                       check=True, capture_output=True)  # fmt: skip
    # the tool and netcat for the unencrypted ceiling
    staged = json.dumps({"checkpoint_staged": []})
    subprocess.run(["ansible-playbook", "-i", "inventory/lab/hosts.yml", "models.yml", "-e", staged], cwd=PROJECT,
                   check=True, capture_output=True)  # fmt: skip
    for rank in (0, 1):
        node(rank, "command -v nc >/dev/null || apt-get install -y -q netcat-openbsd >/dev/null")

    shards = 4
    shard_mb = int(args.gb * 1024 * 0.9 / shards)
    small = int(args.gb * 1024 * 0.1)  # 1 MiB each
    maker = (PROJECT / "molecule/lab/files/make_checkpoint.py").read_bytes()
    subprocess.run(["docker", "exec", "-i", "sparkplay-lab-rank0", "python3", "-", SRC, "--large", str(shards),
                    "--large-mb", str(shard_mb * 2), "--small", str(small), "--small-kb", "1024"],
                   input=maker, check=True, capture_output=True)  # fmt: skip
    node(0, f"{TOOL} manifest {SRC} >/dev/null")
    total = int(json.loads(node(0, f"cat {SRC}/.sparkplay/manifest.json").stdout)["bytes"])
    node(0, f"cat $(find {SRC} -type f) > /dev/null")  # same warm page cache on the sender for every run

    def run_round() -> tuple[float, ...]:
        # (a) the ceiling: unencrypted TCP, as parallel as the mirror (a pipe per shard, one tar
        # stream for the small files), into rank 1's model root; and one stream into /dev/null
        files = node(0, f"cd {SRC} && find . -path ./.sparkplay -prune -o -type f -size +64M -print").stdout.split()
        fresh(f"{ROOT}/bench-raw")
        listen = [
            f"(nc -l -p {5101 + i} > {ROOT}/bench-raw/{Path(f).name}) >/dev/null 2>&1 &" for i, f in enumerate(files)
        ]
        listen.append(f"(nc -l -p 5100 | tar -x -C {ROOT}/bench-raw --exclude='*.safetensors') >/dev/null 2>&1 &")
        node(1, f"mkdir -p {ROOT}/bench-raw && " + " ".join(listen))
        time.sleep(0.5)
        send = [f"nc -q 1 -N {PEER} {5101 + i} < {SRC}/{f} &" for i, f in enumerate(files)]
        send.append(f"tar -C {SRC} --exclude='*.safetensors' -c . | nc -q 1 -N {PEER} 5100 &")
        raw_s = timed(0, " ".join(send) + f" wait; ssh {PEER} sync")
        node(1, "(nc -l -p 5002 > /dev/null) >/dev/null 2>&1 &")
        time.sleep(0.5)
        null_s = timed(0, f"tar -C {SRC} -c . | nc -q 1 -N {PEER} 5002")
        fresh(f"{ROOT}/bench-raw")

        # (b) one plain rsync over ssh
        fresh(f"{ROOT}/bench-rsync")
        rsync_s = timed(0, f"rsync -a -e 'ssh -o BatchMode=yes' {SRC}/ {PEER}:{ROOT}/bench-rsync/ && ssh {PEER} sync")
        fresh(f"{ROOT}/bench-rsync")

        # (c) sparkplay's mirror, as the role runs it
        fresh(SRC)
        mirror_cmd = f"{TOOL} mirror {SRC} --to {PEER} --dest {SRC} --streams {args.streams} --cipher {args.cipher}"
        mirror_s = timed(0, f"{mirror_cmd} >/dev/null && ssh {PEER} sync")
        node(1, f"{TOOL} verify {SRC} --full >/dev/null && {TOOL} mark {SRC} --revision bench >/dev/null")
        # (c3) the rsync transport: the same streams as rsync over ssh (the default before)
        fresh(f"{ROOT}/bench-rsyncssh")
        rsyncssh_s = timed(0, f"{TOOL} mirror {SRC} --to {PEER} --dest {ROOT}/bench-rsyncssh --streams {args.streams}"
                              f" --cipher {args.cipher} --transport rsync >/dev/null && ssh {PEER} sync")  # fmt: skip
        node(1, f"{TOOL} verify {ROOT}/bench-rsyncssh --full --manifest {SRC}/.sparkplay/manifest.json >/dev/null")
        fresh(f"{ROOT}/bench-rsyncssh")
        # (c') the same with the rsyncd transport: plain TCP to a one-shot daemon on the cable address
        fresh(f"{ROOT}/bench-rsyncd")
        for rank in (0, 1):
            node(rank, "umask 077 && head -c 24 /dev/urandom | base64 > /run/sparkplay-bench.secret")
        node(0, "cat /run/sparkplay-bench.secret > /dev/null")
        secret = node(1, "cat /run/sparkplay-bench.secret").stdout.strip()
        node(0, f"umask 077 && echo '{secret}' > /run/sparkplay-bench.secret")
        receive = (
            f"{TOOL} receive {ROOT}/bench-rsyncd --address {PEER} --port 8730"
            " --secret-file /run/sparkplay-bench.secret --allow 192.168.100.10 --timeout 600"
        )
        node(1, f"{TOOL} stop --port 8730 >/dev/null; sleep 0.2; ({receive} >/dev/null 2>&1 &)")
        time.sleep(1)
        rsyncd_s = timed(0, f"{TOOL} mirror {SRC} --to {PEER} --dest {ROOT}/bench-rsyncd --streams {args.streams} "
                            f"--transport rsyncd --port 8730 --password-file /run/sparkplay-bench.secret >/dev/null"
                            f" && ssh {PEER} sync")  # fmt: skip
        node(1, f"{TOOL} verify {ROOT}/bench-rsyncd --full --manifest {SRC}/.sparkplay/manifest.json >/dev/null")
        node(1, f"{TOOL} stop --port 8730 >/dev/null")
        fresh(f"{ROOT}/bench-rsyncd")
        # (c'') the same with the tcp transport: sparkplay's own plain-TCP streams (sendfile)
        fresh(f"{ROOT}/bench-tcp")
        node(1, f"{TOOL} stop --port 8731 >/dev/null; sleep 0.2; ({receive.replace('bench-rsyncd', 'bench-tcp')}"
                " --transport tcp --port 8731 >/dev/null 2>&1 &)")  # fmt: skip
        time.sleep(1)
        tcp_s = timed(0, f"{TOOL} mirror {SRC} --to {PEER} --dest {ROOT}/bench-tcp --streams {args.streams} "
                         f"--transport tcp --port 8731 --password-file /run/sparkplay-bench.secret >/dev/null"
                         f" && ssh {PEER} sync")  # fmt: skip
        node(1, f"{TOOL} verify {ROOT}/bench-tcp --full --manifest {SRC}/.sparkplay/manifest.json >/dev/null")
        node(1, f"{TOOL} stop --port 8731 >/dev/null; rm -f /run/sparkplay-bench.secret")
        node(0, "rm -f /run/sparkplay-bench.secret")
        fresh(f"{ROOT}/bench-tcp")
        # a re-run: each rank's status check finds a valid marker and the mirror is not started
        digest = json.loads(node(0, f"cat {SRC}/.sparkplay/manifest.json").stdout)["digest"]
        noop_s = timed(1, f"{TOOL} status {SRC} --digest {digest} --revision bench | grep -q '\"complete\": true'")
        resend_s = timed(0, f"{mirror_cmd} >/dev/null")  # for reference: a mirror with nothing to send
        fresh(SRC)

        return raw_s, null_s, rsync_s, mirror_s, rsyncd_s, tcp_s, noop_s, resend_s, rsyncssh_s

    rounds = [run_round() for _ in range(args.rounds)]
    raw_s, null_s, rsync_s, mirror_s, rsyncd_s, tcp_s, noop_s, resend_s, rsyncssh_s = (
        statistics.median(col) for col in zip(*rounds, strict=True)
    )
    files = node(0, f"cd {SRC} && find . -path ./.sparkplay -prune -o -type f -size +64M -print").stdout.split()
    gb = total / 1e9
    raw, null, rsync, mirror, rsyncd, tcp, rsyncssh = (
        gb / x for x in (raw_s, null_s, rsync_s, mirror_s, rsyncd_s, tcp_s, rsyncssh_s)
    )
    print(f"medians of {args.rounds} rounds")
    print(f"tree: {gb:.2f} GB ({shards} shards, {small} small files), lab cable, 2 cores shared by both ends")
    print(f"(a) unencrypted TCP into rank 1's model root : {raw:6.3f} GB/s  ({raw_s:.1f} s, {len(files) + 1} streams)")
    print(f"    unencrypted TCP into /dev/null, 1 stream : {null:6.3f} GB/s")
    print(f"(b) one rsync over ssh                       : {rsync:6.3f} GB/s  ({rsync_s:.1f} s)")
    print(f"(c) sparkplay mirror, {args.streams} streams through ssh, {args.cipher}: {mirror:6.3f} GB/s"
          f"  ({mirror_s:.1f} s)")  # fmt: skip
    print(f"(c3) sparkplay mirror, {args.streams} streams, rsync transport (rsync over ssh): {rsyncssh:6.3f} GB/s"
          f"  ({rsyncssh_s:.1f} s)")  # fmt: skip
    print(f"(c'') sparkplay mirror, {args.streams} streams, tcp transport (sendfile, no encryption): {tcp:6.3f} GB/s"
          f"  ({tcp_s:.1f} s)")  # fmt: skip
    print(f"(c') sparkplay mirror, {args.streams} streams, rsyncd transport (no encryption): {rsyncd:6.3f} GB/s"
          f"  ({rsyncd_s:.1f} s)")  # fmt: skip
    print(
        f"c/a = {mirror / raw:.2f}   c/b = {mirror / rsync:.2f}   "
        f"c'/a = {rsyncd / raw:.2f}   c''/a = {tcp / raw:.2f}   c''/b = {tcp / rsync:.2f}"
    )
    print(
        f"no-op re-run (status check with a valid marker): {noop_s:.2f} s; "
        f"mirror with nothing to send: {resend_s:.2f} s"
    )
    print(json.dumps({"raw_gbps": round(raw, 3), "rsync_gbps": round(rsync, 3), "mirror_gbps": round(mirror, 3),
                      "ratio_raw": round(mirror / raw, 3), "ratio_rsync": round(mirror / rsync, 3),
                      "noop_s": round(noop_s, 3), "mirror_rsyncd_gbps": round(rsyncd, 3),
                      "ratio_raw_rsyncd": round(rsyncd / raw, 3), "mirror_tcp_gbps": round(tcp, 3),
                      "ratio_raw_tcp": round(tcp / raw, 3), "ratio_rsync_tcp": round(tcp / rsync, 3),
                      "mirror_rsync_transport_gbps": round(rsyncssh, 3), "null_gbps": round(null, 3)}))  # fmt: skip


if __name__ == "__main__":
    main()
