"""Share groups (KIP-932): membership, share-partition state, its persistence."""
