"""Filter and score plugins, each vectorized over every node row of the snapshot.

May import: `scheduler.framework`, `scheduler.state`, `scheduler.kube`, `scheduler.model`,
`scheduler.config`, `topology`.
"""
