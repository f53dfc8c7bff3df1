"""The layers import one way (``docs/architecture.md``), and light commands stay light.

- ``models/`` imports nothing of ours; ``compiler/`` and ``rtl/`` import only ``models/`` (and
  themselves); ``sim/`` is the only package that sees all three.
- Inside ``sim/``: ``sim/systems/`` imports no experiment, serving, verify or EDA code (nor the
  fidelity check over the experiments); an experiment (a module or package directly under
  ``sim/experiments/``) imports no other experiment.
- The one entry point is ``sim/cli.py``: no other module has an ``if __name__ == "__main__"``
  block (a side entry point is a row of ``sim.cli.COMMANDS``).
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


SYSTEMS_MAY_NOT = (
    "pimphony.sim.experiments",
    "pimphony.sim.serving",
    "pimphony.sim.verify",
    "pimphony.sim.eda",
    "pimphony.sim.fidelity",
)
"""What ``sim/systems/`` may not import (nor anything inside them)."""
EXPERIMENTS = "pimphony.sim.experiments"
#: (experiment, experiment it imports) -> why it still does. Each entry must still be needed
#: (:func:`test_pending_imports_are_still_there`).
PENDING = {
    ("librapim", "librapim_energy"): "system_energy and hbm_energy (the LibraPIM systems' energy "
    "model) move to sim/systems once librapim_energy._xpu_costs is rewritten on the one xPU "
    "cost table (issue 33); moving them now would move that function mid-rewrite",
}


def module_of(path: Path, root: Path = ROOT) -> str:
    """The dotted ``pimphony.`` name of a source file under ``root`` (a package: its
    ``__init__``'s folder)."""
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(["pimphony", *parts])


def imported_modules(path: Path, root: Path = ROOT) -> list[tuple[int, str]]:
    """(line, dotted module) of every import of ours in ``path``, at any depth; relative
    imports resolved; ``from P import x`` counts as ``P.x`` (``x`` may be a module)."""
    here = module_of(path, root).split(".")
    package = here if path.name == "__init__.py" else here[:-1]
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            module = ".".join([*base, *([node.module] if node.module else [])])
            names = [f"{module}.{a.name}" for a in node.names]
        else:
            continue
        found += [(node.lineno, n) for n in names if n.startswith("pimphony.")]
    return found


def _within(name: str, package: str) -> bool:
    return name == package or name.startswith(package + ".")


def experiment_of(name: str) -> str | None:
    """The experiment a dotted name belongs to (``pimphony.sim.experiments.X...`` -> X)."""
    if not _within(name, EXPERIMENTS) or name == EXPERIMENTS:
        return None
    return name[len(EXPERIMENTS) + 1 :].split(".")[0]


def sub_package_violations(root: Path = ROOT) -> list[str]:
    """Every import that breaks a rule inside ``sim/`` (module docstring)."""
    wrong = []
    for path in sorted((root / "sim").rglob("*.py")):
        me = module_of(path, root)
        mine = experiment_of(me)
        for line, name in imported_modules(path, root):
            where = f"{path.relative_to(root)}:{line} imports {name}"
            if _within(me, "pimphony.sim.systems") and any(
                _within(name, bad) for bad in SYSTEMS_MAY_NOT
            ):
                wrong.append(f"{where} (sim/systems imports no {', '.join(SYSTEMS_MAY_NOT)})")
            other = experiment_of(name)
            if mine is not None and other is not None and other != mine and other != "__init__":
                wrong.append(f"{where} (experiment {mine} imports experiment {other})")
    return wrong


def _pending(line: str) -> bool:
    return any(f"(experiment {a} imports experiment {b})" in line for a, b in PENDING)


def main_blocks(root: Path = ROOT) -> list[str]:
    """``file:line`` of every ``if __name__ == "__main__"`` in our packages but sim/cli.py."""
    found = []
    for layer in OURS:
        for path in sorted((root / layer).rglob("*.py")):
            if path == root / "sim" / "cli.py":
                continue
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if not (isinstance(node, ast.If) and isinstance(node.test, ast.Compare)):
                    continue
                sides = [node.test.left, *node.test.comparators]
                names = {s.id for s in sides if isinstance(s, ast.Name)}
                values = {s.value for s in sides if isinstance(s, ast.Constant)}
                if "__name__" in names and "__main__" in values:
                    found.append(f"{path.relative_to(root)}:{node.lineno}")
    return found


def test_sub_packages_import_by_the_rules():
    wrong = [w for w in sub_package_violations() if not _pending(w)]
    assert not wrong, "\n".join(wrong)


def test_pending_imports_are_still_there():
    wrong = sub_package_violations()
    gone = [
        f"{a} -> {b}"
        for a, b in PENDING
        if not any(f"(experiment {a} imports experiment {b})" in w for w in wrong)
    ]
    assert not gone, f"no longer imported; drop from PENDING: {gone}"


def test_no_main_block_outside_the_cli():
    found = main_blocks()
    assert not found, "a side entry point; make it a row of sim.cli.COMMANDS:\n" + "\n".join(found)


def _tree(tmp_path: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        path = tmp_path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return tmp_path


def test_the_checker_sees_a_system_importing_upwards(tmp_path):
    root = _tree(
        tmp_path,
        {
            "sim/systems/a.py": "def f():\n    from pimphony.sim.serving.engine import serve\n",
            "sim/systems/b.py": "from pimphony.sim import verify\nfrom ..eda import vcd\n",
            "sim/systems/c.py": "import pimphony.sim.experiments.ablation\n",
            "sim/systems/ok.py": "from pimphony.sim.systems.step import run_decode\n"
            "from pimphony.sim.workloads import load_workload\n",
        },
    )
    wrong = sub_package_violations(root)
    assert [w.split(" (")[0] for w in wrong] == [
        "sim/systems/a.py:2 imports pimphony.sim.serving.engine.serve",
        "sim/systems/b.py:1 imports pimphony.sim.verify",
        "sim/systems/b.py:2 imports pimphony.sim.eda.vcd",
        "sim/systems/c.py:1 imports pimphony.sim.experiments.ablation",
    ]


def test_the_checker_sees_an_experiment_importing_another(tmp_path):
    root = _tree(
        tmp_path,
        {
            "sim/experiments/__init__.py": "",
            "sim/experiments/a.py": "from pimphony.sim.experiments.b import x\n",
            "sim/experiments/c.py": "def f():\n    from pimphony.sim.experiments import b\n",
            "sim/experiments/d.py": "from .b import x\nimport pimphony.sim.experiments.p.q\n",
            "sim/experiments/p/__init__.py": "from pimphony.sim.experiments.p import q\n"
            "from . import q\n",
            "sim/experiments/p/q.py": "from pimphony.sim.systems.step import run_decode\n"
            "from pimphony.sim.analysis.dcc_table import read_table\n",
            "sim/fidelity.py": "from pimphony.sim.experiments.a import x\n",
        },
    )
    wrong = sub_package_violations(root)
    assert wrong == [
        "sim/experiments/a.py:1 imports pimphony.sim.experiments.b.x (experiment a imports "
        "experiment b)",
        "sim/experiments/c.py:2 imports pimphony.sim.experiments.b (experiment c imports "
        "experiment b)",
        "sim/experiments/d.py:1 imports pimphony.sim.experiments.b.x (experiment d imports "
        "experiment b)",
        "sim/experiments/d.py:2 imports pimphony.sim.experiments.p.q (experiment d imports "
        "experiment p)",
    ]


def test_the_checker_sees_a_main_block(tmp_path):
    root = _tree(
        tmp_path,
        {
            "sim/cli.py": 'if __name__ == "__main__":\n    main()\n',
            "sim/serving/fig.py": 'def main():\n    pass\n\n\nif "__main__" == __name__:\n'
            "    main()\n",
            "models/x.py": 'if __name__ == "__main__":\n    pass\nif __name__ == "x":\n    pass\n',
            "compiler/__init__.py": "",
            "rtl/__init__.py": "",
        },
    )
    assert main_blocks(root) == ["models/x.py:1", "sim/serving/fig.py:5"]


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
