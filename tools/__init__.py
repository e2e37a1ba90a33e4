"""Command-line tools of kbroker (Kafka-compatible, no Java needed)."""
