"""Systems: what runs an LLM decode step, on PIM, an xPU beside PIM or GPUs.

``base`` (the ``System`` interface: ``step``, ``cycles``, ``pool``, ``prefill``; the typed
``StepResult``), ``registry`` (``SystemKind`` and the ``SYSTEMS`` table: each row's class,
its command-line options and report; ``pimphony decode`` and ``serve`` run any row),
``costs`` (the one per-layer xPU/GPU cost table and the xPU prefill), ``search`` (the one
split search over TP x PP), ``techniques`` (the ablation's technique steps), ``setup`` (what
a PIM step depends on), ``kernels`` (channel kernels run through the TLM, memoised),
``admission`` (KV memory and batch filling), ``cycles`` (the one cycle path of a PIM step,
``StepCycles``), ``step`` (``run_decode``: the cycle path plus the report's breakdowns),
``report`` (the frozen :class:`~pimphony.sim.systems.report.DecodeReport`, text and plot),
``gpu`` (the GPU-only step), ``hetero`` (the xPU+PIM step), ``attacc_gpu`` (DCC Fig. 8's
GPU with AttAcc PIM: the step per phase and the four ``attacc-*`` rows), ``librapim``
(LibraPIM's systems and analysis rows), ``librapim_system`` (those systems as rows of
``SYSTEMS``), ``tuned`` (weight GEMVs on DCC's AiM drafts), ``energy`` (the steps' energy) and
``command`` (``pimphony decode``: one runner for every ``SystemKind``).
"""
