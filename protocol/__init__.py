"""The Kafka wire protocol: framing, headers, the API registry, codecs and record batches.

No sockets and no disk here; everything is bytes in, values out.
"""
