"""Import every file under the folders given, as a user would paste it, and tally what happens: imported (and
planned on stand-in nodes), refused (one line naming why) or a traceback (a bug, printed). For a sweep over real
files nobody here wrote (a fetched repository's scripts, compose files, pages, units):

    .venv/bin/python scripts/pasted_sweep.py DIR... [--stand-in-hub] [--verbose]

(--stand-in-hub: llama.cpp's -hf repositories are listed by a stand-in, not the Hugging Face hub.) Exit 1 when
any file raised something other than a refusal. docs/recipes.md has the figures.
"""

from __future__ import annotations

import collections
import re
import sys
import traceback
from pathlib import Path


def main(args: list[str]) -> int:
    from sparkplay import importing
    from sparkplay.engines.plan import Options, build, stand_in_nodes
    from sparkplay.errors import BadInput
    from sparkplay.recipes.importers.pasted import gguf_hub

    if "--stand-in-hub" in args:  # no network: every GGUF repository lists a file of its name per common tag
        tags = ("Q4_K_M", "Q8_0", "UD-Q4_K_XL", "UD-Q8_K_XL", "MXFP4", "F16")
        gguf_hub.LISTER = lambda repo, _rev: ("0" * 40, [f"{repo.split('/')[-1]}-{q}.gguf" for q in tags])
    verbose = "--verbose" in args
    files = sorted(f for d in args if not d.startswith("--") for f in Path(d).rglob("*") if f.is_file())
    counts: collections.Counter[str] = collections.Counter()
    reasons: collections.Counter[str] = collections.Counter()
    for path in files:
        try:
            docs = importing.import_sources(str(path))
            for doc in docs:
                build(doc, stand_in_nodes(int(doc["topology"]["nodes"] or 1)), Options(model_root="/m", allow=None))
            counts["imported"] += 1
            if verbose:
                print(f"imported {path}: {', '.join(d['name'] for d in docs)}")
        except BadInput as exc:
            counts["refused"] += 1
            problem = str(exc)[len(str(path)) :].lstrip(": ")
            reasons[re.sub(r"\d+", "N", re.sub(r"'[^']*'|\([^)]*\)", "…", problem))[:90]] += 1
            if verbose:
                print(f"refused {path}: {problem[:200]}")
        except Exception:  # a traceback is a bug: printed whole
            counts["traceback"] += 1
            print(f"traceback {path}:")
            traceback.print_exc()
    for reason, n in reasons.most_common():
        print(f"{n:4d}  refused: {reason}")
    print(dict(counts))
    return 1 if counts["traceback"] else 0


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    sys.exit(main(sys.argv[1:]))
