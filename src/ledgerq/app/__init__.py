"""The application and its composition root: ``LedgerQ`` (``application``), the ``Task`` handle
(``task``), the wiring that builds every part from Settings once (``wiring``), the operations
surface for ``ledgerq serve`` (``operations_surface``) and schedule operations shared by the
command line and the API (``schedule_ops``)."""
