"""Settings, read once from arguments, ``LEDGERQ_*`` variables and ``.env`` (``settings``)."""
