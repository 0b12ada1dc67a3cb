"""The HTTP adapter: admin API, health endpoints and the dashboard (the only package importing
FastAPI, Starlette and uvicorn). It reaches the ledger only through the Client and the ports
handed to ``create_app``."""
