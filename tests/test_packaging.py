"""pimphony installs as one package: every sub-package and data file listed, the API importable.

The wheel itself is built, installed into a fresh environment and run from outside the
repository by ``.ci/wheel_check`` (``make wheel-check``, a CI step).
"""

from __future__ import annotations

import fnmatch
import subprocess
import sys
import tomllib
from pathlib import Path

from pimphony.models.channel import run_channel
from pimphony.models.config import CONFIG_DIR, load_preset

import pimphony

ROOT = Path(__file__).resolve().parents[1]
SETUPTOOLS = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
LAYERS = ("models", "compiler", "rtl", "sim")


def _tree_packages() -> set[str]:
    found = {"pimphony", "pimphony.configs"}
    for layer in LAYERS:
        for init in (ROOT / layer).rglob("__init__.py"):
            rel = init.parent.relative_to(ROOT)
            found.add("pimphony." + ".".join(rel.parts))
    return found


def test_every_sub_package_is_in_the_wheel():
    assert set(SETUPTOOLS["packages"]) == _tree_packages()


def test_the_layers_install_under_pimphony():
    assert SETUPTOOLS["package-dir"] == {
        "pimphony": "pimphony",
        **{f"pimphony.{layer}": layer for layer in (*LAYERS, "configs")},
    }


def _matches(path: Path, patterns: list[str]) -> bool:
    # setuptools' "**/*.x" also matches files at the top of the folder
    tops = [p.removeprefix("**/") for p in patterns]
    return any(fnmatch.fnmatch(str(path), p) for p in patterns) or (
        len(path.parts) == 1 and any(fnmatch.fnmatch(path.name, p) for p in tops)
    )


def test_every_shipped_data_file_is_package_data():
    data = SETUPTOOLS["package-data"]
    configs = [p.relative_to(CONFIG_DIR) for p in CONFIG_DIR.rglob("*") if p.is_file()]
    missing = [str(p) for p in configs if not _matches(p, data["pimphony.configs"])]
    assert configs and not missing, f"configs/ files outside package-data: {missing}"
    verify = ROOT / "sim" / "verify"
    harness = [p.relative_to(verify) for p in (verify / "harness").rglob("*") if p.is_file()]
    missing = [str(p) for p in harness if not _matches(p, data["pimphony.sim.verify"])]
    assert harness and not missing, f"sim/verify/harness files outside package-data: {missing}"


def test_run_kernel_is_the_channel_run():
    from pimphony.compiler.kernels import compile_kernel

    cfg = load_preset("aim-16ch")
    stream = compile_kernel(cfg, "qk", tokens=256, d_h=128).commands
    for sched in ("static", "dcs"):
        api = pimphony.run_kernel("qk", tokens=256, d_h=128, sched=sched)
        assert api.to_dict() == run_channel(stream, cfg, sched, record=False).to_dict()
    # README: QK^T at d_h = 128 under static leaves the MACs idle most of the time
    assert pimphony.run_kernel("qk", tokens=256, d_h=128, sched="static").cycles == 1068


def test_import_pimphony_is_light_and_lazy():
    code = (
        "import sys, pimphony\n"
        "print(sorted(m for m in sys.modules if m.startswith('pimphony.') or m == 'numba'))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT
    ).stdout
    assert out.strip() == "[]"


def test_a_users_own_models_package_and_ours_do_not_collide(tmp_path):
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "__init__.py").write_text('WHO = "the user"\n')
    code = (
        "import models, pimphony, pimphony.models.config as ours\n"
        "assert models.WHO == 'the user', models.__file__\n"
        "assert not hasattr(ours, 'WHO') and ours.CONFIG_DIR.is_dir()\n"
        "import pimphony.models as pm\n"
        "assert pm is not models\n"
        "print(pimphony.run_kernel('gemv', d_out=64, d_in=64, sched='dcs').cycles)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert int(proc.stdout.split()[-1]) > 0


def test_decode_is_the_decode_command(tmp_path, capsys):
    import json

    from pimphony.sim.cli import main

    main(["decode", "--context", "1024", "--batch", "2", "--json",
          "--report", str(tmp_path / "r.json"), "--plot", str(tmp_path / "r.png")])  # fmt: skip
    cli = json.loads(capsys.readouterr().out)
    api = pimphony.decode(context=1024, batch=2).to_dict()
    for key in ("cycles", "tokens_per_s", "partition_layers", "mac_utilization", "energy"):
        assert api[key] == cli[key], key
