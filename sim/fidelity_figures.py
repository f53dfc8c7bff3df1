"""``pimphony fidelity --figures``: one small plot per row of ``docs/fidelity.md``, the
paper's numbers beside ours.

A row's plot draws its :class:`~sim.fidelity.Gap` list, the numbers its verdict is sized by:
per compared quantity a bar for the paper (the value its text states) and one for pimphony,
one panel per unit (speed-ups, percentages, other values). A row whose paper gives no number
(``derived`` rows, trend-only claims) has no plot; :func:`figure_path` says where a row's plot
goes, and the table links it.
"""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from pimphony.models.fileio import pyplot, write_figure

if TYPE_CHECKING:
    from pimphony.sim.fidelity import Claim, Measured

__all__ = ["FIGURE_DIR", "figure_path", "plot_claim", "write_figures"]

#: Where ``pimphony fidelity --write`` puts the plots (beside ``docs/fidelity.md``).
FIGURE_DIR = Path("docs") / "img" / "fidelity"

#: Axis label of each :class:`~sim.fidelity.Unit`.
_AXIS = {
    "times": "speed-up or ratio (x)",
    "percent": "percent (%)",
    "value": "value (the row's unit)",
}


def figure_path(key: str, directory: Path = FIGURE_DIR) -> Path:
    """The plot of row ``key`` in ``directory``."""
    return directory / f"{key}.png"


def plot_claim(claim: Claim, measured: Measured, path: Path, overwrite: bool = True) -> Path | None:
    """Bars of the paper's numbers beside ours for each gap of ``measured`` (one panel per
    unit), written to ``path``; None, and nothing written, when the row has no gap."""
    if not measured.gaps:
        return None
    plt = pyplot()
    units = list(dict.fromkeys(g.unit for g in measured.gaps))
    fig, axes = plt.subplots(len(units), 1, figsize=(7.5, 1.2 + 2.4 * len(units)), squeeze=False)
    for ax, unit in zip(axes[:, 0], units, strict=True):
        gaps = [g for g in measured.gaps if g.unit == unit]
        xs = range(len(gaps))
        ax.bar([x - 0.2 for x in xs], [g.paper for g in gaps], 0.4, color="#9e9e9e",
               label="paper (its text)")  # fmt: skip
        ax.bar([x + 0.2 for x in xs], [g.ours for g in gaps], 0.4, color="#1f77b4",
               label="pimphony")  # fmt: skip
        if str(unit) == "times":
            ax.axhline(1.0, color="black", lw=0.8)
        ax.set_xticks(list(xs), [textwrap.fill(g.label or claim.key, 24) for g in gaps], fontsize=7)
        ax.set_ylabel(_AXIS[str(unit)], fontsize=8)
        ax.set_xlabel("compared quantity", fontsize=8)
        ax.legend(fontsize=7)
    fig.suptitle(
        textwrap.fill(f"{claim.key} ({claim.paper} {claim.where}): {measured.verdict}", 90),
        fontsize=9,
    )
    fig.tight_layout()
    return write_figure(fig, path, overwrite=overwrite)


def write_figures(
    results: Sequence[tuple[Claim, Measured]],
    directory: Path = FIGURE_DIR,
    overwrite: bool = False,
) -> list[Path]:
    """:func:`plot_claim` for every row that has numbers to plot; the files written. An
    existing plot is replaced only with ``overwrite``."""
    written = []
    for claim, measured in results:
        path = plot_claim(claim, measured, figure_path(claim.key, directory), overwrite)
        if path is not None:
            written.append(path)
    return written
