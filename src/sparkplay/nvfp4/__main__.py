"""`python3 -m sparkplay.nvfp4 convert|verify`: the converter as the mtp_overlay role runs it on a node.

Standard library and numpy only (PyTorch is used when present), so the role
can install it beside python3-numpy without the rest of sparkplay. Prints one
JSON object; exits 1 with a one-line error.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from sparkplay.nvfp4 import overlay


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m sparkplay.nvfp4")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("convert")
    p.add_argument("--source", type=Path, required=True)
    p.add_argument("--output", type=Path, required=True)
    p.add_argument("--scheme", default="atlas", choices=["atlas", "modelopt"])
    p.add_argument("--match", default=overlay.DEFAULT_MATCH)
    p.add_argument("--expect", type=int, default=overlay.DEFAULT_EXPECT, help="0: any count")
    p.add_argument("--device", default="auto", choices=["auto", "cpu", "gpu"])
    p.add_argument("--keep-moved", type=int, default=overlay.DEFAULT_KEEP_MOVED)
    p = sub.add_parser("verify")
    p.add_argument("output", type=Path)
    p.add_argument("--expect", type=int, default=0)
    p = sub.add_parser("make-test-checkpoint")
    p.add_argument("dest", type=Path)
    p.add_argument("--experts", type=int, default=2)
    p.add_argument("--rows", type=int, default=32)
    p.add_argument("--cols", type=int, default=64)
    args = parser.parse_args(argv)
    try:
        if args.command == "make-test-checkpoint":
            from sparkplay.nvfp4.testmodel import make_checkpoint

            made = make_checkpoint(args.dest, args.experts, args.rows, args.cols)
            print(json.dumps({"checkpoint": str(made), "matrices": args.experts * 3}))
            return 0
        if args.command == "convert":
            result = overlay.convert(
                args.source,
                args.output,
                scheme=args.scheme,
                match=args.match,
                expect=args.expect or None,
                device=args.device,
                keep_moved=args.keep_moved,
            )
            print(
                json.dumps(
                    {
                        "output": str(result.output),
                        "action": result.action,
                        "converted": result.converted,
                        "moved_aside": str(result.moved_aside) if result.moved_aside else None,
                        "reason": result.reason,
                        "route": result.route,
                        "removed": [str(p) for p in result.removed],
                        "kept": [str(p) for p in result.kept],
                        "seconds": round(result.seconds, 3),
                    }
                )
            )
            return 0
        report = overlay.verify_report(args.output, args.expect or None)
        print(
            json.dumps(
                {
                    "ok": not report.problems,
                    "problems": report.problems,
                    "links_hashed": report.links_hashed,
                    "links_proven_by_manifest": report.links_proven,
                }
            )
        )
        return 0 if not report.problems else 3
    except overlay.OverlayError as exc:  # a bad source: nothing was written
        print(f"sparkplay-overlay: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"sparkplay-overlay: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
