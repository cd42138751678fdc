"""The copy's domain: what a copy carries and how (``rules``: which nodes, how they compare;
``counters`` and ``ledger_ids``: sequence counters and BookKeeper's ledger-id generators;
``delta``: carrying and checking a set of changed paths through the store layer). Spark-free:
the coordinator uses it between passes, and ``metashift.spark`` runs it over a whole tree."""
