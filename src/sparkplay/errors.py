"""Errors a user can act on, and the exit codes they map to.

Every error carries the problem and the fix in one line, so the CLI can
print it as is and exit with a code scripts can tell apart.
"""

from __future__ import annotations

from enum import IntEnum


class ExitCode(IntEnum):
    """Process exit codes; documented in `sparkplay --help` and docs/cli.md."""

    OK = 0
    FAILED = 1
    BAD_INPUT = 2
    DECLINED = 3
    HOSTS_FAILED = 4
    HOSTS_UNREACHABLE = 5
    MISSING_PREREQUISITE = 6
    BUSY = 7
    REPAIRED = 8


class SparkplayError(Exception):
    """A failure the user can fix; `str()` is the one-line message."""

    exit_code: ExitCode = ExitCode.FAILED

    def __init__(self, problem: str, fix: str | None = None) -> None:
        self.problem = problem
        self.fix = fix
        super().__init__(f"{problem}; {fix}" if fix else problem)


class BadInput(SparkplayError):
    exit_code = ExitCode.BAD_INPUT


class MissingPrerequisite(SparkplayError):
    exit_code = ExitCode.MISSING_PREREQUISITE


class Declined(SparkplayError):
    """The user, or the lack of a terminal to ask on, said no; nothing was written."""

    exit_code = ExitCode.DECLINED
