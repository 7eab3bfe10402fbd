"""The one root exception of tidemark and its small, user-facing subclasses."""

from __future__ import annotations


class TidemarkError(Exception):
    """Root of every error tidemark raises on purpose; its message says what to do next."""

    exit_code = 1


class UsageError(TidemarkError):
    """The user asked for something malformed (bad flag value, bad config): exit code 2."""

    exit_code = 2


class ConfigError(UsageError):
    """The config file is missing, unreadable or invalid."""


class InputError(TidemarkError):
    """The input is not what the command reads: not a checkpoint, no progress log, an empty log (exit 1)."""


class EnvironmentProblem(TidemarkError):
    """Something outside tidemark is missing: Java, a connector jar, a path."""


class SourceError(TidemarkError):
    """The configured source cannot be read."""


class CheckpointError(TidemarkError):
    """A checkpoint folder is unreadable, locked or inconsistent."""


class CheckpointLocked(CheckpointError):
    """Another live run holds the checkpoint."""


class StorageError(TidemarkError):
    """A storage location cannot be reached, read or written (missing container, credentials, permission)."""
