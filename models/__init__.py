"""The hardware as numbers: presets, the command set, DRAM timing and the channel TLM.

A leaf: imports nothing else of pimphony. Modules:

- ``config`` presets and the one strict TOML loader; ``isa`` the command set, field widths,
  stream files (``StreamReader`` reads one in chunks); ``dram`` timing.
- ``channel`` one channel: the ``SCHEDULERS`` registry, ``ChannelRun`` (a stream fed in chunks,
  state carried across them), ``run_channel``, ``run_channels`` (N channels in one compiled
  call), ``run_channel_reference`` (the whole-stream TLM, for equivalence tests and
  ``make bench``), the schedule checker.
- ``static_sched``, ``pingpong``, ``dcs`` the schedulers' numba kernels (reference and
  streaming forms); ``tally`` the statistics a kernel accumulates as it issues.
- ``bank_slice`` LibraPIM's dual-path execution; ``dbo`` LibraPIM's Dynamic Batch Offloading
  (Algorithm 1); ``functional`` values and the dataflow check.
- ``dpa/`` DPA: ``format`` program words, ``program`` expansion, ``dispatcher`` the on-module
  dispatcher and the DPA->DCS pipeline.
- ``hub`` HUB format and sequencer, EPU and link costs; ``module`` one module's attention task
  graph; ``system`` links, all-reduce, pipeline period.
- ``xpu_config`` compute-device presets (``configs/xpu/``); ``xpu`` the xPU cost model (capped
  roofline, systolic tile quantisation, flash-decoding attention; ``docs/xpu.md``).
- ``energy`` energy presets (``configs/energy/``: ``aim``, ``hbm``, ``attacc``, ``lpddr``) and
  the energy of channel runs and command streams (``docs/energy.md``).
- ``memory`` chunk geometry and the ``ALLOCATORS`` registry of KV memory policies; ``layout``
  weight layouts for a host with PIM banks (``configs/layouts/``, ``docs/sherpa.md``).
- ``backends`` DCC's multi-level PIM abstraction as data (``configs/backends/``); ``attacc``
  and ``hbm_pim`` the command-level AttAcc and HBM-PIM back ends (``docs/dcc.md``), whose
  DRAM bank rules are tables run by one engine, ``dram_rules`` (one ``Timeline``).
- ``reference`` the plain-Python oracles the numba kernels are tested against.
- ``jit`` numba, imported once (without SciPy), and ``Widened``: a kernel compiled once per
  pattern of ``None`` arguments whatever its command fields' layout.
- ``fileio`` ``BUILD_DIR``, atomic writes, the plot preamble; ``errors`` ``PimphonyError``,
  the base of every deliberate error (``docs/errors.md``).
"""
