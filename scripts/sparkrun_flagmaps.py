"""Regenerate src/sparkplay/recipes/importers/sparkrun/flagmaps.json from an installed sparkrun (needs Python >= 3.12):

    python3.12 -m venv /tmp/sr && /tmp/sr/bin/pip install sparkrun==0.4.2
    /tmp/sr/bin/python scripts/sparkrun_flagmaps.py > src/sparkplay/recipes/importers/sparkrun/flagmaps.json

The file is the data of sparkrun's rule for a recipe without a command template (which `defaults` key becomes
which engine flag, which are switches); sparkplay's own code (recipes/importers/sparkrun/flags.py) applies it.
"""

import json
import sys
from importlib.metadata import version

from sparkrun.runtimes import _vllm_common as vllm
from sparkrun.runtimes import atlas, llama_cpp, sglang, trtllm


def main() -> None:
    data = {
        "sparkrun": version("sparkrun"),
        "vllm": {
            "flags": vllm.VLLM_FLAG_MAP,
            "switches": sorted(vllm.VLLM_BOOL_FLAGS),
            "negatable": sorted(vllm.VLLM_NEGATABLE_BOOL_FLAGS),
        },
        "sglang": {"flags": sglang._SGLANG_FLAG_MAP, "switches": sorted(sglang._SGLANG_BOOL_FLAGS)},
        "llamacpp": {
            "flags": {**llama_cpp._LLAMA_CPP_FLAG_MAP, **llama_cpp._LLAMA_CPP_BOOL_FLAGS},
            "switches": sorted(llama_cpp._LLAMA_CPP_BOOL_FLAGS),
            "defaults": llama_cpp._LLAMA_CPP_DEFAULTS,
        },
        "atlas": {
            "flags": atlas._ATLAS_FLAG_MAP,
            "switches": sorted(atlas._ATLAS_BOOL_FLAGS),
            "value_switches": sorted(atlas._ATLAS_VALUE_BOOL_FLAGS),
            "owned": sorted(atlas._ATLAS_SPARKRUN_OWNED_KEYS),
        },
        "trtllm": {
            "flags": trtllm._TRTLLM_FLAG_MAP,
            "switches": sorted(trtllm._TRTLLM_BOOL_FLAGS),
            # keys sparkrun writes to an LLM API options file it makes, adding --extra_llm_api_options for it
            "api_options": sorted(trtllm._EXTRA_CONFIG_KEYS),
        },
    }
    json.dump(data, sys.stdout, indent=1)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
