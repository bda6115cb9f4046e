"""Reclaim of measurably idle GPUs: the pure policy half and its Prometheus adapter.

Policy read from PriorityClass annotations (`policy`), idle verdicts from GPU usage samples
(`usage`, `signals`), PromQL building (`promql`), offline replay (`replay`) and the Prometheus HTTP
adapter (`prometheus`). Nothing here imports `scheduler`: the PostFilter that evicts lives in
`scheduler.postfilter` (entry point `scheduler.postfilter.reclaim.Reclaimer`).
"""
