"""What a back end's DCC group lowering returns (issue 17, ``docs/dcc.md``).

Each back end has a ``GROUP_LOWERINGS`` table keyed by
:class:`compiler.dcc.schedule.DccKernel`: ``GROUP_LOWERINGS[kernel](cfg, sizes, cores)`` lowers
one PIM group's share of a kernel (``sizes``: the group's extent per dimension set, ``cores``:
cores per dimension set) to a :class:`GroupProgram`. The lowering of a kernel in
:data:`compiler.dcc.cost.GROUP_COMBINED` (AttAcc's ``attn``) also takes ``partial=True``: the
group holds a share of a set split over groups whose partial results the host combines (the
split softmax), and the program leaves what the combine needs.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["Extents", "GroupProgram", "Tensors"]

#: Per dimension set, a group's extent (``sizes``) or its cores (``cores``).
Extents = tuple[int, ...]
#: Tensor name -> values (FP16): a share's inputs to ``run_group`` and its outputs.
Tensors = dict[str, np.ndarray]


@dataclass(frozen=True)
class GroupProgram:
    """One PIM group's command stream for its share of a kernel, and where its data lives."""

    stream: np.ndarray  # the back end's command array for ONE group
    cycles: int  # the back end's time_stream(cfg, stream) end-to-end cycles
    counts: dict[str, int]  # commands per opcode
    inputs: dict[str, np.ndarray]  # tensor name -> (n, 3) int64 (bank, row, column) of every
    #   column vector of that input the group's banks must hold
    #   (weights, and inputs that go through banks); empty
    #   for inputs written into registers/buffers by the stream
    outputs: dict[str, np.ndarray]  # tensor name -> (n, 3) (bank, row, column) the host reads back
    host_ops: int  # elementwise adds the host does afterwards (lane sums,
    #   partial sums of a split reduction), 0 if none
