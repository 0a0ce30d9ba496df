"""Errors the user can act on."""


class UserError(Exception):
    """A problem with the user's input: one line on stderr, exit code 2."""


class StateNotSaved(Exception):
    """The state file could not be saved at shutdown: one line on stderr, exit code 3."""


EXIT_STATE_NOT_SAVED = 3
