"""The broker process: server, request handlers, replica manager, config, metrics."""
