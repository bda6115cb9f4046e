"""Reclaim of measurably idle GPUs.

Policy read from PriorityClass annotations, idle verdicts from GPU usage samples, victim selection
(all pure), and the adapters that query Prometheus and evict through the Eviction API.
"""
