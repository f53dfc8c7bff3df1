"""Experiments that reproduce the papers' figures and tables, one module (or package) each.

Each has ``add_arguments(parser)`` and ``run(args) -> int`` and is a ``pimphony`` command (a
row of :data:`sim.cli.COMMANDS`): ``sweep`` (Fig. 8), ``ablation`` (Fig. 13; Fig. 14 with
``--system xpu+pim``), ``dex`` (LibraPIM bank slicing), ``capacity`` (Fig. 19),
``size_report`` (Fig. 10c), ``bench`` (simulation speed) and the others the table names.
An experiment imports no other experiment (``tests/test_layers.py``): what several share
lives in ``sim/systems/`` (systems, the split search), ``sim/analysis/`` (the DCC and LibraPIM
evaluations' shapes, grids and tables) or ``sim/report.py``; ``sim/fidelity.py`` checks the
papers' claims over them.
"""
