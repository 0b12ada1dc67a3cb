"""The ``ledgerq`` command line: parses, dispatches, and prints tables or JSON."""
