"""The state file (``--state-file``): the SQLite journal (``journal``), its checks before use
(``check``), and saving, loading and locking (``savefile``)."""
