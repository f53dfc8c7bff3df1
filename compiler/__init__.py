"""LLM work lowered into PIM command streams; imports only :mod:`pimphony.models`.

- ``llm`` model specs, the layer op vocabulary ``LayerOp``, GEMV shapes, the op graph.
- ``kernels`` the ``KERNELS`` registry: GEMV, QK^T, SV lowered to one channel.
- ``plan`` TP/PP, the ``PARTITIONS`` registry (HFP/TCP/ITPP/auto), GPR score tiling, the
  per-channel jobs of a layer; ``hub`` HUB codegen (repetition, multicast); ``dpa`` the DPA
  encoder.
- ``pim_gemv`` GEMV lowered to an HBM-PIM command stream (PIM-SHERPA Algorithm 1);
  ``rearrange`` host layout <-> PIM layout on the host bus (``REARRANGEMENTS``).
- ``dcc/`` DCC's data-centric compilation (``docs/dcc.md``): its schedule generator, the group
  lowerings of each back end, what a draft costs, the search and the predictor.
"""
