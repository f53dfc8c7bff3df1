"""Experiments that reproduce the papers' figures and tables, each a ``pimphony`` command."""
