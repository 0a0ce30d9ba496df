"""The running ``watch``: its configuration file (``config``), the poll loop that wires the stages
(``runner``), SIGHUP (``reload``) and the backends' processes (``procs``)."""
