"""Sources: log files followed through rotation, copies and restarts, and stdin, read in chunks of whole lines.

``tailer.FileTailer`` follows the files under its paths; ``stdin.StdinSource`` reads a pipe. The
rest are its parts: the mechanics of one file (``tailfile``), what a listing's files are
(``placement``, ``identity``, ``copies``, ``filekinds``, ``filefilter``), open-file limits
(``descriptors``), what the file system says changed (``notify``, ``watchdogwatch``) and the
``source`` label a file's place gives (``layouts``).
"""
