"""LibraPIM's evaluation grid as its experiments share it (``docs/librapim.md``): the models,
batch sizes and input lengths of 6.1 (Fig. 19; Fig. 22 takes the same input lengths), and the
folder their reports go to."""

from __future__ import annotations

from pimphony.models.fileio import BUILD_DIR

__all__ = ["LIBRAPIM_BATCHES", "LIBRAPIM_CONTEXTS", "LIBRAPIM_DIR", "LIBRAPIM_MODELS"]

#: Where ``librapim-fig19``, ``librapim-figs`` and ``librapim-energy`` write by default.
LIBRAPIM_DIR = BUILD_DIR / "librapim"
#: LibraPIM 6.1: "GPT3 175B [5] and Llama3-70B [15]" (our presets with a 4096-token window).
LIBRAPIM_MODELS = ("gpt3-175b-4k", "llama-3.1-70b")
#: 6.1: "We vary the input sequence length from 16 to 4096 and the batch size from 32 to 384."
LIBRAPIM_BATCHES = (32, 64, 128, 256, 384)
LIBRAPIM_CONTEXTS = (16, 64, 256, 1024, 4096)
