"""The top floor: the ``pimphony`` command line, the systems, serving, the experiments and the
RTL-vs-TLM harness; the only package that sees :mod:`~pimphony.models`,
:mod:`~pimphony.compiler` and :mod:`~pimphony.rtl` together.

Sub-packages: ``systems`` (what runs a decode step: the ``System`` interface and the
``SYSTEMS`` registry), ``serving`` (requests over time), ``experiments`` (the papers'
figures, one command each), ``analysis`` (what several experiments share), ``verify``
(RTL vs TLM), ``eda`` (Verilog, area, waves).

Modules: ``cli`` (the ``pimphony`` command: one parser, the ``COMMANDS`` table),
``outputs`` (the one output rule at the command line's edge), ``provenance`` (what produced
a report), ``report`` (tables and plots of channel runs), ``channel_commands`` (``demo``,
``run``, ``compile``), ``presets`` and ``xpus`` (the preset listings), ``workloads`` (the
papers' context-length statistics), ``pim_gemv`` (a GEMV on a command-level back end),
``tune`` and ``tune_energy`` (DCC's best draft of a kernel and its energy), ``sherpa_timing``
and ``sherpa_energy`` (PIM-SHERPA's host, timing and energy), ``fidelity`` (the papers'
claims beside ours, ``docs/fidelity.md``), ``sweep_run`` (a sweep file's points on Ray,
cached, a Parquet table).
"""
