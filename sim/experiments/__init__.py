"""Paper experiments run by the ``pimphony`` command line, one module each.

- :mod:`sim.experiments.size_report` -- static vs DPA instruction size (PIMphony Fig. 10c),
  ``pimphony size-report``;
- :mod:`sim.experiments.capacity` -- KV-cache capacity utilisation of static vs lazy
  allocation (PIMphony Fig. 19), ``pimphony capacity``.

Each has ``add_arguments(parser)``, ``run(args) -> int`` and a ``main`` for ``python -m``.
"""
