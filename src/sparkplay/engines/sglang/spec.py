"""SGLang as recipes say it: `python3 -m sglang.launch_server --model-path MODEL` or `sglang serve`, its
one served name, its speculative algorithm and static memory fraction."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from sparkplay import argv
from sparkplay.engines.spec import Defaults, EngineSpec, Fraction, Note

DRAFT_FLAGS = ("--speculative-draft-model-path", "--speculative-draft-model")


# how its serve command is written (the error for a command of no known engine lists it)
COMMAND = "python3 -m sglang.launch_server --model-path MODEL, or sglang serve"


# the image a recipe that names none runs in (engines/spec.py Defaults.image), and whose guide it follows
IMAGE = "lmsysorg/sglang:v0.5.14-cu130-runtime"
IMAGE_FROM = "SGLang's CUDA 13 release, the build DGX Spark's GB10 needs"


class Sglang(EngineSpec, name="sglang", title="SGLang", command=COMMAND):
    # SGLang's launch_server default port; a first boot compiles CUDA graphs
    defaults = Defaults(runtime="docker", port=30000, health_timeout_s=1800, image=IMAGE, image_from=IMAGE_FROM)
    context_flags = ("--context-length",)
    field_flags: ClassVar[Mapping[str, tuple[str, ...]]] = {
        "tensor_parallel": ("--tp-size", "--tensor-parallel-size", "--tp"),
        "pipeline_parallel": ("--pp-size", "--pipeline-parallel-size", "--pp"),
        "expert_parallel": ("--ep-size", "--expert-parallel-size", "--ep"),
        "nodes": ("--nnodes",),
        "gpu_memory_utilization": ("--mem-fraction-static",),
        "port": ("--port",),
        "bind": ("--host",),
        "served_name": ("--served-model-name",),
    }
    images = ("lmsysorg/sglang", "nvcr.io/nvidia/*", "scitrera/*")
    memory_fraction = Fraction(("--mem-fraction-static",), (), 0.88)
    revision_flag = "--revision"
    knobs_read = frozenset({"gpu_memory_utilization"})  # its --mem-fraction-static
    served_name_flags = ("--served-model-name",)
    program = ("python3", "-m", "sglang.launch_server")
    spellings = ("sglang",)
    own_flags = frozenset(
        "--model-path --mem-fraction-static --context-length --tp-size --chunked-prefill-size "
        "--max-running-requests --cuda-graph-max-bs --disable-radix-cache --speculative-algorithm".split()
    )
    per_rank = ("--nnodes", "--node-rank", "--dist-init-addr")
    plain_env = frozenset({"SGLANG_ENABLE_JIT_DEEPGEMM", "SGLANG_DISABLE_CUDNN_CHECK"})

    def command_words(self, model: str) -> list[str]:
        return [*self.program, "--model-path", model]

    def recognise(self, program: str, rest: Sequence[str]) -> tuple[str | None, list[str]] | None:
        if program in ("python", "python3") and list(rest[:2]) == ["-m", "sglang.launch_server"]:
            args = list(rest[2:])
        elif program == "sglang" and rest[:1] == ["serve"]:
            args = list(rest[1:])
        else:
            return None
        return argv.flag_value(args, "--model-path", "--model"), args

    def context_value(self, text: str) -> int | None:
        return argv.whole(text, "--context-length")

    def speculative(self, args: Sequence[str], note: Note) -> dict[str, Any] | None:
        algorithm = argv.flag_value(args, "--speculative-algorithm", "--speculative-algo")
        if algorithm is None:
            return None
        return {
            "method": algorithm.lower(),
            "num_tokens": argv.whole(argv.flag_value(args, "--speculative-num-steps"), "--speculative-num-steps"),
            "draft_model": argv.flag_value(args, *DRAFT_FLAGS),
        }

    def left_out(self, args: Sequence[str], note: Note) -> list[str]:
        """SGLang serves one name (ServerArgs.served_model_name is a single string; its parser refuses what
        follows as unrecognised arguments): a source listing several keeps the first, the rest named as left out."""
        names = argv.flag_values(args, "--served-model-name")
        if len(names) < 2:
            return list(args)
        at = max(i for i, word in enumerate(args) if word == "--served-model-name")
        note(
            "model.served_name",
            "cleaned",
            f"--served-model-name lists {len(names)} names; SGLang serves one (its parser refuses the rest): "
            f"sparkplay serves {names[0]!r} and leaves out {', '.join(repr(n) for n in names[1:])}",
        )
        return [*args[: at + 2], *args[at + 1 + len(names) :]]

    def unused_draft(self, args: Sequence[str], speculative: Mapping[str, Any] | None) -> tuple[str, str] | None:
        draft = argv.flag_value(args, *DRAFT_FLAGS)
        if speculative is not None or not draft:
            return None
        return draft, "SGLang speculates only with --speculative-algorithm"


SPEC = Sglang()
