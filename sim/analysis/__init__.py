"""What several experiments and commands share that is neither a system nor a report helper:
``dcc_shapes`` (the shapes DCC's evaluation asks for), ``dcc_table`` (DCC's lookup table as a
file)."""
