"""Built-in parser plugins, one module per backend (installed as ``logmetrics_parsers``)."""
