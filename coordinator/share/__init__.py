"""Share groups (KIP-932): membership and assignment here, the share-partition data path beside it."""
