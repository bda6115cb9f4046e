"""Dynamic Resource Allocation, the pure part: CEL selectors over devices, the allocator that
chooses a claim's devices on one node with kube-scheduler's semantics, and the NVLink-aware
choice among the allocations that satisfy a claim.

Nothing here does I/O or knows the scheduler's loop: it reads the records of `scheduler.model`
(devices, pools, claims, classes) and plain data, and returns records. `scheduler.state` keeps
what is allocated and in flight; `scheduler.plugins` calls the allocator per node; the writes
live in `scheduler.kube` and `scheduler.core`.
"""
