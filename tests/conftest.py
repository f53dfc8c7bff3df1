"""Fixtures shared by the test modules."""

from __future__ import annotations

import pytest
from pimphony.models.config import HardwareConfig, load_preset


@pytest.fixture(scope="module")
def cfg() -> HardwareConfig:
    """The aim-16ch hardware preset, the default configuration of most tests."""
    return load_preset("aim-16ch")
