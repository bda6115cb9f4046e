"""Filter and score plugins, each vectorized over every node row of the snapshot."""
