"""LibraPIM's Dynamic Batch Offloading (DBO, seed 002, section 4.5, Algorithm 1).

At the start of every generation step the host predicts, from FLOPs and device throughput, the
time of one decoder layer of a batch group of ``B`` requests on each device of a pipelined
xPU+PIM system, and moves work from the slower device to the faster one:

``t_QKV = K_QKV d_model^2 B / F_xPU``, ``t_Proj = K_Proj d_model^2 B / F_xPU``,
``t_FFN = K_FFN d_model d_ff B / F_xPU`` (lines 5-7) and ``t_MHA = K_MHA d_model B L / F_PIM``
(line 8), ``L`` the longest sequence (input + generated tokens) of the group. Then:

* **small batch** (``B < Channel_PIM``, line 10): the whole group's FFN goes to PIM
  (``Batch_group_offload(B)``; 6.2: "offloads the entire group's FFN operations to PIM").
* **longer FFN** (xPU time > PIM time, line 14): ``m`` requests' FFN move to PIM, ``m``
  solving equation (1) ``t_QKV + t_Proj + t_FFN,xPU(B - m) = t_MHA,PIM(B) + t_FFN,PIM(m)``.
* **longer MHA** (xPU time < PIM time, line 21): ``n`` requests' attention (their K/V) move
  to the xPU, ``n`` solving equation (2)
  ``t_QKV + t_Proj + t_FFN + t_MHA,xPU(n) = t_MHA,PIM(B - n)``, the xPU's attention at its
  GEMV throughput ``F_xPU,GEMV`` (line 22).
* **balanced** (equal times): nothing moves.

Both equations are linear in ``m`` (``n``), so :func:`dynamic_batch_offload` solves them in
closed form (``m_exact``, ``n_exact``) and then picks the integer neighbour in ``[0, B]`` whose
predicted layer time ``max(xPU, PIM)`` is smaller (ties: the smaller count). Choices where the
paper is silent or inconsistent (``docs/librapim.md``, "DBO"):

* The ``K`` constants count FLOPs: ``K_QKV d_model^2`` is the QKV GEMM's FLOPs per request
  (2 per multiply-accumulate), so for multi-head attention ``K_QKV = 6``, ``K_Proj = 2``,
  ``K_FFN = 2 x (FFN matrices)`` (4 for GPT-3's GELU FFN: ``4 d_model d_ff = 16 d_model^2``,
  the paper's "K = 16 in GPT3's FFN" in ``d_model^2`` units) and ``K_MHA = 4`` (QK^T and SV,
  2 FLOPs per multiply-accumulate each).
* Line 16 of Algorithm 1 divides the offloaded FFN by ``FLOPS_xPU``; the text says the right
  side of equation (1) "accounts for the PIM", so we divide by ``F_PIM``.
* The longer-FFN offload ``m`` is capped at ``Channel_PIM`` (6.2: "up to 64 batches -- the
  number of available PIM channels -- can be offloaded in parallel"); ``m_capped`` says so.

Algorithm 1 prices the offloaded FFN per request; what one pass of the hardware serves is a
reading of the paper, :class:`OffloadReading` (``docs/librapim.md``, "Offload readings").
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum

from pimphony.models.errors import PimphonyError

__all__ = [
    "DboCase",
    "DboDecision",
    "DboError",
    "DboModel",
    "DboThroughput",
    "OffloadReading",
    "dynamic_batch_offload",
    "solve_ffn_offload",
    "solve_mha_offload",
]


class DboError(PimphonyError, ValueError):
    """A DBO input is out of range (the message names the field, its value and what is allowed)."""


class DboCase(StrEnum):
    """The branch of Algorithm 1 a step takes."""

    SMALL_BATCH = "small-batch"  # line 10: B < Channel_PIM, the group's FFN to PIM
    LONGER_FFN = "longer-ffn"  # line 14: xPU slower, m requests' FFN to PIM (eq. 1)
    LONGER_MHA = "longer-mha"  # line 21: PIM slower, n requests' attention to the xPU (eq. 2)
    BALANCED = "balanced"  # line 27: equal, nothing moves


class OffloadReading(StrEnum):
    """Where the offloaded requests' FFN runs on PIM: the unit one request occupies.

    ``PER_BANK``: one request per bank, the weight rows the Global Buffer's broadcast operand
    (4.4, Fig. 14), so a pass serves ``banks`` requests. ``PER_CHANNEL``: one request per
    channel, each channel running its request's whole FFN alone (6.2: "up to 64 batches --
    the number of available PIM channels -- can be offloaded in parallel"; 4.5: channels
    "each of which can independently process a batch"), so a pass serves ``channels``.
    """

    PER_BANK = "per-bank"
    PER_CHANNEL = "per-channel"


def _positive_int(name: str, value: object, allowed: str = "an integer >= 1") -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise DboError(f"{name} = {value!r}: must be {allowed}")
    return value


def _positive_float(name: str, value: object, unit: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise DboError(f"{name} = {value!r}: must be a number ({unit}) > 0")
    if not math.isfinite(value) or value <= 0:
        raise DboError(f"{name} = {value!r}: must be a finite number ({unit}) > 0")
    return float(value)


@dataclass(frozen=True)
class DboModel:
    """The model parameters of Algorithm 1 (one decoder layer); validated on construction.

    Parameters
    ----------
    d_model, d_ff : int
        Model width and FFN width.
    k_qkv, k_proj, k_ffn, k_mha : float
        FLOPs per request of QKV (``/ d_model^2``), projection (``/ d_model^2``), FFN
        (``/ (d_model d_ff)``) and attention (``/ (d_model L)``); see the module docstring.
    context_window : int
        Longest sequence the model accepts; ``seq_len`` beyond it is refused.
    """

    d_model: int
    d_ff: int
    k_qkv: float
    k_proj: float
    k_ffn: float
    k_mha: float
    context_window: int

    def __post_init__(self) -> None:
        _positive_int("d_model", self.d_model)
        _positive_int("d_ff", self.d_ff)
        for name in ("k_qkv", "k_proj", "k_ffn", "k_mha"):
            _positive_float(name, getattr(self, name), "FLOPs per request unit")
        _positive_int("context_window", self.context_window, "an integer >= 1 (tokens)")


@dataclass(frozen=True)
class DboThroughput:
    """Device throughputs DBO predicts with; validated on construction.

    Parameters
    ----------
    xpu_flops : float
        ``FLOPS_xPU``: the xPU's GEMM throughput (FLOP/s).
    xpu_gemv_flops : float
        ``FLOPS_xPU_GEMV``: the xPU's throughput on attention GEMVs (FLOP/s), memory bound.
    pim_flops : float
        ``FLOPS_PIM``: the PIM's throughput (FLOP/s), all channels.
    pim_channels : int
        ``Channel_PIM``: PIM channels (the small-batch threshold and the FFN offload cap).
    pim_ffn_flops : float or None
        PIM's throughput on an offloaded FFN (FLOP/s) when it differs from its attention
        throughput (attainable rates measured on the channel model); ``None``: ``pim_flops``,
        Algorithm 1's single ``FLOPS_PIM``.
    """

    xpu_flops: float
    xpu_gemv_flops: float
    pim_flops: float
    pim_channels: int
    pim_ffn_flops: float | None = None

    def __post_init__(self) -> None:
        for name in ("xpu_flops", "xpu_gemv_flops", "pim_flops"):
            _positive_float(name, getattr(self, name), "FLOP/s")
        _positive_int("pim_channels", self.pim_channels)
        if self.pim_ffn_flops is not None:
            _positive_float("pim_ffn_flops", self.pim_ffn_flops, "FLOP/s")

    @property
    def ffn_pim_flops(self) -> float:
        """PIM's throughput on an offloaded FFN (FLOP/s): ``pim_ffn_flops`` or ``pim_flops``."""
        return self.pim_flops if self.pim_ffn_flops is None else self.pim_ffn_flops


@dataclass(frozen=True)
class DboDecision:
    """What Algorithm 1 chose for one step, and the times it predicted (seconds per layer).

    ``m`` requests' FFN run on PIM, ``n`` requests' attention run on the xPU; ``m_exact`` /
    ``n_exact`` are the real solutions of equations (1) / (2) (``nan`` when the branch does not
    solve one). ``before`` holds lines 5-8's times; ``xpu_seconds`` / ``pim_seconds`` the two
    devices' predicted busy time per layer after offloading.
    """

    case: DboCase
    batch: int
    seq_len: int
    m: int
    n: int
    m_exact: float
    n_exact: float
    m_capped: bool
    before: dict[str, float] = field(default_factory=dict)
    xpu_seconds: float = 0.0
    pim_seconds: float = 0.0

    @property
    def pipelined_seconds(self) -> float:
        """Predicted layer time with xPU and PIM overlapped (batch pipelining): the slower one."""
        return max(self.xpu_seconds, self.pim_seconds)

    @property
    def serial_seconds(self) -> float:
        """Predicted layer time with the two devices in series (no overlap)."""
        return self.xpu_seconds + self.pim_seconds


def _times(model: DboModel, hw: DboThroughput, batch: int, seq_len: int) -> dict[str, float]:
    """Lines 5-8 of Algorithm 1: per-layer times of the whole group, no offloading."""
    d, x = model.d_model, hw.xpu_flops
    return {
        "t_qkv_xpu": model.k_qkv * d * d * batch / x,
        "t_proj_xpu": model.k_proj * d * d * batch / x,
        "t_ffn_xpu": model.k_ffn * d * model.d_ff * batch / x,
        "t_mha_pim": model.k_mha * d * batch * seq_len / hw.pim_flops,
    }


def solve_ffn_offload(
    model: DboModel, hw: DboThroughput, batch: int, seq_len: int
) -> tuple[float, float, float]:
    """Equation (1) solved for a real ``m``, and the two sides' slopes.

    With ``a = t_QKV + t_Proj``, ``f = K_FFN d_model d_ff`` (FLOPs of one request's FFN):
    ``a + f (B - m) / F_xPU = t_MHA,PIM + f m / F_PIM`` gives
    ``m = (a + f B / F_xPU - t_MHA,PIM) / (f / F_xPU + f / F_PIM)``; ``F_PIM`` here is
    ``hw.ffn_pim_flops`` (equal to the attention's unless a measured FFN rate is given).

    Returns
    -------
    (m, xpu_slope, pim_slope)
        ``m`` and the seconds one offloaded request takes off the xPU and adds to PIM.
    """
    t = _times(model, hw, batch, seq_len)
    f = model.k_ffn * model.d_model * model.d_ff
    xs, ps = f / hw.xpu_flops, f / hw.ffn_pim_flops
    lhs0 = t["t_qkv_xpu"] + t["t_proj_xpu"] + t["t_ffn_xpu"]
    return (lhs0 - t["t_mha_pim"]) / (xs + ps), xs, ps


def solve_mha_offload(
    model: DboModel, hw: DboThroughput, batch: int, seq_len: int
) -> tuple[float, float, float]:
    """Equation (2) solved for a real ``n``, and the two sides' slopes.

    With ``T = t_QKV + t_Proj + t_FFN`` and ``h = K_MHA d_model L`` (FLOPs of one request's
    attention): ``T + h n / F_xPU,GEMV = h (B - n) / F_PIM`` gives
    ``n = (h B / F_PIM - T) / (h / F_xPU,GEMV + h / F_PIM)``.

    Returns
    -------
    (n, xpu_slope, pim_slope)
        ``n`` and the seconds one moved request adds to the xPU and takes off PIM.
    """
    t = _times(model, hw, batch, seq_len)
    h = model.k_mha * model.d_model * seq_len
    xs, ps = h / hw.xpu_gemv_flops, h / hw.pim_flops
    lhs0 = t["t_qkv_xpu"] + t["t_proj_xpu"] + t["t_ffn_xpu"]
    return (t["t_mha_pim"] - lhs0) / (xs + ps), xs, ps


def _best_integer(exact: float, hi: int, cost: Callable[[int], float]) -> int:
    """The integer next to ``exact`` in ``[0, hi]`` of the smaller ``cost`` (ties: smaller)."""
    lo_i = min(max(math.floor(exact), 0), hi)
    hi_i = min(max(math.ceil(exact), 0), hi)
    return min({lo_i, hi_i}, key=lambda k: (cost(k), k))


def dynamic_batch_offload(
    model: DboModel, hw: DboThroughput, batch: int, seq_len: int
) -> DboDecision:
    """Algorithm 1 for one batch group of ``batch`` requests whose longest sequence is
    ``seq_len`` tokens (module docstring).

    Raises
    ------
    DboError
        ``batch`` < 1, ``seq_len`` < 1 or beyond ``model.context_window`` (the message names
        the field, its value and what is allowed).
    """
    _positive_int("batch", batch, "an integer >= 1 (requests in the batch group)")
    _positive_int("seq_len", seq_len, "an integer >= 1 (tokens: input + generated)")
    if seq_len > model.context_window:
        raise DboError(
            f"seq_len = {seq_len}: beyond the model's context window; allowed: 1 to "
            f"{model.context_window} tokens"
        )
    t = _times(model, hw, batch, seq_len)
    xpu0 = t["t_qkv_xpu"] + t["t_proj_xpu"] + t["t_ffn_xpu"]
    pim0 = t["t_mha_pim"]
    nan = math.nan
    common = {"batch": batch, "seq_len": seq_len, "before": t}
    if batch < hw.pim_channels:
        f = t["t_ffn_xpu"] * hw.xpu_flops / hw.ffn_pim_flops  # the group's FFN on PIM
        return DboDecision(
            DboCase.SMALL_BATCH,
            m=batch,
            n=0,
            m_exact=nan,
            n_exact=nan,
            m_capped=False,
            xpu_seconds=xpu0 - t["t_ffn_xpu"],
            pim_seconds=pim0 + f,
            **common,
        )
    if xpu0 > pim0:
        m_exact, xs, ps = solve_ffn_offload(model, hw, batch, seq_len)
        cap = min(batch, hw.pim_channels)
        m = _best_integer(m_exact, cap, lambda k: max(xpu0 - xs * k, pim0 + ps * k))
        return DboDecision(
            DboCase.LONGER_FFN,
            m=m,
            n=0,
            m_exact=m_exact,
            n_exact=nan,
            m_capped=m_exact > cap,
            xpu_seconds=xpu0 - xs * m,
            pim_seconds=pim0 + ps * m,
            **common,
        )
    if xpu0 < pim0:
        n_exact, xs, ps = solve_mha_offload(model, hw, batch, seq_len)
        n = _best_integer(n_exact, batch, lambda k: max(xpu0 + xs * k, pim0 - ps * k))
        return DboDecision(
            DboCase.LONGER_MHA,
            m=0,
            n=n,
            m_exact=nan,
            n_exact=n_exact,
            m_capped=False,
            xpu_seconds=xpu0 + xs * n,
            pim_seconds=pim0 - ps * n,
            **common,
        )
    return DboDecision(
        DboCase.BALANCED,
        m=0,
        n=0,
        m_exact=nan,
        n_exact=nan,
        m_capped=False,
        xpu_seconds=xpu0,
        pim_seconds=pim0,
        **common,
    )
