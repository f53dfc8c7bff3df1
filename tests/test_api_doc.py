"""``docs/api.md``'s worked example runs and prints what the page says."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

DOC = (Path(__file__).resolve().parents[1] / "docs" / "api.md").read_text()


def test_the_worked_example_prints_what_the_page_says():
    blocks = re.findall(r"```(\w*)\n(.*?)```", DOC, flags=re.S)
    code = next(body for lang, body in blocks if lang == "python")
    printed = next(body for lang, body in blocks if lang == "" and body.strip())
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, "docs/api.md", "exec"), {})
    assert out.getvalue() == printed
