"""Hardware in Python: presets, the command set, DRAM timing and the channel TLM."""
