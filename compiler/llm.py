"""LLM model specifications and the per-layer decode-step operator graph.

A model is a frozen :class:`ModelSpec`, loaded from a shipped preset in ``configs/models/``, a
TOML file with the same keys, or a HuggingFace-style ``config.json``. Every key is required,
typed and validated; errors name the file, the key, the value and what is allowed.

:func:`decode_layer_ops` lists the operators of one decoder layer for one decode step of a
batch (see ``docs/models.md``); :func:`to_kernel` maps a GEMV or attention operator onto the
one-channel kernels of :mod:`compiler.kernels` without compiling it.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

from pimphony.compiler.kernels import GQA_MAPPINGS, KernelProgram, compile_kernel
from pimphony.models.config import (
    CONFIG_DIR,
    HardwareConfig,
    load_toml_table,
    reject_unknown_keys,
    require_key,
)
from pimphony.models.errors import PimphonyError
from pimphony.models.fileio import read_utf8
from pimphony.models.hub import SOFTMAX_FLOPS_PER_SCORE
from pimphony.models.memory import kv_bytes_per_token
from pimphony.models.xpu import VectorOp

__all__ = [
    "FFN_ACTIVATION",
    "FFN_KINDS",
    "GEMV_OPS",
    "HF_ACTIVATIONS",
    "MODELS_DIR",
    "LayerOp",
    "OP_KINDS",
    "OP_NAMES",
    "DecodeOp",
    "KernelCall",
    "ModelSpec",
    "ModelSpecError",
    "available_models",
    "decode_layer_ops",
    "gemv_shapes",
    "load_model",
    "spec_from_hf_config",
    "to_kernel",
    "weight_matrices",
]

MODELS_DIR = CONFIG_DIR / "models"
#: Each FFN kind and the element-wise activation between its two GEMVs (a vector op of the
#: xPU cost model); the kinds a model spec may name are its keys.
FFN_ACTIVATION: dict[str, VectorOp] = {"swiglu": VectorOp.SWIGLU, "relu": VectorOp.RELU}
FFN_KINDS = tuple(FFN_ACTIVATION)
#: HuggingFace ``hidden_act`` values and the FFN they mean ("silu"/"swish" are the same SiLU,
#: used gated in Llama/Qwen-style MLPs).
HF_ACTIVATIONS = {"silu": "swiglu", "swish": "swiglu", "relu": "relu"}


class LayerOp(StrEnum):
    """The operators of one decoder layer, in execution order (the one op vocabulary)."""

    QKV = "qkv"
    QK = "qk"
    SOFTMAX = "softmax"
    SV = "sv"
    PROJ = "proj"
    FFN1 = "ffn1"
    FFN2 = "ffn2"


OP_NAMES = tuple(LayerOp)
#: The weight GEMVs of a layer, in execution order.
GEMV_OPS = (LayerOp.QKV, LayerOp.PROJ, LayerOp.FFN1, LayerOp.FFN2)
OP_KINDS = ("gemv", "attention", "epu")

_INT_FIELDS = (
    "layers",
    "heads",
    "kv_heads",
    "hidden",
    "intermediate",
    "head_dim",
    "context_window",
    "element_bytes",
)
_FIELDS = ("name", *_INT_FIELDS[:6], "ffn", *_INT_FIELDS[6:], "vocab_size", "tied_embeddings")


class ModelSpecError(PimphonyError, ValueError):
    """A model file or specification is malformed, inconsistent or out of range."""


@dataclass(frozen=True)
class ModelSpec:
    """Shape of a decoder-only transformer, as the PIM mapping sees it.

    Parameters
    ----------
    name : str
        Model name (the preset file stem for shipped models).
    layers, heads, kv_heads : int
        Decoder layers, query heads and key/value heads (``heads % kv_heads == 0``).
    hidden, intermediate, head_dim : int
        Model width, FFN width and per-head feature size. ``heads * head_dim`` may differ
        from ``hidden``.
    ffn : str
        ``"swiglu"`` (gated: gate and up projections) or ``"relu"`` (one up projection).
    context_window : int
        Maximum context length in tokens.
    element_bytes : int
        Bytes per weight / KV element (2 for FP16/BF16).
    vocab_size : int
        Tokens of the embedding table and the LM head (0: not counted, for bare test specs;
        every shipped preset gives its model's).
    tied_embeddings : bool
        The LM head shares the embedding table (one copy in memory instead of two).
    """

    name: str
    layers: int
    heads: int
    kv_heads: int
    hidden: int
    intermediate: int
    head_dim: int
    ffn: str
    context_window: int
    element_bytes: int
    vocab_size: int = 0
    tied_embeddings: bool = False

    def __post_init__(self) -> None:
        _validate(dataclasses.asdict(self), f"ModelSpec {self.name!r}")

    @property
    def gqa_group(self) -> int:
        """Query heads sharing one KV head (1 for multi-head attention)."""
        return self.heads // self.kv_heads

    @property
    def qkv_dim(self) -> int:
        """Output width of the fused QKV projection, ``(heads + 2 kv_heads) head_dim``."""
        return (self.heads + 2 * self.kv_heads) * self.head_dim

    @property
    def activation(self) -> VectorOp:
        """The FFN's activation (:data:`FFN_ACTIVATION`): SwiGLU or ReLU."""
        return FFN_ACTIVATION[self.ffn]

    @property
    def ffn1_dim(self) -> int:
        """Output width of FFN1: ``2 intermediate`` (SwiGLU gate + up) or ``intermediate``."""
        return (2 if self.ffn == "swiglu" else 1) * self.intermediate

    @property
    def layer_weight_elements(self) -> int:
        """Weight elements of one layer's GEMVs (= their MACs per token)."""
        return sum(d_out * d_in for d_out, d_in in gemv_shapes(self).values())

    @property
    def weight_bytes(self) -> int:
        """Bytes of all decoder-layer GEMV weights.

        Excludes embeddings, the LM head, norms and biases (not mapped onto PIM GEMVs here).
        """
        return self.layers * self.layer_weight_elements * self.element_bytes

    @property
    def embedding_bytes(self) -> int:
        """Bytes of the token embedding table and the LM head (one table if tied)."""
        tables = 1 if self.tied_embeddings else 2
        return tables * self.vocab_size * self.hidden * self.element_bytes

    @property
    def resident_weight_bytes(self) -> int:
        """Bytes of every weight the PIM memory holds: decoder-layer GEMVs, embeddings and LM
        head (norm gains and biases, < 0.01% of the total, are not counted)."""
        return self.weight_bytes + self.embedding_bytes

    @property
    def kv_bytes_per_token(self) -> int:
        """KV-cache bytes one token adds over all layers: ``2 L kv_heads d_h bytes``."""
        return kv_bytes_per_token(self.layers, self.kv_heads, self.head_dim, self.element_bytes)


def _validate(values: Mapping[str, Any], source: str) -> None:
    """Check types, ranges and relations of ModelSpec field values."""
    name = values["name"]
    if not isinstance(name, str) or not name:
        raise ModelSpecError(f"{source}: name = {name!r}: must be a non-empty string")
    for key in _INT_FIELDS:
        value = values[key]
        where = f"{source}: {key} = {value!r}"
        if isinstance(value, bool) or not isinstance(value, int):
            raise ModelSpecError(f"{where}: must be a positive integer, got {type(value).__name__}")
        if value <= 0:
            raise ModelSpecError(f"{where}: must be a positive integer")
    ffn = values["ffn"]
    if ffn not in FFN_KINDS:
        raise ModelSpecError(f"{source}: ffn = {ffn!r}: allowed: {', '.join(FFN_KINDS)}")
    vocab = values.get("vocab_size", 0)
    if isinstance(vocab, bool) or not isinstance(vocab, int) or vocab < 0:
        raise ModelSpecError(
            f"{source}: vocab_size = {vocab!r}: must be a non-negative integer (0: not counted)"
        )
    tied = values.get("tied_embeddings", False)
    if not isinstance(tied, bool):
        raise ModelSpecError(f"{source}: tied_embeddings = {tied!r}: must be true or false")
    heads, kv_heads = values["heads"], values["kv_heads"]
    if heads % kv_heads:
        raise ModelSpecError(
            f"{source}: kv_heads = {kv_heads!r}: must divide heads = {heads} "
            "(each KV head serves a whole GQA group of query heads)"
        )


def available_models() -> list[str]:
    """Names of the model presets shipped in ``configs/models/``."""
    return sorted(p.stem for p in MODELS_DIR.glob("*.toml"))


def load_model(name_or_path: str | Path) -> ModelSpec:
    """Load a model by shipped name, ``.toml`` path, ``config.json`` path or checkpoint folder.

    Parameters
    ----------
    name_or_path : str or Path
        A name from :func:`available_models`, a path to a TOML file with the ``ModelSpec``
        keys, a path to a HuggingFace-style ``.json`` config, or a folder holding
        ``config.json``.

    Returns
    -------
    ModelSpec
        The validated specification.
    """
    path = Path(name_or_path)
    if str(name_or_path) == "":  # not Path(""), the working directory
        raise _unknown_model(name_or_path)
    if path.suffix == ".toml":
        return _load_toml(path)
    if path.suffix == ".json":
        return _load_hf(path)
    if path.is_dir() and (path / "config.json").is_file():
        return _load_hf(path / "config.json")
    candidate = MODELS_DIR / f"{path.name}.toml"
    if str(name_or_path) == path.name and candidate.is_file():
        return _load_toml(candidate)
    if path.is_dir():
        raise ModelSpecError(
            f"{path}: a folder without config.json; give a model name ("
            f"{', '.join(available_models())}), a .toml file, a config.json or a folder "
            "holding one"
        )
    raise _unknown_model(name_or_path)


def _unknown_model(name: str | Path) -> ModelSpecError:
    return ModelSpecError(
        f"unknown model {str(name)!r}; available: {', '.join(available_models())} "
        "(or give a path to a .toml file, a config.json or a folder holding one)"
    )


def _load_toml(path: Path) -> ModelSpec:
    raw = load_toml_table(path, ModelSpecError, "model")
    head = f"{path}: "
    reject_unknown_keys(raw, _FIELDS, ModelSpecError, head)
    for key in _FIELDS:
        require_key(raw, key, ModelSpecError, head, note=f"; required: {', '.join(_FIELDS)}")
    _validate(raw, str(path))
    return ModelSpec(**raw)


def _load_hf(path: Path) -> ModelSpec:
    try:
        text = read_utf8(path, ModelSpecError)
    except FileNotFoundError:
        raise ModelSpecError(f"{path}: no such config file") from None
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ModelSpecError(f"{path}: not valid JSON: {exc}") from None
    default = path.parent.name if path.name == "config.json" and path.parent.name else path.stem
    name = raw.get("_name_or_path") if isinstance(raw, dict) else None
    return spec_from_hf_config(raw, name=name or default, source=str(path))


def spec_from_hf_config(
    config: Mapping[str, Any], *, name: str, source: str = "config.json"
) -> ModelSpec:
    """Build a :class:`ModelSpec` from a parsed HuggingFace ``config.json`` dictionary.

    Parameters
    ----------
    config : Mapping
        The parsed JSON object. Keys other than those in ``docs/models.md`` are ignored.
    name : str
        Name of the resulting spec.
    source : str
        Where ``config`` came from, for error messages.

    Returns
    -------
    ModelSpec
        ``element_bytes`` is always 2 (the PIM computes in 16-bit; ``torch_dtype`` is ignored).
    """
    if not isinstance(config, Mapping):
        raise ModelSpecError(
            f"{source}: top level must be a JSON object, got {type(config).__name__}"
        )
    for key in ("num_experts", "num_local_experts", "n_routed_experts"):
        value = config.get(key)
        if value not in (None, 0, 1):
            raise ModelSpecError(
                f"{source}: {key} = {value!r}: mixture-of-experts FFNs are not modelled; "
                "allowed: absent, null, 0 or 1"
            )

    def get_int(key: str, default: int | None = None) -> int:
        value = config.get(key)
        if value is None:
            if default is not None:
                return default
            raise ModelSpecError(f"{source}: missing key {key!r} (required)")
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise ModelSpecError(f"{source}: {key} = {value!r}: must be a positive integer")
        return value

    layers = get_int("num_hidden_layers")
    heads = get_int("num_attention_heads")
    kv_heads = get_int("num_key_value_heads", default=heads)
    hidden = get_int("hidden_size")
    intermediate = get_int("intermediate_size")
    if config.get("head_dim") is None and hidden % heads:
        raise ModelSpecError(
            f"{source}: head_dim is absent and hidden_size = {hidden} is not a multiple of "
            f"num_attention_heads = {heads}; give head_dim explicitly"
        )
    head_dim = get_int("head_dim", default=hidden // heads)
    context_window = get_int("max_position_embeddings")
    act = config.get("hidden_act")
    if act is None:
        raise ModelSpecError(f"{source}: missing key 'hidden_act' (required)")
    if act not in HF_ACTIVATIONS:
        raise ModelSpecError(
            f"{source}: hidden_act = {act!r}: unknown activation; "
            f"allowed: {', '.join(HF_ACTIVATIONS)}"
        )
    if heads % kv_heads:
        raise ModelSpecError(
            f"{source}: num_key_value_heads = {kv_heads}: must divide num_attention_heads = {heads}"
        )
    vocab_size = get_int("vocab_size")
    # Absent means untied, as in the Llama and Qwen2 config classes.
    tied = config.get("tie_word_embeddings", False)
    if not isinstance(tied, bool):
        raise ModelSpecError(f"{source}: tie_word_embeddings = {tied!r}: must be true or false")
    values = {
        "name": name,
        "layers": layers,
        "heads": heads,
        "kv_heads": kv_heads,
        "hidden": hidden,
        "intermediate": intermediate,
        "head_dim": head_dim,
        "ffn": HF_ACTIVATIONS[act],
        "context_window": context_window,
        "element_bytes": 2,
        "vocab_size": vocab_size,
        "tied_embeddings": tied,
    }
    _validate(values, source)
    return ModelSpec(**values)


@dataclass(frozen=True)
class DecodeOp:
    """One operator of one decoder layer in one decode step.

    Parameters
    ----------
    name : str
        One of :data:`OP_NAMES`.
    kind : str
        ``"gemv"`` (weights x activation), ``"attention"`` (KV cache x vector) or ``"epu"``.
    shape : dict
        ``gemv``: ``d_out``, ``d_in``. ``attention``: ``tokens``, ``d_h``, ``gqa_group``.
        ``epu`` (softmax): ``heads``, ``tokens``.
    count : int
        Identical instances: batch size for GEMVs, KV heads for attention, 1 for softmax.
    request : int or None
        Index of the request for per-request operators, ``None`` for batch-shared GEMVs.
    flops : int
        Floating-point operations of all ``count`` instances (2 per MAC).
    """

    name: str
    kind: str
    shape: dict[str, int] = field(hash=False)
    count: int
    request: int | None
    flops: int

    def __post_init__(self) -> None:
        if self.name not in OP_NAMES:
            raise ValueError(f"DecodeOp name {self.name!r}: allowed: {', '.join(OP_NAMES)}")
        if self.kind not in OP_KINDS:
            raise ValueError(f"DecodeOp kind {self.kind!r}: allowed: {', '.join(OP_KINDS)}")

    @property
    def macs(self) -> int:
        """Multiply-accumulates of all instances (0 for EPU operators)."""
        return 0 if self.kind == "epu" else self.flops // 2


def decode_layer_ops(
    spec: ModelSpec, context_lengths: Sequence[int], *, check_window: bool = True
) -> list[DecodeOp]:
    """Operators of ONE decoder layer for ONE decode step of a batch.

    Parameters
    ----------
    spec : ModelSpec
        The model.
    context_lengths : sequence of int
        Per request, the number of cached tokens its new query attends to (including the
        token decoded in this step). The batch size is ``len(context_lengths)``.
    check_window : bool
        Refuse context lengths beyond ``spec.context_window`` (default).

    Returns
    -------
    list of DecodeOp
        ``qkv``; then per request ``qk``, ``softmax``, ``sv``; then ``proj``, ``ffn1``,
        ``ffn2``.
    """
    lengths = list(context_lengths)
    if not lengths:
        raise ValueError("context_lengths is empty: a decode step needs at least one request")
    for r, t in enumerate(lengths):
        if isinstance(t, bool) or not isinstance(t, int) or t <= 0:
            raise ValueError(f"context_lengths[{r}] = {t!r}: must be a positive integer")
        if check_window and t > spec.context_window:
            raise ValueError(
                f"context_lengths[{r}] = {t}: exceeds {spec.name} context_window = "
                f"{spec.context_window} (truncate, or pass check_window=False)"
            )
    batch, d_h, g = len(lengths), spec.head_dim, spec.gqa_group

    def gemv(name: str, d_out: int, d_in: int) -> DecodeOp:
        shape = {"d_out": d_out, "d_in": d_in}
        return DecodeOp(name, "gemv", shape, batch, None, 2 * batch * d_out * d_in)

    shapes = gemv_shapes(spec)
    ops = [gemv(LayerOp.QKV, *shapes[LayerOp.QKV])]
    for r, t in enumerate(lengths):
        attn = {"tokens": t, "d_h": d_h, "gqa_group": g}
        macs = spec.kv_heads * g * t * d_h  # = heads * T * d_h
        ops.append(DecodeOp("qk", "attention", dict(attn), spec.kv_heads, r, 2 * macs))
        ops.append(
            DecodeOp(
                "softmax",
                "epu",
                {"heads": spec.heads, "tokens": t},
                1,
                r,
                SOFTMAX_FLOPS_PER_SCORE * spec.heads * t,
            )
        )
        ops.append(DecodeOp("sv", "attention", dict(attn), spec.kv_heads, r, 2 * macs))
    ops.extend(gemv(op, *shapes[op]) for op in GEMV_OPS[1:])
    return ops


def gemv_shapes(spec: ModelSpec) -> dict[LayerOp, tuple[int, int]]:
    """``(d_out, d_in)`` of each weight GEMV of one layer (whole, before any TP split)."""
    return {
        LayerOp.QKV: (spec.qkv_dim, spec.hidden),
        LayerOp.PROJ: (spec.hidden, spec.heads * spec.head_dim),
        LayerOp.FFN1: (spec.ffn1_dim, spec.hidden),
        LayerOp.FFN2: (spec.hidden, spec.intermediate),
    }


def weight_matrices(spec: ModelSpec) -> dict[str, tuple[int, int]]:
    """``(d_out, d_in)`` of every separate weight matrix of one decoder layer, as a framework
    stores them (Q, K, V, O; FF0 gate, FF1 up, FF2 down for SwiGLU, or FF1 up, FF2 down), the
    units a weight layout pads one by one (PIM-SHERPA 6). Their sum is :func:`gemv_shapes`'s."""
    attn = spec.heads * spec.head_dim
    kv = spec.kv_heads * spec.head_dim
    mats = {"q": (attn, spec.hidden), "k": (kv, spec.hidden), "v": (kv, spec.hidden)}
    mats["o"] = (spec.hidden, attn)
    if spec.ffn == "swiglu":
        mats["ff0"] = (spec.intermediate, spec.hidden)
    mats["ff1"] = (spec.intermediate, spec.hidden)
    mats["ff2"] = (spec.hidden, spec.intermediate)
    return mats


@dataclass(frozen=True)
class KernelCall:
    """A deferred :func:`compiler.kernels.compile_kernel` call for ``count`` instances.

    Parameters
    ----------
    kind : str
        ``"gemv"``, ``"qk"`` or ``"sv"``.
    args : dict
        Keyword arguments of the kernel (``d_out``/``d_in``, or ``tokens``/``d_h``/
        ``gqa_group``/``mapping``).
    count : int
        How many identical instances the operator has.
    """

    kind: str
    args: dict[str, int | str] = field(hash=False)
    count: int

    def compile(self, cfg: HardwareConfig) -> KernelProgram:
        """Lower one instance onto one channel of ``cfg`` (may raise ``CompileError``)."""
        return compile_kernel(cfg, self.kind, **self.args)


def to_kernel(op: DecodeOp, mapping: str = "row-reuse") -> KernelCall:
    """Map a GEMV or attention operator onto a one-channel kernel call, without compiling.

    Parameters
    ----------
    op : DecodeOp
        A ``gemv`` or ``attention`` operator (EPU operators have no PIM kernel).
    mapping : str
        GQA mapping for ``qk``/``sv`` (see :data:`compiler.kernels.GQA_MAPPINGS`).

    Returns
    -------
    KernelCall
        The whole, unpartitioned operator; splitting it across channels is the mapper's job.
    """
    if mapping not in GQA_MAPPINGS:
        raise ValueError(f"mapping {mapping!r} is unknown; allowed: {', '.join(GQA_MAPPINGS)}")
    if op.kind == "gemv":
        return KernelCall("gemv", {"d_out": op.shape["d_out"], "d_in": op.shape["d_in"]}, op.count)
    if op.kind == "attention" and op.name in ("qk", "sv"):
        args = {k: op.shape[k] for k in ("tokens", "d_h", "gqa_group")}
        return KernelCall(op.name, {**args, "mapping": mapping}, op.count)
    raise ValueError(
        f"operator {op.name!r} of kind {op.kind!r} runs on the EPU, not on a PIM kernel; "
        "to_kernel accepts kinds 'gemv' and 'attention'"
    )
