"""The engine: chunks from the sources through envelopes, records and parsers into the store
(``engine``), with what applies to each stream (``settings``), the streams it keeps (``streams``)
and the parsers run its way (``parsing``)."""
