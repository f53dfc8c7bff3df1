"""Serving over time: request arrivals, continuous batching with growing KV caches, latency
and throughput metrics (``pimphony serve``, ``docs/serving.md``).

``trace`` (JSONL/CSV traces, Poisson arrivals over a workload's prompts), ``engine`` (the
continuous-batching loop over any :data:`~pimphony.sim.systems.registry.SYSTEMS` row: FCFS
admission into its KV pool, prefill, lazy-growth preemption), ``report`` (percentiles,
batch and memory over time, the figure), ``command`` (``pimphony serve``), ``fig4``
(``serve-fig4``: LoL-PIM Fig. 4 shape) and ``fig17`` (``serve-fig17``: PIMphony Fig. 17).
"""
