"""Cluster metadata: brokers, topics, partition leaders and epochs, producer-id blocks."""
