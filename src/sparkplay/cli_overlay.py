"""`sparkplay overlay convert|verify`: the MTP -> NVFP4 overlay (sparkplay.nvfp4.overlay)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from sparkplay.cli_common import out, reports_errors
from sparkplay.errors import BadInput, SparkplayError
from sparkplay.nvfp4 import overlay

overlay_app = typer.Typer(help="Convert MTP expert matrices to an NVFP4 overlay, and verify one.")


@overlay_app.command("convert")
@reports_errors
def convert(
    source: Annotated[Path, typer.Option("--source", help="A safetensors checkpoint folder with an index.")],
    output: Annotated[Path, typer.Option("--output", help="Where the overlay goes (an older one is moved aside).")],
    scheme: Annotated[
        str, typer.Option("--scheme", help="atlas (Atlas's own rules) or modelopt (NVIDIA ModelOpt's).")
    ] = "atlas",
    match: Annotated[
        str, typer.Option("--match", help="Regex of the tensor names to convert.")
    ] = overlay.DEFAULT_MATCH,
    expect: Annotated[int, typer.Option("--expect", help="How many must match (0: any).")] = overlay.DEFAULT_EXPECT,
    device: Annotated[
        str,
        typer.Option("--device", help="auto (the faster of the GPU and the CPU kernel, measured here), cpu or gpu."),
    ] = "auto",
    keep_moved: Annotated[
        int, typer.Option("--keep-moved", help="Older overlays moved aside to keep (sparkplay's beyond it removed).")
    ] = overlay.DEFAULT_KEEP_MOVED,
) -> None:
    """Build the overlay: matching BF16 matrices as NVFP4, the rest linked or carried byte-exact."""
    try:
        result = overlay.convert(
            source, output, scheme=scheme, match=match, expect=expect or None, device=device, keep_moved=keep_moved
        )
    except overlay.OverlayError as exc:
        raise BadInput(str(exc), "fix the source checkpoint or the options; nothing was written") from None
    except OSError as exc:
        raise BadInput(f"{exc.filename or output}: {exc.strerror or exc}", "check the folders and free space") from None
    moved = f"; the previous one is now {result.moved_aside}" if result.moved_aside else ""
    why = f" ({result.reason})" if result.reason else ""
    route = f", route {result.route}" if result.route else ""
    out.print(
        f"{result.output}: {result.action}{why}, {result.converted} matrices{route}, {result.seconds:.1f} s{moved}",
        markup=False,
        highlight=False,
    )
    for folder in result.removed:
        out.print(f"removed an older overlay moved aside: {folder}", markup=False, highlight=False)
    for folder in result.kept:
        out.print(
            f"kept {folder}: moved aside but not sparkplay's; remove it yourself when you no longer need it",
            markup=False,
            highlight=False,
        )


@overlay_app.command("verify")
@reports_errors
def verify(
    output: Annotated[Path, typer.Argument(help="The overlay folder.")],
    expect: Annotated[int, typer.Option("--expect", help="How many matrices it must hold (0: as recorded).")] = 0,
    as_json: Annotated[bool, typer.Option("--json", help="Print the problems as JSON.")] = False,
) -> None:
    """Re-read the overlay: every payload hash, linked file, the index against the shards, the count."""
    report = overlay.verify_report(output, expect or None)
    problems = report.problems
    if as_json:
        out.print_json(
            json.dumps(
                {
                    "ok": not problems,
                    "problems": problems,
                    "links_hashed": report.links_hashed,
                    "links_proven_by_manifest": report.links_proven,
                }
            )
        )
    for problem in problems if not as_json else []:
        out.print(problem, markup=False, highlight=False)
    if problems:
        raise SparkplayError(f"{output} is not a verified overlay ({len(problems)} problem(s))", "convert it again")
    if not as_json:
        out.print(
            f"{output}: verified (linked files: {report.links_hashed} hashed in full, {report.links_proven} "
            "proven by the checkpoint's verified manifest)",
            markup=False,
            highlight=False,
        )
