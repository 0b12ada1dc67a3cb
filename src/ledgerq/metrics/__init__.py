"""Prometheus metrics: the only package that imports prometheus_client."""
