"""Errors that reach the user as one line, never as a traceback."""


class MemqError(Exception):
    """A failure the user can act on. The message is printed as one line.

    `exit_code` is 1 for a failure (bad trace, engine error) and 2 for a usage
    error (missing file, bad option), following the CLI convention.
    """

    exit_code = 1

    def __init__(self, message: str, exit_code: int | None = None) -> None:
        super().__init__(message)
        if exit_code is not None:
            self.exit_code = exit_code


class UsageError(MemqError):
    """Bad command-line input: a path that does not exist, a wrong option."""

    exit_code = 2


# The command reporting errors (`ctf2perfetto`, `memq`): set by cli.run_command, used where a line must be
# written without Python's help (ctf2perfetto/native/crash.c).
_program = ["memq"]


def set_program(name: str) -> None:
    _program[0] = name


def error_text(message: str, prog: str | None = None) -> str:
    """`PROG: error: MESSAGE` on one line: how every error reaches the user."""
    return f"{prog or _program[0]}: error: {' '.join(str(message).split())}"
