"""Dequantise a GGUF checkpoint with Hugging Face transformers and save it as a folder Rustral
reads: config.json, model.safetensors (f32, the tied output head left out), the tokenizer and
its chat template. Prints the greedy answer HF gives to one chat question, for comparison.

    python scripts/smollm2_to_safetensors.py GGUF_DIR OUT_DIR
"""
import os
import sys

import torch
from safetensors.torch import save_file
from transformers import AutoModelForCausalLM, AutoTokenizer

src, out = sys.argv[1], sys.argv[2]
name = next(f for f in os.listdir(src) if f.endswith(".gguf"))
tok = AutoTokenizer.from_pretrained(src, gguf_file=name)
model = AutoModelForCausalLM.from_pretrained(src, gguf_file=name, dtype=torch.float32).eval()
os.makedirs(out, exist_ok=True)
weights = {k: v.detach().contiguous().clone() for k, v in model.state_dict().items()}
if model.config.tie_word_embeddings:
    weights.pop("lm_head.weight", None)
save_file(weights, os.path.join(out, "model.safetensors"))
model.config.save_pretrained(out)
tok.save_pretrained(out)
ids = tok.apply_chat_template([{"role": "user", "content": "What is the capital of France?"}],
                              add_generation_prompt=True, return_tensors="pt")
ids = ids if torch.is_tensor(ids) else ids["input_ids"]
with torch.no_grad():
    answer = model.generate(ids, do_sample=False, max_new_tokens=20)[0, ids.shape[1]:]
print("transformers, greedy:", repr(tok.decode(answer)), answer.tolist())
