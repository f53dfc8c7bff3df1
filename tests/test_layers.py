"""The layers import one way (``docs/architecture.md``), and light commands stay light.

- ``models/`` imports nothing of ours; ``compiler/`` and ``rtl/`` import only ``models/`` (and
  themselves); ``sim/`` is the only package that sees all three.
- ``pimphony`` commands that do not need RTL, co-simulation or plots do not import Amaranth,
  cocotb, vcdvcd or matplotlib at start-up.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
OURS = ("models", "compiler", "rtl", "sim")
"""The layers, imported as ``pimphony.<layer>`` (a bare ``import models`` is always wrong)."""
ALLOWED = {
    "models": {"models"},
    "compiler": {"models", "compiler"},
    "rtl": {"models", "rtl"},
    "sim": {"models", "compiler", "rtl", "sim"},
}
HEAVY = ("amaranth", "cocotb", "vcdvcd", "matplotlib", "pimphony.rtl.blocks")


def imported_packages(path: Path) -> list[tuple[int, str]]:
    """(line, layer of ours) for every import in ``path``, at any depth.

    ``pimphony.sim.cli`` is layer ``sim``; a bare ``sim.cli`` (the old top-level names, which
    the installed package does not have) is reported as ``"bare sim"``.
    """
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        else:
            continue
        for name in names:
            parts = name.split(".")
            if parts[0] == "pimphony" and len(parts) > 1 and parts[1] in OURS:
                found.append((node.lineno, parts[1]))
            elif parts[0] in OURS:
                found.append((node.lineno, f"bare {parts[0]}"))
    return found


@pytest.mark.parametrize("layer", sorted(ALLOWED))
def test_imports_run_one_way(layer):
    wrong = [
        f"{path.relative_to(ROOT)}:{line} imports {pkg}"
        for path in sorted((ROOT / layer).rglob("*.py"))
        for line, pkg in imported_packages(path)
        if pkg not in ALLOWED[layer]
    ]
    assert not wrong, f"{layer}/ may import only {sorted(ALLOWED[layer])}:\n" + "\n".join(wrong)


def test_the_checker_sees_a_wrong_import(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text(
        "def f():\n    from pimphony.compiler.kernels import compile_kernel\nimport models.isa\n"
    )
    assert sorted(imported_packages(bad)) == [(2, "compiler"), (3, "bare models")]


def test_tests_import_only_the_pimphony_names():
    wrong = [
        f"{path.relative_to(ROOT)}:{line} imports {pkg}"
        for path in sorted((ROOT / "tests").rglob("*.py"))
        for line, pkg in imported_packages(path)
        if pkg.startswith("bare ")
    ]
    assert not wrong, "import pimphony.<layer>, not the bare folder name:\n" + "\n".join(wrong)


@pytest.mark.parametrize(
    "argv,needs",
    [
        (["--help"], set()),
        (["presets"], set()),
        (["xpus"], set()),
        (["run", "--kernel", "gemv", "--dout", "64", "--din", "64", "--json"], set()),
        (["decode", "--context", "1024", "--json"], {"matplotlib"}),  # it writes a PNG
        (["wave", "summary", "--help"], set()),
    ],
    ids=["help", "presets", "xpus", "run", "decode", "wave-summary"],
)
def test_light_commands_do_not_import_heavy_packages(argv, needs, tmp_path):
    code = (
        "import sys\nfrom pimphony.sim.cli import main\ntry:\n    main(sys.argv[1:])\n"
        "except SystemExit:\n    pass\n"
        "print(sorted({m.split('.')[0] for m in sys.modules}"
        " | {m for m in sys.modules if m.startswith('pimphony.rtl.')}))"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code, *argv],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=False,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", "MPLBACKEND": "Agg"},
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    loaded = set(ast.literal_eval(proc.stdout.strip().splitlines()[-1]))
    assert loaded & set(HEAVY) <= needs, f"pimphony {' '.join(argv)} imported {loaded & set(HEAVY)}"
