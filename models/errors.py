"""The one base of every error pimphony raises on purpose (``docs/errors.md``)."""

from __future__ import annotations

__all__ = ["PimphonyError"]


class PimphonyError(Exception):
    """Bad input or a request the hardware cannot serve, said in one line: what, which field
    or value, what is allowed. The command line prints it as ``pimphony <command>: error:
    <message>`` and exits with :attr:`exit_status`; anything else that escapes is a bug."""

    #: 2: the input is wrong. An external tool's failure (Verilator, Yosys) sets 1.
    exit_status: int = 2
