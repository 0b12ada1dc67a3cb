"""Pure domain of ledgerq: job model, states, retry policy, errors and ports (stdlib only)."""
