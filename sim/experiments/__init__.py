"""Experiments that reproduce the papers' figures and tables, one module each.

Each module has ``add_arguments(parser)`` and ``run(args) -> int`` and is a ``pimphony``
command (a row of :data:`sim.cli.COMMANDS`): ``sweep`` (Fig. 8), ``ablation`` (Fig. 13),
``dex`` (LibraPIM bank slicing), ``capacity`` (Fig. 19), ``size_report`` (Fig. 10c) and
``bench`` (simulation speed).
"""
