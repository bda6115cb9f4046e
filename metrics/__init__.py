"""Observability of the scheduler itself.

Prometheus metrics, the /metrics, /healthz and /readyz server, and GPU busy-time accounting.
"""
