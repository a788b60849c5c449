"""sparkplay-ckpt's commands. Each prints one JSON object; errors are one line on stderr.

Exit status: 0 done, 1 failed or refused (the line says why), 3 checked and
found wrong (verify, mark, and manifest against its record: the JSON lists what).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

from . import hub, record, state
from . import manifest as mf
from . import sync as syncing
from .common import MANIFEST, Failure, write_json
from .paths import Refused
from .sink import Sink
from .transports import NAMES


def _manifest(args: argparse.Namespace) -> dict[str, Any]:
    """Hash rank 0's copy into its manifest and mark it; with --records, held to the record of its first
    verification: the same revision is re-verified against that record, never hashed anew into a new truth."""
    recorded = record.load(args.records, args.dir) if args.records else None
    if recorded is not None and recorded["revision"] == args.revision and not args.accept:
        return _reverify(args, recorded)
    built, snapshot, counts = mf.build(args.dir, args.jobs)
    write_json(args.dir / MANIFEST, built)
    out = {
        "manifest": str(args.dir / MANIFEST),
        "files": built["count"],
        "bytes": built["bytes"],
        "digest": built["digest"],
        **counts,
    }
    if args.revision:  # every byte was just hashed: rank 0 is complete for this revision
        state.drop_marker(args.dir)
        out["marker"] = state.mark(args.dir, built, args.revision, snapshot)["marker"]
    if args.records and args.revision:
        how = args.how if recorded is None else "accepted" if recorded["revision"] == args.revision else "new revision"
        if recorded is not None:
            out["changed"] = record.differences(recorded["manifest"], built)
            out["previous_revision"] = recorded["revision"]
        out |= record.save(args.records, args.dir, built, args.revision, how)
        out["how"] = how
    return out


def _reverify(args: argparse.Namespace, recorded: dict[str, Any]) -> dict[str, Any]:
    """Rank 0's copy against its record: every byte hashed; the same bytes are marked again (a copy touched, its
    marker lost), changed ones refused with what differs (exit 3: nothing is marked, so nothing is mirrored)."""
    truth = recorded["manifest"]
    state.drop_marker(args.dir)
    checked = state.verify(args.dir, truth, full=True, jobs=args.jobs)
    base = {"record": str(record.path_for(args.records, args.dir)), "recorded_at": recorded["recorded_at"]}
    if not checked["ok"]:
        return {"ok": False, "refused": True, "bad": checked["bad"], "how": recorded["how"], **base}
    write_json(args.dir / MANIFEST, truth)  # the folder's own copy of the manifest put back, whatever it held
    marked = state.mark(args.dir, truth, args.revision, checked["_snapshot"])
    return {"ok": True, "reverified": True, **marked, **base}


def _record(args: argparse.Namespace) -> dict[str, Any]:
    """Keep the manifest of a copy marked complete before records were kept (its marker proves its bytes are
    the ones hashed then) as its record; a record already there is left as it is."""
    if record.load(args.records, args.dir) is not None:
        return {"recorded": True, "changed": False}
    seen = state.status(args.dir, None, args.revision)
    if not seen["complete"]:
        raise Failure(f"{args.dir} is not complete for revision {args.revision} ({seen['why']}): nothing to record")
    kept = record.save(args.records, args.dir, mf.load(args.dir / MANIFEST), args.revision, "adopted")
    return {"recorded": True, "changed": True, **kept}


def _local(args: argparse.Namespace) -> dict[str, Any]:
    """The manifest this folder is checked against: its record where rank 0 keeps one, else its own."""
    recorded = record.load(args.records, args.dir) if getattr(args, "records", None) else None
    if recorded is not None:
        return recorded["manifest"]
    return mf.load(args.dir / MANIFEST, args.digest)


def _stdin_manifest(args: argparse.Namespace) -> dict[str, Any]:
    return mf.loads(sys.stdin.read(), "rank 0's manifest (stdin)", args.digest)


def _verify(args: argparse.Namespace) -> dict[str, Any]:
    recorded = record.load(args.records, args.dir) if args.records else None
    result = state.verify(args.dir, _local(args), args.full, args.jobs)
    result.pop("_snapshot")
    if recorded is not None:  # held to the record of its first verification: say when that was
        result["recorded_at"] = recorded["recorded_at"]
    return result


def _mark(args: argparse.Namespace) -> dict[str, Any]:
    manifest = _local(args)
    state.drop_marker(args.dir)
    result = state.verify(args.dir, manifest, full=True, jobs=args.jobs)
    if not result["ok"]:
        return {"ok": False, "bad": result["bad"]}
    return {"ok": True, **state.mark(args.dir, manifest, args.revision, result["_snapshot"])}


def _prepare(args: argparse.Namespace) -> dict[str, Any]:
    text = sys.stdin.read()
    result = state.prepare(args.dir, text, args.digest)
    result["pruned"] = state.prune(args.dir, _local(args))
    return result


def _sink(args: argparse.Namespace) -> dict[str, Any]:
    sink = Sink(args.dest)
    out = sys.stdout.buffer
    from .protocol import encode

    def reply(data: dict[str, Any]) -> None:
        out.write(encode(data))
        out.flush()

    try:
        sink.serve(sys.stdin.buffer, reply)
    finally:
        sink.close()
    return {"files": sink.files, "bytes": sink.bytes, "_quiet": True}


def _receive(args: argparse.Namespace) -> dict[str, Any]:
    from .transports.tcp import receive

    return receive(args.dest, args.address, args.port, args.allow, args.idle_timeout)


def _sync(args: argparse.Namespace) -> dict[str, Any]:
    opts = syncing.Options(
        root=args.dir,
        host=args.host,
        dest=(args.dest or str(args.dir)).rstrip("/"),
        revision=args.revision,
        transport=args.transport,
        streams=args.streams,
        ssh=tuple(syncing.ssh_command(args.cipher, args.ssh_options)),
        remote_tool=args.remote_tool or str(Path(sys.argv[0]).resolve()),
        bwlimit_kbps=args.bwlimit,
        port=args.port,
        full=args.full,
        stall_timeout=args.stall_timeout,
        status_file=args.status,
    )
    return syncing.sync(opts, plan=args.plan)


def parser() -> argparse.ArgumentParser:
    jobs = max(2, os.cpu_count() or 2)
    top = argparse.ArgumentParser(prog="sparkplay-ckpt", description="Checkpoint manifests, mirror and verify.")
    sub = top.add_subparsers(dest="command", required=True)

    def command(name: str, func: Any, help_text: str, folder: str = "dir") -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help_text, description=help_text)
        p.set_defaults(func=func)
        if folder:
            p.add_argument(folder, type=Path)
        return p

    records_help = "rank 0's folder of first-verification records: the source of truth (record.py)"
    p = command("manifest", _manifest, "hash every file of rank 0's copy into its manifest (and mark it)")
    p.add_argument("--revision", help="also mark the folder complete for this revision")
    p.add_argument("--jobs", type=int, default=jobs)
    p.add_argument("--records", type=Path, help=records_help)
    p.add_argument("--how", default="first verification", help="what the record says it was made from")
    p.add_argument("--accept", action="store_true", help="take changed bytes as the new truth (the record is kept)")
    p = command(
        "status", lambda a: state.status(a.dir, a.digest, a.revision, a.records), "is a marker valid (no hashing)"
    )
    p.add_argument("--digest", help="rank 0's manifest digest the marker must be for")
    p.add_argument("--revision")
    p.add_argument("--records", type=Path, help=records_help)
    p = command("record", _record, "keep a complete copy's manifest as its record, where none is kept yet")
    p.add_argument("--revision", required=True)
    p.add_argument("--records", type=Path, required=True, help=records_help)
    checks = (
        ("verify", _verify, "check every entry against the local manifest"),
        ("mark", _mark, "hash everything against the local manifest, then mark complete"),
    )
    for name, func, text in checks:
        p = command(name, func, text)
        p.add_argument("--digest", help="rank 0's manifest digest the local manifest must have")
        p.add_argument("--jobs", type=int, default=jobs)
        if name == "verify":
            p.add_argument("--full", action="store_true", help="hash every file (default: sizes and types)")
            p.add_argument("--records", type=Path, help=records_help)
        else:
            p.add_argument("--revision", required=True)
    p = command("need", lambda a: state.need(a.dir, _stdin_manifest(a)), "bytes still to receive (manifest on stdin)")
    p.add_argument("--digest", required=True)
    p = command("prepare", _prepare, "take rank 0's manifest (stdin), drop the marker, prune what it no longer lists")
    p.add_argument("--digest", required=True)
    command("sink", _sink, "receive one stream on stdin/stdout (the ssh transport's far end)", folder="dest")
    p = command("receive", _receive, "receive tcp streams from rank 0 for as long as stdin stays open", "dest")
    p.add_argument("--address", required=True)
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--allow", required=True, help="the sender's address")
    p.add_argument("--idle-timeout", type=float, default=600)
    p = command("sync", _sync, "bring one peer to rank 0's manifest: check, send, hash, mark")
    p.add_argument("--to", required=True, dest="host", help="the peer's cable address")
    p.add_argument("--dest", help="the folder on the peer (default: the same path)")
    p.add_argument("--revision", required=True)
    p.add_argument("--transport", choices=NAMES, default="ssh")
    p.add_argument("--streams", type=int, default=8)
    p.add_argument("--cipher", default="aes128-gcm@openssh.com")
    p.add_argument("--ssh-option", action="append", default=[], dest="ssh_options")
    p.add_argument("--bwlimit", type=int, default=0, help="KiB/s per stream (0: no limit)")
    p.add_argument("--port", type=int, default=0, help="the tcp receiver's port")
    p.add_argument("--full", action="store_true", help="hash the peer's copy even when its marker is valid")
    p.add_argument("--plan", action="store_true", help="only say what a sync would do; change nothing")
    p.add_argument("--status", type=Path, help="status file the role follows")
    p.add_argument("--stall-timeout", type=float, default=600, help="seconds without a byte moved before giving up")
    p.add_argument("--remote-tool", default="", help="this tool's path on the peer (default: the same as here)")
    p = command("progress", lambda a: syncing.progress(a.file, a.job), "a running sync's status", folder="file")
    p.add_argument("--job", help="Ansible's async job id, to notice a sync that never started")
    command("stop", lambda a: syncing.stop(a.file), "end the sync a status file names, if it runs", folder="file")
    p = command("resolve", lambda a: hub.resolve(a.repo, a.revision, a.token_file), "repo revision -> commit", "")
    p.add_argument("--repo", required=True)
    p.add_argument("--revision")
    p.add_argument("--token-file", type=Path)
    p = command(
        "download",
        lambda a: hub.download(a.repo, a.revision, a.dest, a.token_file, a.offline, a.files),
        "snapshot_download into a folder (rank 0)",
        "",
    )
    p.add_argument("--file", dest="files", action="append", default=[], help="only this file (repeatable)")
    p.add_argument("--repo", required=True)
    p.add_argument("--revision", required=True)
    p.add_argument("--dest", type=Path, required=True)
    p.add_argument("--token-file", type=Path)
    p.add_argument("--offline", action="store_true")
    return top


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        result = args.func(args)
    except (Failure, Refused) as exc:
        print(f"sparkplay-ckpt: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:
        print(f"sparkplay-ckpt: {args.command}: {exc}", file=sys.stderr)
        return 1
    except ConnectionError as exc:
        print(f"sparkplay-ckpt: {args.command}: {exc}", file=sys.stderr)
        return 1
    if not result.pop("_quiet", False):
        print(json.dumps(result, sort_keys=True))
    return 0 if result.get("ok", True) else 3
