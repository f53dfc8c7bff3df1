"""``pimphony fidelity --figures`` (sim/fidelity_figures): a plot per row with numbers, the
table's links to them, and refusals before any measuring."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from pimphony.sim.cli import main
from pimphony.sim.fidelity import CLAIMS, Claim, Gap, Measured, Unit, Verdict, format_fidelity
from pimphony.sim.fidelity_figures import figure_path, plot_claim, write_figures

ROW = Claim("X-fig1", "Paper", "Fig. 1", "2x and 40%", "w", "pimphony run", lambda: None)
SIZED = Measured(
    "1.5x, 35%",
    Verdict.CLOSE,
    "m",
    gaps=(Gap("speed-up", 1.5, 2.0), Gap("share", 35.0, 40.0, Unit.PERCENT)),
)
UNSIZED = Measured("trend holds", Verdict.DIRECTION_ONLY, "m")


def test_a_row_with_gaps_gets_one_panel_per_unit(tmp_path):
    path = plot_claim(ROW, SIZED, tmp_path / "X-fig1.png")
    assert path == tmp_path / "X-fig1.png" and path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    from PIL import Image

    width, height = Image.open(path).size  # two panels: taller than one
    one = plot_claim(ROW, Measured("1.5x", Verdict.CLOSE, "m", gaps=SIZED.gaps[:1]),
                     tmp_path / "one.png")  # fmt: skip
    assert height > Image.open(one).size[1] and width == Image.open(one).size[0]


def test_a_row_without_numbers_has_no_plot_and_no_link(tmp_path):
    assert plot_claim(ROW, UNSIZED, tmp_path / "X.png") is None
    assert not (tmp_path / "X.png").exists()
    assert write_figures([(ROW, UNSIZED), (ROW, SIZED)], tmp_path) == [tmp_path / "X-fig1.png"]
    assert "[plot]" not in format_fidelity([(ROW, UNSIZED)])
    table = format_fidelity([(ROW, SIZED)], Path("docs/fidelity.md"), Path("docs/img/fidelity"))
    assert "| 1.5x, 35% ([plot](img/fidelity/X-fig1.png)) |" in table


def test_existing_plots_are_kept_without_force(tmp_path):
    write_figures([(ROW, SIZED)], tmp_path)
    before = figure_path("X-fig1", tmp_path).read_bytes()
    with pytest.raises(FileExistsError):
        write_figures([(ROW, SIZED)], tmp_path)
    assert figure_path("X-fig1", tmp_path).read_bytes() == before
    assert write_figures([(ROW, SIZED)], tmp_path, overwrite=True)


def test_cli_refuses_before_measuring(tmp_path, capsys):
    """An existing plot of a real row, or a file given as the folder: refused at once (no
    row is measured: the test takes no time)."""
    (tmp_path / f"{CLAIMS[0].key}.png").write_bytes(b"mine")
    assert main(["fidelity", "--figures", str(tmp_path)]) != 0
    err = capsys.readouterr().err
    assert f"{CLAIMS[0].key}.png exists" in err and "--force" in err
    assert (tmp_path / f"{CLAIMS[0].key}.png").read_bytes() == b"mine"
    file = tmp_path / "f"
    file.write_text("x")
    assert main(["fidelity", "--figures", str(file)]) != 0
    assert "is a file; give a folder" in capsys.readouterr().err


def test_every_plot_the_table_links_exists():
    root = Path(__file__).resolve().parent.parent
    doc = (root / "docs" / "fidelity.md").read_text()
    links = re.findall(r"\[plot\]\((img/fidelity/[^)]+\.png)\)", doc)
    assert links, "docs/fidelity.md links no plot"
    assert [p for p in links if not (root / "docs" / p).is_file()] == []
