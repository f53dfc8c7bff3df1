"""RTL-vs-TLM verification: every RTL block run (cocotb + Verilator, or Amaranth's simulator)
against its TLM twin.

``runner`` is the cocotb runner; ``scheduler``, ``dpa`` and ``bank_slice`` are the harnesses of
the blocks of the same name (``models/X.py`` <-> ``rtl/X.py`` <-> ``sim/verify/X.py``; the
three scheduler blocks share ``scheduler``); ``tb_*`` are the cocotb testbenches they run and
``streams`` the test streams. ``compiled`` runs the scheduler blocks in a Verilator C++
testbench (``harness/scheduler_tb.cpp``) at native speed, and ``campaign`` checks random
streams with it (``pimphony verify campaign``); ``campaign_blocks`` does so for the DPA and
bank-slice blocks on their cocotb harnesses and holds the table of every block's campaign;
``docs/verification.md``.
"""
