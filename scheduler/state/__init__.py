"""What the scheduler knows of the cluster: the cache (nodes, pods, GPU occupancy, assumptions,
as arrays for the vectorized plugins), plain-data readings of it for metrics, and the
`SchedulerContext` the daemon's long-lived parts share.

May import: `scheduler.model`, `scheduler.kube` (the context holds the API client and recorder),
`scheduler.config`, `metrics`, `topology`.
"""
