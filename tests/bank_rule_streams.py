"""Seeded random command streams of the HBM-PIM and AttAcc models and a digest of their
timing, for tests/test_dram_rules.py's pinned cycles. Imports only what the models had
before the bank-rule engine, so the digests can be recomputed on an older checkout:
``PYTHONPATH=<checkout> python tests/bank_rule_streams.py``."""

from __future__ import annotations

import dataclasses
import hashlib
import zlib

import numpy as np
from pimphony.models import attacc, hbm_pim
from pimphony.models.backends import BackendConfig, PimTiming, load_backend

__all__ = ["CASES", "digest"]

#: (back end preset, timing variant: 0 the preset's, else a random timing's seed)
CASES = [
    (name, variant)
    for name in ("hbm-pim", "hbm-pim-hbm3", "lpddr5x-pim", "attacc")
    for variant in (0, 1, 2)
]
_TIMING = [f.name for f in dataclasses.fields(PimTiming) if f.name != "freq_ghz"]


def _backend(name: str, variant: int) -> BackendConfig:
    cfg = load_backend(name)
    if variant == 0:
        return cfg
    assert cfg.timing is not None
    rng = np.random.default_rng(variant)
    vals = {
        f: int(rng.integers(1, 61) if rng.random() < 0.6 else rng.integers(100, 301))
        for f in _TIMING
    }
    return dataclasses.replace(cfg, timing=dataclasses.replace(cfg.timing, **vals))


def _hbm_pim_mix(cfg: BackendConfig, rng: np.random.Generator) -> np.ndarray:
    """Any commands; mode entry / exit writes (complete or partial) often."""
    n, g = int(rng.integers(1, 400)), cfg.group
    per_bg = g.banks // g.bank_groups
    pairs = hbm_pim.AB_ENTRY_BANKS + hbm_pim.SB_ENTRY_BANKS
    mode_banks = sorted({bg * per_bg + b for bg, b in pairs})
    s = np.zeros(n, hbm_pim.COMMAND_DTYPE)
    s["op"] = rng.integers(0, len(hbm_pim.Op), n)
    anywhere = rng.integers(0, g.banks, n)
    s["bank"] = np.where(rng.random(n) < 0.5, rng.choice(mode_banks, n), anywhere)
    rows = [0, 1, hbm_pim.AB_ENTRY_ROW, hbm_pim.SB_ENTRY_ROW, g.register_row]
    s["row"] = rng.choice(rows, n)
    s["col"] = rng.choice([0, hbm_pim.MODE_COLUMN], n)
    return s


def _attacc_mix(cfg: BackendConfig, rng: np.random.Generator) -> np.ndarray:
    """Any commands in any order, banks of the group, softmax sizes and modes."""
    n = int(rng.integers(1, 400))
    s = np.zeros(n, attacc.COMMAND_DTYPE)
    s["op"] = rng.integers(0, len(attacc.Op), n)
    s["bank"] = rng.integers(0, cfg.group.banks, n)
    s["n"] = rng.integers(0, 601, n)
    s["mode"] = rng.integers(0, 2, n)
    return s


def digest(name: str, variant: int, streams: int = 40) -> str:
    """sha256 of the issue cycles, end cycle and counts of ``streams`` seeded random streams
    on back end ``name`` with timing ``variant``."""
    cfg = _backend(name, variant)
    model, mix = (attacc, _attacc_mix) if name == "attacc" else (hbm_pim, _hbm_pim_mix)
    rng = np.random.default_rng([variant, zlib.crc32(name.encode())])
    h = hashlib.sha256()
    for _ in range(streams):
        tl = model.time_stream(cfg, mix(cfg, rng))
        h.update(tl.issue.astype("<i8").tobytes())
        h.update(np.array([tl.cycles, *tl.counts.values()], "<i8").tobytes())
    return h.hexdigest()


if __name__ == "__main__":
    for case in CASES:
        print(f"    {case!r}: {digest(*case)!r},")
