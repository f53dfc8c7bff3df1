"""The PIM HUB: instruction format, instruction sequencer / multicast, and EPU costs.

PIMphony III-B (Table III): the HUB receives compiler-generated PIM *instructions*. Each
carries ``ch_mask`` (target channels), ``op_size`` (repetitions) and ``gpr_addr`` (GPR base
for data moved between GPR and PIM) besides the channel-command fields. The **instruction
sequencer** unrolls ``op_size`` repetitions, stepping the fields in :data:`STRIDES`; the
**multicast interconnect** delivers each unrolled command to every channel in ``ch_mask``.
Delivery is one multicast command per cycle (:func:`delivery_slots`).

The **EPU** (extra processing unit) finishes what the channels leave in the GPR: softmax over
QK^T scores, the cross-channel reduction of token-parallel SV partial outputs, norms and
activations. Its throughput is ``module.epu_flops_per_cycle`` (see ``docs/decode.md``).

Host and inter-node transfers use ``module.host_link_gbps`` and ``internode_link_gbps``.
"""

from __future__ import annotations

import math

import numpy as np
from pimphony.models.config import HardwareConfig
from pimphony.models.errors import PimphonyError
from pimphony.models.isa import COMMAND_DTYPE, FIELDS, OP_MAC, OP_RD_OUT, OP_WR_INP, field_widths

__all__ = [
    "HUB_DTYPE",
    "NORM_FLOPS_PER_ELEMENT",
    "OP_SIZE_BITS",
    "RELU_FLOPS_PER_ELEMENT",
    "RESIDUAL_FLOPS_PER_ELEMENT",
    "SOFTMAX_FLOPS_PER_SCORE",
    "STRIDES",
    "SWIGLU_FLOPS_PER_ELEMENT",
    "TILE_COMBINE_FLOPS_PER_ELEMENT",
    "HubError",
    "delivery_slots",
    "epu_cycles",
    "hub_instruction_bytes",
    "link_cycles",
    "sequence",
]

OP_SIZE_BITS = 16
"""Width of ``op_size``: one instruction unrolls into at most ``2**16 - 1`` commands."""

#: Per opcode, how each field steps from one unrolled command to the next.
STRIDES: dict[int, dict[str, int]] = {
    OP_WR_INP: {"gbuf": 1, "gpr": 1},
    OP_MAC: {"gbuf": 1, "col": 1},
    OP_RD_OUT: {"out": 1, "gpr": 1},
}

#: EPU operations per attention score: running max, subtract, exp, accumulate, normalise.
SOFTMAX_FLOPS_PER_SCORE = 5
#: Online-softmax combination per output element of every score tile after a pair's first
#: (GPR tiling, ``docs/decode.md``): rescale the running output and the tile's output to the
#: new maximum (two multiplies) and add them (one add).
TILE_COMBINE_FLOPS_PER_ELEMENT = 3
#: RMSNorm per element: square, accumulate, scale by 1/rms, multiply by the gain.
NORM_FLOPS_PER_ELEMENT = 4
#: SwiGLU per intermediate element: SiLU (~4: negate, exp, add, divide) and the gating multiply.
SWIGLU_FLOPS_PER_ELEMENT = 5
#: ReLU per intermediate element: one compare/select.
RELU_FLOPS_PER_ELEMENT = 1
#: Residual addition per hidden element.
RESIDUAL_FLOPS_PER_ELEMENT = 1

HUB_DTYPE = np.dtype([("ch_mask", "u8"), ("op_size", "u4"), *COMMAND_DTYPE.descr])
"""One HUB instruction: target channels, repetitions, then the first command's fields
(``gpr`` is the instruction's ``gpr_addr``, in 32 B tiles)."""


class HubError(PimphonyError, ValueError):
    """An instruction program is malformed for the module it targets."""


def hub_instruction_bytes(cfg: HardwareConfig) -> int:
    """Bytes of one encoded HUB instruction: ch_mask + op_size + the command fields."""
    w = field_widths(cfg.channel, cfg.module.gpr_bytes)
    bits = cfg.module.channels + OP_SIZE_BITS + sum(w[f] for f in FIELDS)
    return math.ceil(bits / 8)


def sequence(program: np.ndarray, channels: int) -> list[np.ndarray]:
    """Unroll and multicast a HUB program: the command stream each channel receives."""
    if program.dtype != HUB_DTYPE:
        raise HubError(f"a HUB program must have dtype {HUB_DTYPE}, got {program.dtype}")
    if program.size and int(program["ch_mask"].max()) >> channels:
        k = int(np.flatnonzero(program["ch_mask"] >> np.uint64(channels))[0])
        raise HubError(
            f"instruction {k}: ch_mask {int(program['ch_mask'][k]):#x} names a channel >= "
            f"{channels}"
        )
    if program.size and int(program["op_size"].min()) < 1:
        k = int(np.flatnonzero(program["op_size"] < 1)[0])
        raise HubError(f"instruction {k}: op_size must be >= 1")
    sizes = program["op_size"].astype(np.int64)
    total = int(sizes.sum())
    unrolled = np.zeros(total, dtype=COMMAND_DTYPE)
    owner = np.repeat(np.arange(program.size), sizes)
    step = np.arange(total, dtype=np.int64) - np.repeat(np.cumsum(sizes) - sizes, sizes)
    for f in FIELDS:
        base = program[f][owner].astype(np.int64)
        stride = np.zeros(total, dtype=np.int64)
        for op, fields in STRIDES.items():
            if f in fields:
                stride[program["op"][owner] == op] = fields[f]
        unrolled[f] = base + stride * step
    masks = program["ch_mask"][owner]
    return [unrolled[(masks >> np.uint64(c)) & np.uint64(1) == 1] for c in range(channels)]


def delivery_slots(program: np.ndarray) -> int:
    """Cycles the sequencer needs to deliver ``program`` (one multicast command per cycle)."""
    return int(program["op_size"].astype(np.int64).sum())


def epu_cycles(cfg: HardwareConfig, flops: int | float) -> int:
    """Cycles the EPU takes for ``flops`` operations (``module.epu_flops_per_cycle``)."""
    return math.ceil(flops / cfg.module.epu_flops_per_cycle) if flops > 0 else 0


def link_cycles(cfg: HardwareConfig, nbytes: int | float, link: str = "host") -> int:
    """Module-clock cycles to move ``nbytes`` over the ``host`` or ``internode`` link."""
    if link not in ("host", "internode"):
        raise ValueError(f"link {link!r} is unknown; allowed: host, internode")
    gbps = cfg.module.host_link_gbps if link == "host" else cfg.module.internode_link_gbps
    return math.ceil(nbytes * cfg.module.freq_ghz / gbps) if nbytes > 0 else 0
