"""The durable log: partitions as directories of segment files, no network and no coordinators."""
