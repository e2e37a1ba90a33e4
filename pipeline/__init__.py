"""The data pipeline: a Spark Structured Streaming job with kbroker as source and sink.

Reads JSON order events from a topic (read_committed), dead-letters the invalid ones with a
reason, enriches the rest from a small product table shipped in ``pipeline/data`` and counts
them per category in event-time windows; results are written exactly once through Kafka
transactions (see ``pipeline/sink.py`` and ``pipeline/README.md`` for the guarantee and its
limits). ``python -m pipeline stream|backfill ...`` runs it.
"""
