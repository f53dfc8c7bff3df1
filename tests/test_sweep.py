"""The utilisation sweep reproduces the mechanism of PIMphony Fig. 8."""

from __future__ import annotations

import pytest
from pimphony.models.config import load_preset
from pimphony.sim.cli import main
from pimphony.sim.experiments.sweep import sweep, sweep_table


@pytest.fixture(scope="module")
def rows():
    return sweep(load_preset("aim-16ch"), "gemv", (64, 256, 1024))


def _util(rows, d, s):
    return next(r["mac_utilization"] for r in rows if r["dim"] == d and r["scheduler"] == s)


def test_static_utilisation_drops_at_small_dimensions(rows):
    static = [_util(rows, d, "static") for d in (64, 256, 1024)]
    assert static == sorted(static) and static[0] < 0.5 * static[-1]


def test_dcs_gains_most_at_small_dimensions(rows):
    gain = [_util(rows, d, "dcs") / _util(rows, d, "static") for d in (64, 256, 1024)]
    assert gain == sorted(gain, reverse=True) and gain[-1] >= 1.0


def test_every_point_has_its_channel_energy(rows):
    """Each (dimension, scheduler) run carries its channel energy (aim-cent, pJ): the parts
    sum to the total exactly, the schedulers share the dynamic parts (same commands, same
    rows) and DCS has the least background (fewest cycles)."""
    for d in (64, 256, 1024):
        runs = {r["scheduler"]: r["energy"] for r in rows if r["dim"] == d}
        for e in runs.values():
            assert e["total"] == sum(v for k, v in e.items() if k not in ("unit", "total"))
        for part in ("mac", "io", "activation"):
            assert len({e[part] for e in runs.values()}) == 1
        assert runs["dcs"]["background"] == min(e["background"] for e in runs.values())


def test_table_has_a_row_per_dimension(rows):
    text = sweep_table(rows)
    assert [line.split()[0] for line in text.splitlines()[2:]] == ["64", "256", "1024"]


def test_cli_sweep_writes_plot_and_refuses_bad_dims(tmp_path, capsys):
    plot = tmp_path / "s.png"
    assert main(["sweep", "--dims", "64,128", "--plot", str(plot)]) == 0
    assert plot.stat().st_size > 1000
    assert main(["sweep", "--dims", "64,abc", "--plot", str(plot)]) == 2
    assert "--dims" in capsys.readouterr().err
    with pytest.raises(SystemExit):  # was ignored for gemv (issue 34)
        main(["sweep", "--dims", "64", "--tokens", "-1"])
    assert "--tokens: -1 is outside 1 to 1,048,576" in capsys.readouterr().err


def test_existing_plot_needs_force(tmp_path, capsys):
    plot = tmp_path / "mine.png"
    plot.write_bytes(b"user data")
    assert main(["sweep", "--dims", "64", "--plot", str(plot)]) == 2
    assert "--force" in capsys.readouterr().err and plot.read_bytes() == b"user data"
    assert main(["sweep", "--dims", "64", "--plot", str(plot), "--force"]) == 0
    assert plot.read_bytes()[:4] == b"\x89PNG"
