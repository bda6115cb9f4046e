"""The scheduling loop: the queue (activeQ, backoffQ, unschedulable pool), the informer handlers
that feed it and the cache, the profile of plugins, the scheduling cycle and its binding cycle,
and the periodic tasks beside it (allocation tracking, GPU-conflict scan, GPU time accounting).

May import every package below it (`postfilter`, `victims`, `gangs`, `plugins`, `framework`,
`state`, `kube`, `model`); only `scheduler.tools`, `scheduler.daemon` and `scheduler.cli` sit
above it.
"""
