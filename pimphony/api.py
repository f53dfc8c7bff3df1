"""The public Python API: one channel run, one decode step, one serving run, as functions.

Each function takes names (a preset, a model, a scheduler) or the loaded objects, validates
them as the command line does (a :class:`~pimphony.models.errors.PimphonyError` names what is
wrong) and returns the same typed result the ``pimphony`` command prints from:

- :func:`run_kernel` -> :class:`~pimphony.models.channel.ScheduleResult` (``pimphony run``);
- :func:`decode` -> :class:`~pimphony.sim.systems.report.DecodeReport` (``pimphony decode``);
- :func:`serve` -> :class:`~pimphony.sim.serving.engine.ServeResult` (``pimphony serve``).

Nothing is written to disk. ``docs/api.md`` has a worked example.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the heavy modules load on first call, so ``import pimphony`` stays light
    from pimphony.compiler.llm import ModelSpec
    from pimphony.models.channel import ScheduleResult
    from pimphony.models.config import HardwareConfig
    from pimphony.sim.serving.engine import ServeResult
    from pimphony.sim.serving.trace import Request
    from pimphony.sim.systems.report import DecodeReport

__all__ = ["decode", "run_kernel", "serve"]

DECODE_MODEL = "llm-7b"
"""The model :func:`decode` and :func:`serve` use by default (as ``pimphony decode``)."""


def _preset(preset: str | Path | HardwareConfig) -> HardwareConfig:
    from pimphony.models.config import HardwareConfig, load_preset

    return preset if isinstance(preset, HardwareConfig) else load_preset(str(preset))


def _model(model: str | Path | ModelSpec) -> ModelSpec:
    from pimphony.compiler.llm import ModelSpec, load_model

    return model if isinstance(model, ModelSpec) else load_model(model)


def run_kernel(
    kernel: str,
    *,
    sched: str = "dcs",
    preset: str | Path | HardwareConfig = "aim-16ch",
    **shape: int | str,
) -> ScheduleResult:
    """One kernel compiled for one channel and run under one scheduler.

    Parameters
    ----------
    kernel : {"gemv", "qk", "sv"}
        The kernel (``pimphony.compiler.kernels.KERNELS``).
    sched : {"static", "pingpong", "dcs"}
        The channel scheduler (``pimphony.models.channel.SCHEDULERS``).
    preset : str, Path or HardwareConfig
        A hardware preset name, a ``.toml`` path or a loaded preset.
    **shape
        The kernel's shape: ``d_out``, ``d_in`` (and ``batch``) for ``gemv``; ``tokens``,
        ``d_h`` (and ``gqa_group``, ``mapping``) for ``qk`` and ``sv``.

    Returns
    -------
    ScheduleResult
        Cycles, command counts, MAC utilisation and the time breakdown (``to_dict()``).
    """
    from pimphony.compiler.kernels import compile_kernel
    from pimphony.models.channel import run_channel

    cfg = _preset(preset)
    program = compile_kernel(cfg, kernel, **shape)
    return run_channel(program.commands, cfg, sched, record=False)


def decode(
    *,
    model: str | Path | ModelSpec = DECODE_MODEL,
    context: int | Sequence[int] = 1024,
    batch: int = 1,
    preset: str | Path | HardwareConfig = "aim-32ch-32g",
    **options: Any,
) -> DecodeReport:
    """One LLM decode step on PIM modules, as ``pimphony decode`` simulates it.

    Parameters
    ----------
    model : str, Path or ModelSpec
        A shipped model name, a ``.toml`` or ``config.json`` path, or a loaded spec.
    context : int or sequence of int
        Every request's context length, or one length per request (then ``batch`` is their
        count).
    batch : int
        Requests when ``context`` is one int.
    preset : str, Path or HardwareConfig
        The module preset (default ``aim-32ch-32g``, as ``pimphony decode``).
    **options
        Any other field of :class:`~pimphony.sim.systems.setup.DecodeSetup`: ``tp``, ``pp``,
        ``partition`` (default ``"auto"``), ``sched``, ``memory``, ``micro_batches``,
        ``max_context``, ``check_capacity``, ``mapping``.

    Returns
    -------
    DecodeReport
        Cycles, tokens/s, per-op cycles and utilisation, capacity, energy; ``to_dict()`` is
        the JSON report of ``pimphony decode --json`` without its provenance.
    """
    from pimphony.sim.systems.setup import DecodeSetup
    from pimphony.sim.systems.step import run_decode

    lengths = (context,) * batch if isinstance(context, int) else tuple(context)
    options.setdefault("partition", "auto")
    setup = DecodeSetup(model=_model(model), hw=_preset(preset), lengths=lengths, **options)
    return run_decode(setup)


def serve(
    requests: str | Path | Sequence[Request],
    *,
    model: str | Path | ModelSpec = DECODE_MODEL,
    system: str = "pim",
    preset: str | Path | HardwareConfig | None = "aim-32ch-32g",
    **options: Any,
) -> ServeResult:
    """Serve requests over time (arrivals, continuous batching, prefill, preemption).

    Parameters
    ----------
    requests : str, Path or sequence of Request
        A trace file (JSONL or CSV, ``docs/serving.md``) or the requests themselves.
    model : str, Path or ModelSpec
        The model served.
    system : {"pim", "xpu+pim", "gpu"}
        The system that serves.
    preset : str, Path, HardwareConfig or None
        The PIM module preset (``pim``, ``xpu+pim``); ignored by ``gpu``.
    **options
        Any other field of :class:`~pimphony.sim.serving.engine.ServeConfig` (``tp``, ``pp``,
        ``partition``, ``sched``, ``memory``, ``xpu``, ``gpu``, ``gpus``, ``prefill``,
        ``max_batch``, ...); ``xpu`` and ``gpu`` may be preset names.

    Returns
    -------
    ServeResult
        Per-request admission, first-token and finish times and every step's events.
    """
    from pimphony.models.xpu_config import XpuConfig, load_xpu
    from pimphony.sim.serving.engine import ServeConfig
    from pimphony.sim.serving.engine import serve as run_serving
    from pimphony.sim.serving.trace import read_trace

    reqs = read_trace(requests) if isinstance(requests, str | Path) else list(requests)
    for key in ("xpu", "gpu"):
        if isinstance(options.get(key), str):
            options[key] = load_xpu(options[key])
        elif options.get(key) is not None and not isinstance(options[key], XpuConfig):
            raise TypeError(f"{key} must be an xPU preset name or an XpuConfig")
    hw = None if preset is None or system == "gpu" else _preset(preset)
    cfg = ServeConfig(system=system, model=_model(model), hw=hw, **options)
    return run_serving(cfg, reqs)
