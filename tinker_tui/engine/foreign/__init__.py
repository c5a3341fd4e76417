"""Runs other programs train, read from their own run folders as our typed events, so the
one dashboard, headless printer and comparison show them (read-only)."""

#: The `RunStarted.backend` of a run read from another program's folder (`show --<name>`
#: shows it again): tinker-cookbook's run folders, ART's model folders.
FOREIGN_BACKENDS = frozenset({"cookbook", "art"})
