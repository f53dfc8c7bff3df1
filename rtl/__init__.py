"""Amaranth descriptions of the PIM controller blocks."""
