"""Errors the user can act on."""


class UserError(Exception):
    """A problem with the user's input: one line on stderr, exit code 2."""
