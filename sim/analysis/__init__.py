"""What several experiments (and commands) share that is neither a system nor a report helper:
``dcc_shapes`` (the shapes DCC's evaluation asks for, the train/test split of a predictor's
shapes), ``dcc_table`` (DCC's lookup table of best drafts as a file) and ``librapim_grid``
(LibraPIM's evaluation grid and output folder)."""
