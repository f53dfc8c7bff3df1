"""DCC: data-centric compilation of a kernel onto a PIM back end (``docs/dcc.md``).

``schedule`` the schedule generator (loop nests, dimension sets, tiling drafts, the three
pruning rules, core tiles); ``lowering`` ``GroupProgram``, what a group lowering returns;
the group lowerings of each back end, ``hbm_pim_lowering``, ``aim_lowering`` and
``attacc_lowering`` (``GROUP_LOWERINGS``, ``run_group``, each back end's default mapping);
``cost`` what a draft costs (the worst group's share lowered and timed, rearrangement, host
adds, placement, the GPU roofline per kernel); ``tune`` the search over drafts; ``predictor``
the coupled XGBoost predictor and the best-draft ``LookupTable``; ``files`` where a table's
predictor sits beside it (light: the command line's output rule reads it).
"""
