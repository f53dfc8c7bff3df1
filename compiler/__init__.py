"""LLM work lowered into PIM command streams; imports only :mod:`pimphony.models`.

- ``llm`` model specs, the layer op vocabulary ``LayerOp``, GEMV shapes, the op graph.
- ``kernels`` the ``KERNELS`` registry: GEMV, QK^T, SV lowered to one channel.
- ``plan`` TP/PP, the ``PARTITIONS`` registry (HFP/TCP/ITPP/auto), GPR score tiling, the
  per-channel jobs of a layer; ``hub`` HUB codegen (repetition, multicast); ``dpa`` the DPA
  encoder.
- ``pim_gemv`` GEMV lowered to an HBM-PIM command stream (PIM-SHERPA Algorithm 1);
  ``rearrange`` host layout <-> PIM layout on the host bus (``REARRANGEMENTS``).
- DCC (``docs/dcc.md``): ``dcc_schedule`` the data-centric schedule generator (loop nests,
  drafts, pruning, core tiles); ``dcc_lowering`` ``GroupProgram``; the group lowerings
  ``hbm_pim_lowering``, ``aim_lowering``, ``attacc_lowering`` (``GROUP_LOWERINGS``,
  ``run_group``, each back end's default mapping); ``dcc_cost`` what a draft costs;
  ``dcc_tune`` the search over drafts; ``dcc_predictor`` the coupled XGBoost predictor and
  the best-draft ``LookupTable``.
"""
