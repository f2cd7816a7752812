"""Seeds for the fuzz targets (fuzz/seeds/TARGET/): small valid files of each format, written by
the reference libraries (numpy for .npy, llama.cpp's gguf-py for GGUF, safetensors' layout by
hand: an 8-byte header length, a JSON header, the data), plus the repo's tiny configs. The
`regression-*` seeds beside them are inputs the fuzzers found, kept as they were (not written here).

    python3 -m venv /tmp/seedenv && /tmp/seedenv/bin/pip install numpy gguf
    /tmp/seedenv/bin/python fuzz/make_seeds.py
"""
import io
import json
import pathlib
import struct

import gguf
import numpy as np

ROOT = pathlib.Path(__file__).resolve().parent
SEEDS = ROOT / "seeds"
FIXTURES = ROOT.parent / "fixtures"


def out(target, name, data):
    d = SEEDS / target
    d.mkdir(parents=True, exist_ok=True)
    (d / name).write_bytes(data)


def safetensors(tensors):
    header, blobs, at = {}, [], 0
    for name, array in tensors.items():
        raw = array.tobytes()
        dtype = {np.float32: "F32", np.int64: "I64", np.float16: "F16"}[array.dtype.type]
        header[name] = {"dtype": dtype, "shape": list(array.shape), "data_offsets": [at, at + len(raw)]}
        blobs.append(raw)
        at += len(raw)
    text = json.dumps(header).encode()
    return struct.pack("<Q", len(text)) + text + b"".join(blobs)


def npy(array, fortran=False):
    f = io.BytesIO()
    np.save(f, np.asfortranarray(array) if fortran else array)
    return f.getvalue()


def tiny_llama_gguf(path, quantized):
    w = gguf.GGUFWriter(str(path), "llama")
    vocab, width, ffn, heads, kv = 32, 32, 64, 2, 1
    w.add_block_count(1)
    w.add_context_length(16)
    w.add_embedding_length(width)
    w.add_feed_forward_length(ffn)
    w.add_head_count(heads)
    w.add_head_count_kv(kv)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_freq_base(10000.0)
    w.add_vocab_size(vocab)
    rng = np.random.default_rng(0)
    head = width // heads
    shapes = {
        "token_embd.weight": (vocab, width),
        "output_norm.weight": (width,),
        "blk.0.attn_norm.weight": (width,),
        "blk.0.ffn_norm.weight": (width,),
        "blk.0.attn_q.weight": (width, width),
        "blk.0.attn_k.weight": (kv * head, width),
        "blk.0.attn_v.weight": (kv * head, width),
        "blk.0.attn_output.weight": (width, width),
        "blk.0.ffn_gate.weight": (ffn, width),
        "blk.0.ffn_up.weight": (ffn, width),
        "blk.0.ffn_down.weight": (width, ffn),
    }
    for name, shape in shapes.items():
        data = rng.standard_normal(shape).astype(np.float32) * 0.1
        if quantized and len(shape) == 2:
            q = gguf.quants.quantize(data, gguf.GGMLQuantizationType.Q8_0)
            w.add_tensor(name, q, raw_dtype=gguf.GGMLQuantizationType.Q8_0)
        else:
            w.add_tensor(name, data)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def main():
    rng = np.random.default_rng(1)
    w = rng.standard_normal((2, 3)).astype(np.float32)
    b = rng.standard_normal(3).astype(np.float32)
    ids = np.array([3, 7], dtype=np.int64)
    out("safetensors", "model.safetensors", safetensors({"w": w, "b": b, "ids": ids}))
    out("safetensors", "half.safetensors", safetensors({"w": w.astype(np.float16)}))
    out("npy", "f32.npy", npy(w))
    out("npy", "f64_fortran.npy", npy(w.astype(np.float64), fortran=True))
    out("npy", "i64.npy", npy(ids))
    out("npy", "i32_big_endian.npy", npy(ids.astype(">i4")))
    out("npy", "scalar.npy", npy(np.float32(1.5)))
    for model in ["tiny-gpt2", "tiny-llama"]:
        out("config", f"{model}.json", (FIXTURES / model / "config.json").read_bytes())
    out("config", "minilm.json", (FIXTURES / "minilm" / "model_files" / "config.json").read_bytes())
    for quantized in [False, True]:
        path = SEEDS / "gguf" / f"tiny-llama-{'q8_0' if quantized else 'f32'}.gguf"
        path.parent.mkdir(parents=True, exist_ok=True)
        tiny_llama_gguf(path, quantized)


if __name__ == "__main__":
    main()
