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
    scheme: Annotated[str, typer.Option("--scheme", help="atlas (modelopt is not implemented yet).")] = "atlas",
    match: Annotated[
        str, typer.Option("--match", help="Regex of the tensor names to convert.")
    ] = overlay.DEFAULT_MATCH,
    expect: Annotated[int, typer.Option("--expect", help="How many must match (0: any).")] = overlay.DEFAULT_EXPECT,
    device: Annotated[str, typer.Option("--device", help="auto (the GPU when PyTorch sees one), cpu or gpu.")] = "auto",
) -> None:
    """Build the overlay: matching BF16 matrices as NVFP4, the rest linked or carried byte-exact."""
    try:
        result = overlay.convert(source, output, scheme=scheme, match=match, expect=expect or None, device=device)
    except overlay.OverlayError as exc:
        raise BadInput(str(exc), "check the source checkpoint and the options") from None
    moved = f"; the previous one is now {result.moved_aside}" if result.moved_aside else ""
    out.print(f"{result.output}: {result.action}, {result.converted} matrices, {result.seconds:.1f} s{moved}",
              markup=False, highlight=False)  # fmt: skip


@overlay_app.command("verify")
@reports_errors
def verify(
    output: Annotated[Path, typer.Argument(help="The overlay folder.")],
    expect: Annotated[int, typer.Option("--expect", help="How many matrices it must hold (0: as recorded).")] = 0,
    as_json: Annotated[bool, typer.Option("--json", help="Print the problems as JSON.")] = False,
) -> None:
    """Re-read the overlay: every payload hash, linked file, the index against the shards, the count."""
    problems = overlay.verify(output, expect or None)
    if as_json:
        out.print_json(json.dumps({"ok": not problems, "problems": problems}))
    for problem in problems if not as_json else []:
        out.print(problem, markup=False, highlight=False)
    if problems:
        raise SparkplayError(f"{output} is not a verified overlay ({len(problems)} problem(s))", "convert it again")
    if not as_json:
        out.print(f"{output}: verified", markup=False, highlight=False)
