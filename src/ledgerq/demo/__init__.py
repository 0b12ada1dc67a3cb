"""``ledgerq demo``: a realistic mixed workload run by a pool of worker processes on a fresh
SQLite ledger, watched live from the database and summarised at the end."""
