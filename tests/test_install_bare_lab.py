"""The installed command from bare lab nodes: `lab up`, then `up lab-tiny`, so that every role the wheel carries
changes everything it writes (a file missing from the wheel that only a change reads shows here). Marked `lab` and
`stack` (make test-stack, for CI's time: issue 52); tests/test_install_lab.py runs the same from the provisioned
nodes' snapshot in make test. Real as there: the wheel built from this tree, installed into a fresh virtualenv.
"""

from __future__ import annotations

import pytest

from tests.conftest import run_cli
from tests.test_install_lab import Installed, brings_up_the_lab_and_serves_lab_tiny, installed

pytestmark = [pytest.mark.lab, pytest.mark.stack, pytest.mark.usefixtures("lab_host")]

__all__ = ["installed"]  # the wheel, built and installed once for this module


def test_the_installed_command_brings_up_bare_nodes_and_serves_lab_tiny(installed: Installed) -> None:
    run_cli("lab", "down")  # a lab another module left (the containers' names are the lab's, whoever made them)
    brings_up_the_lab_and_serves_lab_tiny(installed)
    run_cli("lab", "down")
