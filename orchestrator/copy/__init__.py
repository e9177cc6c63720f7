"""The synced copy of the person's tree: walk, stamps, file operations, bounds, sync, the store
of kept copies, the scratch copy."""
