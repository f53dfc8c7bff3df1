"""Every text loader refuses bytes that are not UTF-8 with one line naming file, line and
column (``models.fileio.read_utf8``), never a ``UnicodeDecodeError``."""

from __future__ import annotations

import pytest
from pimphony.compiler.dcc.predictor import LookupTable
from pimphony.compiler.llm import load_model
from pimphony.models.backends import load_backend_config
from pimphony.models.config import load_config
from pimphony.models.energy import load_energy_config
from pimphony.models.errors import PimphonyError
from pimphony.models.fileio import read_utf8
from pimphony.models.layout import load_layout
from pimphony.models.xpu_config import load_xpu_config
from pimphony.sim.serving.trace import read_trace
from pimphony.sim.sherpa_timing import load_sherpa_host
from pimphony.sim.sweep_run import load_sweep
from pimphony.sim.verify.campaign import replay
from pimphony.sim.workloads import load_workload, read_context_lengths

BAD = b'name = "x"\n# caf\xe9 latin-1\n'  # 0xe9 at line 2, column 6


def test_read_utf8_names_line_and_column(tmp_path):
    f = tmp_path / "p.toml"
    f.write_bytes(BAD)
    expected = r"p.toml: not UTF-8 text \(byte 0xe9 at line 2, column 6\)"
    with pytest.raises(ValueError, match=expected):
        read_utf8(f, ValueError)
    f.write_bytes("caf\u00e9 ok\n".encode())
    assert read_utf8(f, ValueError) == "caf\u00e9 ok\n"


LOADERS = {
    "preset": (load_config, ".toml"),
    "xpu": (load_xpu_config, ".toml"),
    "energy": (load_energy_config, ".toml"),
    "backend": (load_backend_config, ".toml"),
    "layout": (load_layout, ".toml"),
    "sherpa host": (load_sherpa_host, ".toml"),
    "model toml": (load_model, ".toml"),
    "model json": (load_model, ".json"),
    "workload": (load_workload, ".toml"),
    "sweep": (load_sweep, ".toml"),
    "trace jsonl": (read_trace, ".jsonl"),
    "trace csv": (read_trace, ".csv"),
    "contexts": (read_context_lengths, ".txt"),
    "lookup table": (LookupTable.load, ".json"),
    "reproducer": (replay, ".json"),
}


@pytest.mark.parametrize("kind", sorted(LOADERS))
def test_every_loader_refuses_non_utf8_in_one_line(kind, tmp_path):
    load, suffix = LOADERS[kind]
    f = tmp_path / f"bad{suffix}"
    f.write_bytes(BAD)
    with pytest.raises(PimphonyError) as info:
        load(f)
    message = str(info.value)
    assert str(f) in message and "\n" not in message
    assert "UTF-8" in message or "not a lookup table" in message, message
