"""Dynamic PIM Access (DPA): the instruction words, programs and the on-module dispatcher TLM.

Import from the submodule that defines a name (this package re-exports nothing):

- :mod:`models.dpa.format` -- the program word format: instruction kinds and fields,
  ``encode_word`` / ``decode_word``, the configuration-buffer entry, the error classes;
- :mod:`models.dpa.program` -- ``DpaProgram`` and ``expand`` (unrolling through VA2PA);
- :mod:`models.dpa.dispatcher` -- the dispatcher TLM (the twin of ``rtl/dpa.py``): decoder
  timing, ``Dispatcher`` and ``run_pipeline`` (dispatcher -> DCS).

The encoders that turn kernels into DPA programs are in :mod:`compiler.dpa`. See
``docs/dpa.md``.
"""
