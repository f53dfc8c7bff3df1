"""Drivers: the ``pimphony`` command line, reports, benchmarks and simulation glue."""
