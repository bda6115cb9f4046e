"""The plugin framework: extension-point contracts, Status, cycle state, the node snapshot, and
the runner that applies filters and scores to every node at once.

May import: `scheduler.state`, `scheduler.model`, `scheduler.config`, `topology`.
"""
