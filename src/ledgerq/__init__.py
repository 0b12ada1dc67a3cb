"""ledgerq: a distributed job queue whose SQL database is the truth."""
