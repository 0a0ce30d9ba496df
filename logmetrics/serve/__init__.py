"""Serving: the HTTP(S) endpoint (``server``) and its web config (``webconfig``)."""
