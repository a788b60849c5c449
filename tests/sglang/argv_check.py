"""Runs inside a virtualenv with SGLang from the package index: SGLang's own server argument parser on each argv.

stdin: a JSON list of argvs, each as `python3 -m sglang.launch_server` receives it (the words after the module).
stdout: a JSON list, one entry per argv: null when SGLang's parser accepts it, else SGLang's message. The parser
is built exactly as sglang.srt.server_args.prepare_server_args builds it (ServerArgs.add_cli_args on an
argparse parser); ServerArgs itself is not constructed, since its checks look for a GPU and the model.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import sys


def check(argv: list[str]) -> str | None:
    from sglang.srt.server_args import ServerArgs

    parser = argparse.ArgumentParser(prog="sglang serve")
    ServerArgs.add_cli_args(parser)
    errors = io.StringIO()
    try:
        with contextlib.redirect_stderr(errors):
            parser.parse_args(argv)
    except SystemExit:
        text = errors.getvalue().strip()
        return text.splitlines()[-1] if text else "argparse refused it"
    return None


def main() -> None:
    print(json.dumps([check(argv) for argv in json.load(sys.stdin)]))


if __name__ == "__main__":
    main()
