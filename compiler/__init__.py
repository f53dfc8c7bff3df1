"""Lowering LLM decode kernels into PIM channel command streams."""
