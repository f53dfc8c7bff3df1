"""Serving over time: request arrivals, continuous batching with growing KV caches, latency
and throughput metrics (``pimphony serve``, ``docs/serving.md``)."""
