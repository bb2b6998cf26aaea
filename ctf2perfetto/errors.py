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
