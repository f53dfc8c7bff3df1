"""Model specs (shipped presets, TOML and HF config.json loading, every error) and the
decode-layer operator graph (shapes, counts, FLOPs, kernel mapping)."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import numpy as np
import pytest
from pimphony.compiler.kernels import CompileError, compile_gemv, compile_qk, compile_sv
from pimphony.compiler.llm import (
    MODELS_DIR,
    OP_NAMES,
    DecodeOp,
    KernelCall,
    ModelSpec,
    ModelSpecError,
    available_models,
    decode_layer_ops,
    load_model,
    spec_from_hf_config,
    to_kernel,
)
from pimphony.models.hub import SOFTMAX_FLOPS_PER_SCORE

from tests.helpers import drop_key, set_key, write_toml

# name: (layers, heads, kv_heads, hidden, intermediate, head_dim, context_window, vocab_size)
EXPECTED = {
    "llm-1.8b": (24, 16, 16, 2048, 5504, 64, 32768, 151936),
    "llm-7b": (32, 32, 32, 4096, 11008, 128, 32768, 151936),
    "llm-14b": (40, 40, 40, 5120, 13696, 128, 32768, 152064),
    "llm-72b": (80, 64, 64, 8192, 24576, 128, 32768, 152064),
    "llama-3.1-8b": (32, 32, 8, 4096, 14336, 128, 131072, 128256),
    "llama-3.1-8b-1m": (32, 32, 8, 4096, 14336, 128, 1048576, 128256),  # PIMphony Fig. 17
    "llama-3.1-70b": (80, 64, 8, 8192, 28672, 128, 131072, 128256),
    # GPT-3 175B (Brown et al. 2020 Table 2.1; LibraPIM Table 2): GELU, one up projection
    "gpt3-175b": (96, 96, 96, 12288, 49152, 128, 2048, 50257),
    "gpt3-175b-4k": (96, 96, 96, 12288, 49152, 128, 4096, 50257),  # LibraPIM 6.1's 4096
    # Llama 3.2 (PIM-SHERPA 5): SwiGLU, tied embeddings
    "llama-3.2-1b": (16, 32, 8, 2048, 8192, 64, 131072, 128256),
    "llama-3.2-3b": (28, 24, 8, 3072, 8192, 128, 131072, 128256),
    # PIM-SHERPA Fig. 4
    "qwen3-8b": (36, 32, 8, 4096, 12288, 128, 40960, 151936),
    "gemma3-27b": (62, 32, 16, 5376, 21504, 128, 131072, 262208),
    # DCC Fig. 8 (windows raised to 2048 + 2048): AttAcc simulator's GPT-13B, LLaMA 33B
    "gpt3-13b-4k": (40, 40, 40, 5120, 20480, 128, 4096, 50257),
    "llama-33b-4k": (60, 52, 52, 6656, 17920, 128, 4096, 32000),
}
#: presets with one up projection (GELU/ReLU) and tied embeddings; the rest are SwiGLU, untied
_RELU_TIED = {"gpt3-175b", "gpt3-175b-4k", "gpt3-13b-4k"}
_SWIGLU_TIED = {"llama-3.2-1b", "llama-3.2-3b", "gemma3-27b"}

LLAMA_8B_HF = {
    "_name_or_path": "meta-llama/Llama-3.1-8B",
    "architectures": ["LlamaForCausalLM"],
    "attention_bias": False,
    "hidden_act": "silu",
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "max_position_embeddings": 131072,
    "model_type": "llama",
    "num_attention_heads": 32,
    "num_hidden_layers": 32,
    "num_key_value_heads": 8,
    "rms_norm_eps": 1e-05,
    "rope_scaling": {"factor": 8.0, "rope_type": "llama3"},
    "rope_theta": 500000.0,
    "torch_dtype": "bfloat16",
    "vocab_size": 128256,
}

BASE_TOML = (MODELS_DIR / "llm-7b.toml").read_text()


def write_hf(tmp_path: Path, cfg: dict, folder: str = "ckpt") -> Path:
    d = tmp_path / folder
    d.mkdir(exist_ok=True)
    path = d / "config.json"
    path.write_text(json.dumps(cfg))
    return path


# ---------------------------------------------------------------------------------------------
# Shipped presets


def test_available_models_lists_exactly_the_shipped_presets():
    assert available_models() == sorted(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_shipped_model_numbers(name):
    spec = load_model(name)
    layers, heads, kv, hidden, inter, hd, cw, vocab = EXPECTED[name]
    ffn, tied = ("relu", True) if name in _RELU_TIED else ("swiglu", name in _SWIGLU_TIED)
    assert spec == ModelSpec(
        name, layers, heads, kv, hidden, inter, hd, ffn, cw, 2, vocab, tied_embeddings=tied
    )
    assert load_model(MODELS_DIR / f"{name}.toml") == spec
    assert load_model(str(MODELS_DIR / f"{name}.toml")) == spec
    assert load_model(Path(name)) == spec


def test_derived_properties_by_hand():
    l7, l8, l70 = load_model("llm-7b"), load_model("llama-3.1-8b"), load_model("llama-3.1-70b")
    assert (l7.gqa_group, l8.gqa_group, l70.gqa_group) == (1, 4, 8)
    # 2 (K and V) * layers * kv_heads * head_dim * 2 bytes
    assert l7.kv_bytes_per_token == 2 * 32 * 32 * 128 * 2 == 524288
    assert l8.kv_bytes_per_token == 131072  # GQA: a quarter of llm-7b
    assert l70.kv_bytes_per_token == 2 * 80 * 8 * 128 * 2
    assert load_model("llm-1.8b").kv_bytes_per_token == 2 * 24 * 16 * 64 * 2
    # Non-embedding parameters: Qwen1.5-7B 6.48e9, Llama-3.1-8B 6.98e9 (public figures).
    assert l7.weight_bytes == 2 * 32 * (4096 * 12288 + 4096 * 4096 + 3 * 4096 * 11008)
    assert l7.weight_bytes == 12_952_010_752
    assert l8.weight_bytes == 2 * 32 * (4096 * 6144 + 4096 * 4096 + 3 * 4096 * 14336)
    assert l8.weight_bytes == 13_958_643_712
    # Resident weights add the embedding table and the (untied) LM head: public parameter
    # counts Qwen1.5-7B 7.72e9, Llama-3.1-8B 8.03e9, Llama-3.1-70B 70.6e9.
    assert l7.embedding_bytes == 2 * 151936 * 4096 * 2
    assert l7.resident_weight_bytes == 15_441_330_176  # 7.72e9 parameters
    assert l8.resident_weight_bytes == 16_059_990_016  # 8.03e9
    assert round(l70.resident_weight_bytes / 2e9, 1) == 70.6
    tied = dataclasses.replace(l8, tied_embeddings=True)
    assert tied.resident_weight_bytes == l8.weight_bytes + 128256 * 4096 * 2


def test_relu_ffn_has_one_up_projection():
    spec = dataclasses.replace(load_model("llm-7b"), ffn="relu")
    assert spec.ffn1_dim == 11008
    assert spec.layer_weight_elements == 4096 * 12288 + 4096 * 4096 + 2 * 4096 * 11008


def test_spec_is_frozen_and_validated_on_construction():
    spec = load_model("llm-7b")
    with pytest.raises(dataclasses.FrozenInstanceError):
        spec.layers = 1
    with pytest.raises(ModelSpecError, match=r"kv_heads = 5: must divide heads = 32"):
        dataclasses.replace(spec, kv_heads=5)
    with pytest.raises(ModelSpecError, match=r"ffn = 'gelu': allowed: swiglu, relu"):
        dataclasses.replace(spec, ffn="gelu")
    with pytest.raises(ModelSpecError, match=r"head_dim = 0: must be a positive integer"):
        dataclasses.replace(spec, head_dim=0)


def test_unknown_name_lists_available(tmp_path):
    with pytest.raises(
        ModelSpecError,
        match=r"unknown model .llm-8b.; available: gemma3-27b, gpt3-13b-4k, gpt3-175b, ",
    ):
        load_model("llm-8b")
    with pytest.raises(ModelSpecError, match="no such model file"):
        load_model(tmp_path / "absent.toml")


# ---------------------------------------------------------------------------------------------
# TOML errors: each names the file, the key, the value and what is allowed


@pytest.mark.parametrize(
    ("key", "value", "pattern"),
    [
        ("layers", '"32"', r"layers = '32': must be a positive integer, got str"),
        ("heads", "32.0", r"heads = 32\.0: must be a positive integer, got float"),
        ("hidden", "true", r"hidden = True: must be a positive integer, got bool"),
        ("intermediate", "0", r"intermediate = 0: must be a positive integer"),
        ("context_window", "-1", r"context_window = -1: must be a positive integer"),
        ("element_bytes", "0", r"element_bytes = 0: must be a positive integer"),
        ("kv_heads", "5", r"kv_heads = 5: must divide heads = 32"),
        ("kv_heads", "64", r"kv_heads = 64: must divide heads = 32"),
        ("ffn", '"gelu"', r"ffn = 'gelu': allowed: swiglu, relu"),
        ("ffn", "1", r"ffn = 1: allowed: swiglu, relu"),
        ("name", '""', r"name = '': must be a non-empty string"),
        ("name", "7", r"name = 7: must be a non-empty string"),
    ],
)
def test_toml_bad_value(tmp_path, key, value, pattern):
    path = write_toml(tmp_path, set_key(BASE_TOML, key, value))
    with pytest.raises(ModelSpecError, match=pattern) as exc:
        load_model(path)
    assert str(exc.value).startswith(str(path))


@pytest.mark.parametrize("key", ["name", "layers", "kv_heads", "ffn", "element_bytes"])
def test_toml_missing_key(tmp_path, key):
    path = write_toml(tmp_path, drop_key(BASE_TOML, key))
    with pytest.raises(ModelSpecError, match=rf"{re.escape(str(path))}: missing key '{key}'"):
        load_model(path)


def test_toml_unknown_key_lists_allowed(tmp_path):
    path = write_toml(tmp_path, BASE_TOML + "vocab = 151936\n")
    with pytest.raises(ModelSpecError, match=r"unknown key 'vocab'; allowed: name, layers, heads"):
        load_model(path)


def test_toml_syntax_error(tmp_path):
    path = write_toml(tmp_path, BASE_TOML + "layers = = 3\n")
    with pytest.raises(ModelSpecError, match=rf"{re.escape(str(path))}: not valid TOML"):
        load_model(path)


def test_toml_relu_and_explicit_head_dim(tmp_path):
    text = set_key(set_key(BASE_TOML, "ffn", '"relu"'), "head_dim", "64")
    spec = load_model(write_toml(tmp_path, text))
    assert (spec.ffn, spec.head_dim, spec.hidden) == ("relu", 64, 4096)


# ---------------------------------------------------------------------------------------------
# HuggingFace config.json


def test_hf_llama_round_trip(tmp_path):
    toml_spec = load_model("llama-3.1-8b")
    path = write_hf(tmp_path, LLAMA_8B_HF)
    for source in (path, str(path), path.parent):
        hf = load_model(source)
        assert hf.name == "meta-llama/Llama-3.1-8B"
        assert dataclasses.replace(hf, name=toml_spec.name) == toml_spec
    explicit = write_hf(tmp_path, {**LLAMA_8B_HF, "head_dim": 128}, folder="explicit")
    assert dataclasses.replace(load_model(explicit), name=toml_spec.name) == toml_spec


def test_hf_name_falls_back_to_folder(tmp_path):
    cfg = {k: v for k, v in LLAMA_8B_HF.items() if k != "_name_or_path"}
    assert load_model(write_hf(tmp_path, cfg, folder="my-llama")).name == "my-llama"
    other = tmp_path / "qwen.json"
    other.write_text(json.dumps(cfg))
    assert load_model(other).name == "qwen"


def test_hf_defaults_kv_heads_and_head_dim():
    qwen = {
        "hidden_act": "silu",
        "hidden_size": 4096,
        "intermediate_size": 11008,
        "max_position_embeddings": 32768,
        "num_attention_heads": 32,
        "num_hidden_layers": 32,
        "vocab_size": 151936,
    }
    spec = spec_from_hf_config(qwen, name="llm-7b")
    assert spec == load_model("llm-7b")  # kv_heads = heads, head_dim = 4096 // 32
    assert spec_from_hf_config({**qwen, "num_key_value_heads": None}, name="llm-7b") == spec
    relu = spec_from_hf_config({**qwen, "hidden_act": "relu"}, name="r")
    assert (relu.ffn, relu.ffn1_dim) == ("relu", 11008)


def test_hf_explicit_head_dim_may_disagree_with_hidden():
    cfg = {**LLAMA_8B_HF, "hidden_size": 3072, "head_dim": 256, "num_attention_heads": 16}
    spec = spec_from_hf_config(cfg, name="g")
    assert (spec.head_dim, spec.heads * spec.head_dim, spec.hidden) == (256, 4096, 3072)
    assert spec.qkv_dim == (16 + 16) * 256


@pytest.mark.parametrize(
    ("change", "pattern"),
    [
        ({"num_hidden_layers": None}, r"missing key 'num_hidden_layers'"),
        ({"hidden_size": None}, r"missing key 'hidden_size'"),
        ({"intermediate_size": None}, r"missing key 'intermediate_size'"),
        ({"max_position_embeddings": None}, r"missing key 'max_position_embeddings'"),
        ({"hidden_act": None}, r"missing key 'hidden_act'"),
        ({"num_attention_heads": "32"}, r"num_attention_heads = '32': must be a positive int"),
        ({"num_hidden_layers": 0}, r"num_hidden_layers = 0: must be a positive integer"),
        ({"intermediate_size": 1.5}, r"intermediate_size = 1\.5: must be a positive integer"),
        ({"head_dim": True}, r"head_dim = True: must be a positive integer"),
        ({"num_key_value_heads": 5}, r"num_key_value_heads = 5: must divide num_attention_h"),
        ({"hidden_act": "gelu"}, r"hidden_act = 'gelu': unknown activation; allowed: silu"),
        ({"hidden_size": 4100}, r"head_dim is absent and hidden_size = 4100 is not a multi"),
        ({"num_local_experts": 8}, r"num_local_experts = 8: mixture-of-experts"),
    ],
)
def test_hf_errors_name_the_field(tmp_path, change, pattern):
    cfg = {k: v for k, v in {**LLAMA_8B_HF, **change}.items() if v is not None}
    path = write_hf(tmp_path, cfg)
    with pytest.raises(ModelSpecError, match=pattern) as exc:
        load_model(path)
    assert str(exc.value).startswith(str(path))


def test_hf_not_json_or_not_object(tmp_path):
    bad = tmp_path / "config.json"
    bad.write_text("num_hidden_layers = 32\n")
    with pytest.raises(ModelSpecError, match=rf"{re.escape(str(bad))}: not valid JSON"):
        load_model(bad)
    bad.write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(ModelSpecError, match=r"not UTF-8 text \(byte 0xff at line 1, column 1\)"):
        load_model(bad)
    bad.write_text("[1, 2]")
    with pytest.raises(ModelSpecError, match="top level must be a JSON object, got list"):
        load_model(bad)
    with pytest.raises(ModelSpecError, match="no such config file"):
        load_model(tmp_path / "empty-folder-config.json")
    (tmp_path / "folder").mkdir()
    with pytest.raises(ModelSpecError, match="folder: a folder without config.json; give a"):
        load_model(tmp_path / "folder")
    with pytest.raises(ModelSpecError, match="unknown model ''; available: "):
        load_model("")  # not the working directory's config.json


# ---------------------------------------------------------------------------------------------
# Decode-layer operator graph


def by_name(ops: list[DecodeOp]) -> dict[str, list[DecodeOp]]:
    out: dict[str, list[DecodeOp]] = {}
    for op in ops:
        out.setdefault(op.name, []).append(op)
    return out


def test_decode_ops_llm_7b_by_hand():
    spec = load_model("llm-7b")
    lengths = [1000, 3000]
    ops = decode_layer_ops(spec, lengths)
    names = [op.name for op in ops]
    assert names == ["qkv", "qk", "softmax", "sv", "qk", "softmax", "sv", "proj", "ffn1", "ffn2"]
    assert set(names) == set(OP_NAMES)
    g = by_name(ops)
    gemvs = {
        "qkv": (3 * 32 * 128, 4096),
        "proj": (4096, 32 * 128),
        "ffn1": (2 * 11008, 4096),
        "ffn2": (4096, 11008),
    }
    for name, (d_out, d_in) in gemvs.items():
        (op,) = g[name]
        assert (op.kind, op.shape, op.count, op.request) == (
            "gemv",
            {"d_out": d_out, "d_in": d_in},
            2,
            None,
        )
        assert op.flops == 2 * 2 * d_out * d_in
    per_token_macs = sum(op.macs for op in ops if op.kind == "gemv") // 2
    assert per_token_macs == 4096 * 96 * 128 + 4096 * 32 * 128 + 2 * 4096 * 11008 + 4096 * 11008
    assert per_token_macs == 202_375_168 == spec.layer_weight_elements
    for kernel in ("qk", "sv"):
        assert [op.request for op in g[kernel]] == [0, 1]
        for op, t in zip(g[kernel], lengths, strict=True):
            assert (op.kind, op.count) == ("attention", 32)
            assert op.shape == {"tokens": t, "d_h": 128, "gqa_group": 1}
            assert op.macs == 32 * t * 128  # T * head_dim per query head
    for op, t in zip(g["softmax"], lengths, strict=True):
        assert (op.kind, op.shape, op.count, op.macs) == ("epu", {"heads": 32, "tokens": t}, 1, 0)
        assert op.flops == SOFTMAX_FLOPS_PER_SCORE * 32 * t
    total_attention = sum(op.flops for op in ops if op.kind == "attention")
    assert total_attention == 2 * 2 * 32 * 128 * (1000 + 3000)


def test_decode_ops_llama_gqa_by_hand():
    spec = load_model("llama-3.1-8b")
    ops = decode_layer_ops(spec, [5000])
    g = by_name(ops)
    assert g["qkv"][0].shape == {"d_out": (32 + 2 * 8) * 128, "d_in": 4096}
    assert g["qkv"][0].flops == 2 * 6144 * 4096
    assert g["ffn1"][0].shape == {"d_out": 2 * 14336, "d_in": 4096}
    for kernel in ("qk", "sv"):
        (op,) = g[kernel]
        assert op.count == 8  # one kernel per KV head ...
        assert op.shape == {"tokens": 5000, "d_h": 128, "gqa_group": 4}  # ... serving 4 queries
        assert op.macs == 8 * 4 * 5000 * 128 == 32 * 5000 * 128
    assert g["softmax"][0].shape == {"heads": 32, "tokens": 5000}
    per_token = sum(op.macs for op in ops if op.kind == "gemv")
    assert per_token == 4096 * 48 * 128 + 4096 * 32 * 128 + 2 * 4096 * 14336 + 4096 * 14336


def test_decode_ops_batch_scales_gemv_count_only():
    spec = load_model("llm-1.8b")
    one, four = decode_layer_ops(spec, [100]), decode_layer_ops(spec, [100] * 4)
    assert by_name(four)["qkv"][0].count == 4
    assert by_name(four)["qkv"][0].flops == 4 * by_name(one)["qkv"][0].flops
    # llm-1.8b: heads * head_dim = 1024 != hidden = 2048
    assert by_name(one)["qkv"][0].shape == {"d_out": 3072, "d_in": 2048}
    assert by_name(one)["proj"][0].shape == {"d_out": 2048, "d_in": 1024}
    assert len(by_name(four)["qk"]) == 4


@pytest.mark.parametrize(
    ("lengths", "pattern"),
    [
        ([], "at least one request"),
        ([10, 0], r"context_lengths\[1\] = 0: must be a positive integer"),
        ([True], r"context_lengths\[0\] = True: must be a positive integer"),
        ([10.0], r"context_lengths\[0\] = 10\.0: must be a positive integer"),
        ([32769], r"context_lengths\[0\] = 32769: exceeds llm-7b context_window = 32768"),
    ],
)
def test_decode_ops_bad_lengths(lengths, pattern):
    with pytest.raises(ValueError, match=pattern):
        decode_layer_ops(load_model("llm-7b"), lengths)


def test_decode_ops_window_check_can_be_disabled():
    ops = decode_layer_ops(load_model("llm-7b"), [40000], check_window=False)
    assert by_name(ops)["qk"][0].shape["tokens"] == 40000


def test_decode_op_rejects_unknown_name_and_kind():
    with pytest.raises(ValueError, match="name 'attn'"):
        DecodeOp("attn", "gemv", {}, 1, None, 0)
    with pytest.raises(ValueError, match="kind 'gemm'"):
        DecodeOp("qkv", "gemm", {}, 1, None, 0)


# ---------------------------------------------------------------------------------------------
# Kernel mapping


def test_to_kernel_calls(cfg):
    small = ModelSpec("tiny", 1, 8, 2, 64, 96, 32, "swiglu", 4096, 2)
    ops = by_name(decode_layer_ops(small, [48, 80]))
    qkv = to_kernel(ops["qkv"][0])
    assert qkv == KernelCall("gemv", {"d_out": (8 + 4) * 32, "d_in": 64}, 2)
    prog = qkv.compile(cfg)
    assert np.array_equal(prog.commands, compile_gemv(cfg, 384, 64).commands)
    qk = to_kernel(ops["qk"][1])
    assert qk == KernelCall(
        "qk", {"tokens": 80, "d_h": 32, "gqa_group": 4, "mapping": "row-reuse"}, 2
    )
    assert np.array_equal(qk.compile(cfg).commands, compile_qk(cfg, 80, 32, 4).commands)
    sv = to_kernel(ops["sv"][0], mapping="head-serial")
    assert (sv.kind, sv.args["tokens"], sv.args["mapping"]) == ("sv", 48, "head-serial")
    expected = compile_sv(cfg, 48, 32, 4, mapping="head-serial").commands
    assert np.array_equal(sv.compile(cfg).commands, expected)
    assert to_kernel(ops["ffn2"][0]).args == {"d_out": 64, "d_in": 96}


def test_to_kernel_is_lazy(cfg):
    # GQA group 64 exceeds a GBuf half on aim-16ch: mapping succeeds, compiling refuses.
    wide = ModelSpec("wide", 1, 64, 1, 64, 64, 16, "relu", 4096, 2)
    call = to_kernel(by_name(decode_layer_ops(wide, [32]))["qk"][0])
    assert call.args["gqa_group"] == 64
    with pytest.raises(CompileError, match="GQA group 64 does not fit"):
        call.compile(cfg)


def test_to_kernel_refuses_epu_and_bad_mapping():
    ops = by_name(decode_layer_ops(load_model("llm-7b"), [16]))
    with pytest.raises(ValueError, match="runs on the EPU"):
        to_kernel(ops["softmax"][0])
    with pytest.raises(ValueError, match="mapping 'zigzag' is unknown"):
        to_kernel(ops["qk"][0], mapping="zigzag")


def test_embedding_fields_are_validated(tmp_path):
    with pytest.raises(ModelSpecError, match=r"missing key 'vocab_size'"):
        load_model(write_toml(tmp_path, drop_key(BASE_TOML, "vocab_size")))
    bad = set_key(BASE_TOML, "tied_embeddings", "1")
    with pytest.raises(ModelSpecError, match=r"tied_embeddings = 1: must be true or false"):
        load_model(write_toml(tmp_path, bad))
    bad = set_key(BASE_TOML, "vocab_size", "-5")
    with pytest.raises(ModelSpecError, match=r"vocab_size = -5: must be a non-negative integer"):
        load_model(write_toml(tmp_path, bad))
    no_vocab = {k: v for k, v in LLAMA_8B_HF.items() if k != "vocab_size"}
    with pytest.raises(ModelSpecError, match=r"missing key 'vocab_size' \(required\)"):
        spec_from_hf_config(no_vocab, name="x")
    with pytest.raises(ModelSpecError, match=r"tie_word_embeddings = 'yes': must be true or"):
        spec_from_hf_config({**LLAMA_8B_HF, "tie_word_embeddings": "yes"}, name="x")
    tied = spec_from_hf_config({**LLAMA_8B_HF, "tie_word_embeddings": True}, name="x")
    assert tied.embedding_bytes == 128256 * 4096 * 2
