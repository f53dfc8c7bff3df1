"""EDA tools around the RTL: Verilog output (``verilog``), Yosys area (``area``), recorded
waveforms (``waves``) and reading a VCD back (``vcd``, no Amaranth)."""
