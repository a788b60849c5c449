"""A launch script of eugr's launch-cluster.sh (`--launch-script FILE`, spark-vllm-docker's examples/): a bash
script its runner copies into the head node's container (/workspace/exec-script.sh) and runs there, headed by
the documented `# PROFILE:` and `# DESCRIPTION:` comments. Its engine runs in the runner's image: vllm-node
(launch-cluster.sh's `-t` default), which eugr's build-and-copy.sh builds on every node."""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Protocol

from sparkplay.recipes.importers.pasted.docker_run import Container


class _Launch(Protocol):  # launches.Launch, which reads this module's note (no import circle)
    container: Container | None
    notes: list[tuple[str, str, str]]


IMAGE = "vllm-node"  # launch-cluster.sh's IMAGE_NAME
# the header: the comment lines the script opens with (after its #! line)
HEADER = re.compile(r"\A(?:[ \t]*\n|[ \t]*#[^\n]*\n)*")
PROFILE = re.compile(r"^[ \t]*#[ \t]*PROFILE:[ \t]*(\S[^\n]*)$", re.MULTILINE)
DESCRIPTION = re.compile(r"^[ \t]*#[ \t]*DESCRIPTION:[ \t]*(\S[^\n]*)$", re.MULTILINE)


def built_by_eugr(image: str, how: str) -> tuple[str, str, str]:
    """The note for an engine that runs in an image eugr's tooling builds on each node, never pulled."""
    return (
        "engine.image",
        "ignored",
        f"{how} runs the image {image}, which eugr's build-and-copy.sh builds on every node, not pulled from a "
        "registry: build it under that tag on every node first, or --set engine.image to a published image",
    )


def mod_not_in_text(mod: str) -> tuple[str, str, str]:
    """launch-cluster.sh's --apply-mod: a folder on the machine the text ran on."""
    return (
        "engine.mods",
        "ignored",
        f"--apply-mod {mod}: a mod on the machine the text was run on, not in the text: import the recipe "
        "with --mods-from its folder's parent, or apply it by hand",
    )


def profile(text: str) -> str | None:
    """The `# PROFILE:` a launch script's opening comments name; None for any other text."""
    found = PROFILE.search(_header(text))
    return found.group(1).strip() if found else None


def _header(text: str) -> str:
    opening = HEADER.match(text)
    return opening.group(0) if opening else ""


def adopt(launches: Iterable[_Launch], text: str, named: str) -> None:
    """Each engine the script starts outside a container runs in launch-cluster.sh's container: said."""
    described = DESCRIPTION.search(_header(text))
    for launch in launches:
        if launch.container is not None:
            continue
        launch.container = Container(IMAGE, [], {})
        launch.notes.append(built_by_eugr(IMAGE, f"a launch script of eugr's launch-cluster.sh (PROFILE: {named})"))
        if described:
            launch.notes.append(("notes", "derived", f"the script's DESCRIPTION: {described.group(1).strip()}"))
