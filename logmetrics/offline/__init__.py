"""Whole logs read by their own time: ``backfill`` (TSDB blocks, with ``omwriter`` and
``backfillstate``) and ``report`` (with ``reportview``)."""
