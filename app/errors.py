"""Errors the command line prints as one clear line, without a traceback."""


class UsageError(Exception):
    """A mistake on the command line or in the environment."""
