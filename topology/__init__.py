"""GPU and NVLink model of a node, as pure code.

Reads a node's NVLink domains (annotation, defaults by GPU count, `nvidia-smi topo -m`), builds
per-domain occupancy arrays, and scores every node for a pod in one vectorized call. Imports neither
asyncio nor a Kubernetes client: it takes plain data and numpy arrays and returns decisions.
"""
