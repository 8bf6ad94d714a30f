"""One error root. Each error knows its exit code (SPEC 4.1), a message, and a hint."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Problem:
    """One positioned problem in an input file (1-based line and column)."""

    file: str
    line: int
    column: int
    message: str
    yaml_path: str = ""
    hint: str | None = None
    code: str = ""  # what kind of problem (pydantic error type, or ours), for lint rules
    end_line: int = 0  # where the offending node ends (0: a point, at line:column)
    end_column: int = 0

    def render(self) -> str:
        where = f"{self.file}:{self.line}:{self.column}: "
        path = f"{self.yaml_path}: " if self.yaml_path else ""
        return f"{where}{path}{self.message}"


class BundlectlError(Exception):
    """Base of every expected failure; the CLI turns it into a message and an exit code."""

    exit_code = 70

    def __init__(
        self, message: str, *, hint: str | None = None, problems: list[Problem] | None = None
    ) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint
        # Positioned problems, each shown as its own `error:` line with its own hint.
        self.problems = sorted(problems or [], key=lambda p: (p.file, p.line, p.column))

    @property
    def explained(self) -> str:
        """The message with its hint on the next line (for a model to read, in a tool result)."""
        return self.message + (f"\n{self.hint}" if self.hint else "")


class UsageError(BundlectlError):
    """The command line is wrong (unknown agent, bad argument syntax, missing config)."""

    exit_code = 2


class InputFileError(BundlectlError):
    """An input file cannot be read, parsed or validated; carries every problem found in it."""

    exit_code = 2

    def __init__(self, problems: list[Problem], *, hint: str | None = None) -> None:
        first = min(problems, key=lambda p: (p.file, p.line, p.column)) if problems else None
        super().__init__(first.render() if first else "invalid input", hint=hint, problems=problems)


class ReportedFailure(BundlectlError):
    """A failure the command reports as its result: conflict, stale lock, tool error (exit 1)."""

    exit_code = 1


class ResolutionError(ReportedFailure):
    """No set of bundle versions satisfies every constraint; says who asked for what."""


class PolicyDenied(BundlectlError):
    """The policy denies the call; nothing was started."""

    exit_code = 3


class Unconfirmable(PolicyDenied):
    """An `ask` rule holds the call and no one could be asked to confirm it."""


class Declined(PolicyDenied):
    """The person asked to confirm an `ask` rule's call said no."""


class ToolCallError(BundlectlError):
    """The tool does not exist, or the arguments do not satisfy its input schema."""

    exit_code = 4


class ServerError(BundlectlError):
    """The server could not start or connect, crashed, or broke the protocol."""

    exit_code = 5


class ClientLacks(ServerError):
    """The server needs a capability the client did not declare (2026-07-28: -32021); `data`
    names it (`requiredCapabilities`), for a gateway to pass on to its own client."""

    def __init__(self, message: str, data: object, *, hint: str | None = None) -> None:
        super().__init__(message, hint=hint)
        self.data = data


class ServerCrashed(ServerError):
    """The server's connection ended under a call (it exited or crashed) or it broke the
    protocol: a crash, counted towards its restart backoff."""


class CallTimeout(BundlectlError):
    """The call or the connection timed out; the server was stopped."""

    exit_code = 6


class Interrupted(BundlectlError):
    """SIGTERM or Ctrl-C arrived; servers were stopped before we exit."""

    exit_code = 130
