"""PIMphony's techniques as cumulative steps: each names the partition, scheduler and memory
policy of a decode step, from the CENT baseline (HFP, static scheduling, static memory) to
PIMphony (per-layer TCP/HFP, DCS, DPA)."""

from __future__ import annotations

__all__ = ["CENT", "PIMPHONY", "STEPS"]

#: (label, partition, scheduler, memory) of each cumulative step. From +DCS on the partition
#: is PIMphony's ``auto`` (per layer the faster of TCP and HFP).
STEPS = (
    ("HFP (baseline)", "hfp", "static", "static"),
    ("+TCP", "tcp", "static", "static"),
    ("+DCS", "auto", "dcs", "static"),
    ("+DPA", "auto", "dcs", "lazy"),
)
#: (partition, scheduler, memory) of the CENT baseline (the first step) and of PIMphony (the
#: last).
CENT, PIMPHONY = STEPS[0][1:], STEPS[-1][1:]
