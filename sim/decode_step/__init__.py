"""The LLM decode step on a multi-module PIM system, driven from the compiler's plan.

``setup`` (what a step depends on), ``kernels`` (channel kernels run through the TLM, memoised),
``admission`` (KV memory and batch filling), ``step`` (one step: layers, attention, pipeline),
``report`` (the frozen :class:`~sim.decode_step.report.DecodeReport`, text and plot) and
``command`` (``pimphony decode``).
"""
