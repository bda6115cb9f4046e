"""Adapters to the Kubernetes API server: list/watch, binding, eviction, events, the Lease.

Everything that sends a request to the API server lives here, so the write fencing of leader
election (see `scheduler.kube.leader`) has one place to sit. The scheduling core above calls these
adapters; nothing here imports the core.
"""
