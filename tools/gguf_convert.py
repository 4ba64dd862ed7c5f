#!/usr/bin/env python3
"""Converts a Qwen3-VL model directory (transformers' safetensors) into the two GGUF files llama.cpp uses,
laid out as llama.cpp's converter writes them (convert_hf_to_gguf.py, conversion/qwen3vl.py):

  OUT/<name>-<type>.gguf         the text model, architecture "qwen3vl" (blk.N.attn_q.weight, ...), with the
                                 gpt2-style tokenizer metadata and the chat template
  OUT/mmproj-<name>-<type>.gguf  the vision tower, architecture "clip", projector "qwen3vl_merger"
                                 (v.blk.N.attn_qkv.weight, v.deepstack.<layer>.fc1.weight, mm.0.weight, ...)

As llama.cpp does: bf16 tensors go through float32; 1-D tensors, norms and biases stay F32; the position
embedding stays F32; the Conv3d patch embedding is split into its two time slices (v.patch_embd.weight and
v.patch_embd.weight.1), F16 for --outtype f16 and F32 otherwise; everything else takes --outtype (f32, f16,
bf16, q8_0, q4_0). qvl loads the result (`--model OUT/<name>-<type>.gguf`), and the tests compare it with the
safetensors model. Needs numpy and the `gguf` package (pip install gguf).

Usage: tools/gguf_convert.py MODEL_DIR OUT_DIR [--outtype q8_0] [--name NAME]
"""
import argparse
import json
import struct
from pathlib import Path

import gguf
import numpy as np
from gguf import GGMLQuantizationType as Q

OUTTYPES = {"f32": Q.F32, "f16": Q.F16, "bf16": Q.BF16, "q8_0": Q.Q8_0, "q4_0": Q.Q4_0}
FILE_TYPES = {"f32": 0, "f16": 1, "bf16": 32, "q8_0": 7, "q4_0": 2}  # llama_ftype


def read_safetensors(model_dir):
    """name -> float32 numpy array, for every tensor of every shard (bf16/f16/f32)."""
    out = {}
    for path in sorted(Path(model_dir).glob("*.safetensors")):
        data = path.read_bytes()
        n = struct.unpack("<Q", data[:8])[0]
        header = json.loads(data[8:8 + n])
        base = 8 + n
        for name, info in header.items():
            if name == "__metadata__":
                continue
            a, b = info["data_offsets"]
            raw = np.frombuffer(data, dtype=np.uint8, count=b - a, offset=base + a)
            dt = info["dtype"]
            if dt == "BF16":
                arr = (raw.view("<u2").astype(np.uint32) << 16).view(np.float32)
            elif dt == "F16":
                arr = raw.view("<f2").astype(np.float32)
            elif dt == "F32":
                arr = raw.view("<f4").copy()
            else:
                raise SystemExit(f"{path}: tensor {name} has dtype {dt}; convert a bf16/f16/f32 checkpoint")
            out[name] = arr.reshape(info["shape"])
    return out


def encode(arr, qtype):
    """(data, raw_dtype) for GGUFWriter.add_tensor: float arrays as they are, quantized ones as block bytes."""
    if qtype == Q.F32:
        return arr.astype(np.float32), None
    if qtype == Q.F16:
        return arr.astype(np.float16), None
    return gguf.quants.quantize(arr.astype(np.float32), qtype), qtype


def add(writer, name, arr, qtype):
    if qtype in (Q.Q8_0, Q.Q4_0) and arr.shape[-1] % 32 != 0:
        qtype = Q.F16  # llama.cpp falls back to F16 where a row is not whole blocks
    data, raw = encode(arr, qtype)
    if raw is None:
        writer.add_tensor(name, data)
    else:
        writer.add_tensor(name, data, raw_shape=data.shape, raw_dtype=raw)


def tensor_type(name, arr, outtype):
    if arr.ndim <= 1 or name.endswith("_norm.weight") or not name.endswith(".weight"):
        return Q.F32
    return OUTTYPES[outtype]


def text_model(model_dir, tensors, out_path, outtype, name):
    cfg = json.loads((Path(model_dir) / "config.json").read_text())
    tc = cfg["text_config"]
    w = gguf.GGUFWriter(str(out_path), "qwen3vl")
    w.add_type(gguf.GGUFType.MODEL)
    w.add_name(name)
    w.add_block_count(tc["num_hidden_layers"])
    w.add_context_length(tc["max_position_embeddings"])
    w.add_embedding_length(tc["hidden_size"])
    w.add_feed_forward_length(tc["intermediate_size"])
    w.add_head_count(tc["num_attention_heads"])
    w.add_head_count_kv(tc["num_key_value_heads"])
    rope = tc.get("rope_parameters", tc.get("rope_scaling", {}))
    sections = list(rope["mrope_section"]) + [0] * (4 - len(rope["mrope_section"]))
    w.add_rope_dimension_sections(sections[:4])
    w.add_rope_freq_base(tc["rope_theta"])
    w.add_layer_norm_rms_eps(tc["rms_norm_eps"])
    w.add_key_length(tc["head_dim"])
    w.add_value_length(tc["head_dim"])
    w.add_file_type(FILE_TYPES[outtype])
    w.add_uint32("qwen3vl.n_deepstack_layers", len(cfg["vision_config"]["deepstack_visual_indexes"]))
    # The tokenizer, as llama.cpp's gpt2-style vocabulary (pre-tokenizer "qwen2").
    tok = json.loads((Path(model_dir) / "tokenizer.json").read_text())
    vocab = dict(tok["model"]["vocab"])
    added = {t["content"]: t for t in tok.get("added_tokens", [])}
    for t in added.values():
        vocab[t["content"]] = t["id"]
    n_vocab = max(tc["vocab_size"], max(vocab.values()) + 1)
    by_id = {i: s for s, i in vocab.items()}
    tokens, types = [], []
    for i in range(n_vocab):
        if i in by_id:
            s = by_id[i]
            tokens.append(s)
            types.append(gguf.TokenType.CONTROL if added.get(s, {}).get("special") else
                         gguf.TokenType.USER_DEFINED if s in added else gguf.TokenType.NORMAL)
        else:
            tokens.append(f"[PAD{i}]")
            types.append(gguf.TokenType.UNUSED)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("qwen2")
    w.add_token_list(tokens)
    w.add_token_types(types)
    merges = tok["model"]["merges"]
    w.add_token_merges([m if isinstance(m, str) else " ".join(m) for m in merges])
    w.add_eos_token_id(vocab["<|im_end|>"])
    w.add_pad_token_id(vocab["<|endoftext|>"])
    w.add_bos_token_id(vocab["<|endoftext|>"])
    w.add_add_bos_token(False)
    template_file = Path(model_dir) / "chat_template.json"
    if template_file.exists():
        w.add_chat_template(json.loads(template_file.read_text())["chat_template"])

    names = {"input_layernorm": "attn_norm", "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k",
             "self_attn.v_proj": "attn_v", "self_attn.o_proj": "attn_output", "self_attn.q_norm": "attn_q_norm",
             "self_attn.k_norm": "attn_k_norm", "post_attention_layernorm": "ffn_norm", "mlp.gate_proj": "ffn_gate",
             "mlp.up_proj": "ffn_up", "mlp.down_proj": "ffn_down"}
    for hf, arr in tensors.items():
        if not hf.startswith("model.language_model.") and hf != "lm_head.weight":
            continue
        if hf == "model.language_model.embed_tokens.weight":
            g = "token_embd.weight"
        elif hf == "model.language_model.norm.weight":
            g = "output_norm.weight"
        elif hf == "lm_head.weight":
            g = "output.weight"
        else:
            rest = hf[len("model.language_model.layers."):]
            layer, part = rest.split(".", 1)
            part = part[: -len(".weight")]
            g = f"blk.{layer}.{names[part]}.weight"
        add(w, g, arr, tensor_type(g, arr, outtype))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def mmproj(model_dir, tensors, out_path, outtype, name):
    cfg = json.loads((Path(model_dir) / "config.json").read_text())
    vc, tc = cfg["vision_config"], cfg["text_config"]
    pre = json.loads((Path(model_dir) / "preprocessor_config.json").read_text())
    w = gguf.GGUFWriter(str(out_path), "clip")
    w.add_type(gguf.GGUFType.MMPROJ)
    w.add_name(name)
    w.add_file_type(FILE_TYPES[outtype])
    w.add_bool("clip.has_vision_encoder", True)
    w.add_uint32("clip.vision.projection_dim", tc["hidden_size"])
    w.add_uint32("clip.vision.image_size", int((vc.get("num_position_embeddings", 2304) ** 0.5) * vc["patch_size"]))
    w.add_uint32("clip.vision.patch_size", vc["patch_size"])
    w.add_uint32("clip.vision.embedding_length", vc["hidden_size"])
    w.add_uint32("clip.vision.feed_forward_length", vc["intermediate_size"])
    w.add_uint32("clip.vision.block_count", vc["depth"])
    w.add_uint32("clip.vision.attention.head_count", vc["num_heads"])
    w.add_array("clip.vision.image_mean", [float(x) for x in pre["image_mean"]])
    w.add_array("clip.vision.image_std", [float(x) for x in pre["image_std"]])
    w.add_string("clip.projector_type", "qwen3vl_merger")
    w.add_bool("clip.use_gelu", True)
    w.add_uint32("clip.vision.spatial_merge_size", vc["spatial_merge_size"])
    w.add_float32("clip.vision.attention.layer_norm_epsilon", tc.get("rms_norm_eps", 1e-6))
    deepstack = vc["deepstack_visual_indexes"]
    w.add_array("clip.vision.is_deepstack_layers", [i in deepstack for i in range(vc["depth"])])

    blocks = {"attn.qkv": "attn_qkv", "attn.proj": "attn_out", "norm1": "ln1", "norm2": "ln2",
              "mlp.linear_fc1": "ffn_up", "mlp.linear_fc2": "ffn_down"}
    for hf, arr in tensors.items():
        if not hf.startswith("model.visual."):
            continue
        v = hf[len("model.visual."):]
        if v == "patch_embed.proj.weight":
            qtype = Q.F16 if outtype == "f16" else Q.F32
            add(w, "v.patch_embd.weight", np.ascontiguousarray(arr[:, :, 0]), qtype)
            add(w, "v.patch_embd.weight.1", np.ascontiguousarray(arr[:, :, 1]), qtype)
            continue
        if v == "patch_embed.proj.bias":
            g = "v.patch_embd.bias"
        elif v == "pos_embed.weight":
            add(w, "v.position_embd.weight", arr, Q.F32)
            continue
        elif v.startswith("blocks."):
            _, layer, rest = v.split(".", 2)
            part, kind = rest.rsplit(".", 1)
            g = f"v.blk.{layer}.{blocks[part]}.{kind}"
        elif v.startswith("merger."):
            part, kind = v[len("merger."):].rsplit(".", 1)
            g = {"norm": "v.post_ln", "linear_fc1": "mm.0", "linear_fc2": "mm.2"}[part] + "." + kind
        elif v.startswith("deepstack_merger_list."):
            _, k, rest = v.split(".", 2)
            part, kind = rest.rsplit(".", 1)
            g = f"v.deepstack.{deepstack[int(k)]}.{ {'norm': 'norm', 'linear_fc1': 'fc1', 'linear_fc2': 'fc2'}[part] }.{kind}"
        else:
            raise SystemExit(f"unexpected vision tensor {hf}")
        add(w, g, arr, tensor_type(g, arr, outtype))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model_dir")
    ap.add_argument("out_dir")
    ap.add_argument("--outtype", choices=sorted(OUTTYPES), default="q8_0")
    ap.add_argument("--name", default=None)
    a = ap.parse_args()
    name = a.name or Path(a.model_dir).resolve().name
    out = Path(a.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tensors = read_safetensors(a.model_dir)
    text_model(a.model_dir, tensors, out / f"{name}-{a.outtype}.gguf", a.outtype, name)
    mmproj(a.model_dir, tensors, out / f"mmproj-{name}-{a.outtype}.gguf", a.outtype, name)
    print(f"wrote {out / (name + '-' + a.outtype + '.gguf')} and its mmproj")


if __name__ == "__main__":
    main()
