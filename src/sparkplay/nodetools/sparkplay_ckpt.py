#!/usr/bin/env python3
"""sparkplay-ckpt: download, manifest, mirror and verify a checkpoint on a node.

The launcher the `checkpoint` role installs as /usr/local/lib/sparkplay/sparkplay-ckpt,
beside the `ckpt` package it runs (standard library only). `sparkplay-ckpt --help`
lists the commands; the package's docstring says where each part lives.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from ckpt.cli import main

if __name__ == "__main__":
    sys.exit(main())
