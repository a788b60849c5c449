"""Runs inside a virtualenv with vLLM's CPU build: vLLM's own `vllm serve` parser on each argv given.

stdin: a JSON list of argvs, each as `vllm` would receive it (["serve", MODEL, ...]). stdout: a JSON list,
one entry per argv: null when vLLM's parser and its pre-load checks (validate_parsed_serve_args, as its
CLI runs them) accept it, else vLLM's message. Nothing is loaded or started (building the engine's
arguments already looks for the model, which is not here). The serve subcommand is built exactly as
vllm.entrypoints.cli.main builds it.
"""

from __future__ import annotations

import contextlib
import io
import json
import sys


def check(argv: list[str]) -> str | None:
    from vllm.entrypoints.cli.serve import ServeSubcommand
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    parser = FlexibleArgumentParser(prog="vllm")
    command = ServeSubcommand()
    command.subparser_init(parser.add_subparsers(dest="subparser"))
    errors = io.StringIO()
    try:
        with contextlib.redirect_stderr(errors):
            args = parser.parse_args(argv)
        if getattr(args, "model_tag", None) is not None:
            args.model = args.model_tag  # what ServeSubcommand.cmd does first
        command.validate(args)
    except SystemExit:
        return errors.getvalue().strip().splitlines()[-1] if errors.getvalue().strip() else "argparse refused it"
    except Exception as error:  # vLLM's own refusal, whatever its type, is the answer
        return f"{type(error).__name__}: {error}"
    return None


def main() -> None:
    print(json.dumps([check(argv) for argv in json.load(sys.stdin)]))


if __name__ == "__main__":
    main()
