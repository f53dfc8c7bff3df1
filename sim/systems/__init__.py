"""Systems: what runs an LLM decode step, on PIM, an xPU beside PIM, GPUs or LibraPIM's rows.

``setup`` (what a step depends on), ``kernels`` (channel kernels run through the TLM, memoised),
``admission`` (KV memory and batch filling), ``step`` (one PIM step: layers, attention,
pipeline), ``cycles`` (the same step's cycles without its report, for serving), ``costs``
(the one per-layer xPU/GPU cost table), ``report``
(the frozen :class:`~pimphony.sim.systems.report.DecodeReport`, text and plot), ``gpu`` (the
GPU-only step), ``hetero`` (the xPU+PIM step), ``librapim`` (LibraPIM's systems), ``tuned``
(weight GEMVs on DCC's AiM drafts), ``energy`` (the steps' energy) and ``command``
(``pimphony decode``).
"""
