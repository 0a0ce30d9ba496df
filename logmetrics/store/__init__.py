"""The store and what reads it: the metric catalog (``catalog``), the values events update
(``store``), the scrape-time exposition (``exposition``) and the metric reference (``reference``)."""
