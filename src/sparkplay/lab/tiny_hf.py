"""A tiny random llama model in the Hugging Face layout, for the lab's `lab-vllm` recipe.

vLLM's CPU build loads it as it would any checkpoint: config.json (LlamaForCausalLM), one
model.safetensors, tokenizer.json with a chat template in tokenizer_config.json, no hub. The vocabulary
is lab-tiny's (the 256 byte tokens and a few printable characters: tiny_gguf), so both lab models count
tokens alike. Weights are random but seeded: the same bytes every time. Two layers, hidden 128, 4 query
heads over 2 KV heads (grouped-query attention, so TP=2 splits the KV heads one per rank).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from sparkplay.lab import tiny_gguf

LAYERS = 2
HIDDEN = 128
HEADS = 4
KV_HEADS = 2
FFN = 256
CONTEXT = 512
SEED = 20261202
FILES = ("config.json", "generation_config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json")


def config(vocab: int) -> dict[str, object]:
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": HIDDEN,
        "intermediate_size": FFN,
        "num_hidden_layers": LAYERS,
        "num_attention_heads": HEADS,
        "num_key_value_heads": KV_HEADS,
        "head_dim": HIDDEN // HEADS,
        "hidden_act": "silu",
        "max_position_embeddings": CONTEXT,
        "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0,
        "tie_word_embeddings": False,
        "vocab_size": vocab,
        "bos_token_id": 1,
        "eos_token_id": 2,
        "torch_dtype": "float32",
    }


def tensors(vocab: int) -> dict[str, np.ndarray]:
    """Llama's tensor names and shapes (as transformers writes them), seeded random values."""
    rng = np.random.default_rng(SEED)

    def weights(*shape: int) -> np.ndarray:
        return (rng.standard_normal(shape) / np.sqrt(shape[-1])).astype(np.float32)

    head = HIDDEN // HEADS
    out = {"model.embed_tokens.weight": weights(vocab, HIDDEN)}
    for layer in range(LAYERS):
        prefix = f"model.layers.{layer}"
        out |= {
            f"{prefix}.input_layernorm.weight": np.ones(HIDDEN, np.float32),
            f"{prefix}.post_attention_layernorm.weight": np.ones(HIDDEN, np.float32),
            f"{prefix}.self_attn.q_proj.weight": weights(HEADS * head, HIDDEN),
            f"{prefix}.self_attn.k_proj.weight": weights(KV_HEADS * head, HIDDEN),
            f"{prefix}.self_attn.v_proj.weight": weights(KV_HEADS * head, HIDDEN),
            f"{prefix}.self_attn.o_proj.weight": weights(HIDDEN, HEADS * head),
            f"{prefix}.mlp.gate_proj.weight": weights(FFN, HIDDEN),
            f"{prefix}.mlp.up_proj.weight": weights(FFN, HIDDEN),
            f"{prefix}.mlp.down_proj.weight": weights(HIDDEN, FFN),
        }
    out["model.norm.weight"] = np.ones(HIDDEN, np.float32)
    out["lm_head.weight"] = weights(vocab, HIDDEN)
    _, _, types = tiny_gguf.vocabulary()
    out["lm_head.weight"][[i for i, kind in enumerate(types) if kind != tiny_gguf.NORMAL]] = 0.0  # readable output
    return out


def write(folder: Path) -> Path:
    """Write the checkpoint's files into `folder`; return it."""
    from safetensors.numpy import save_file  # late: only the lab needs it

    tokens, _, _ = tiny_gguf.vocabulary()
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config(len(tokens)), indent=1) + "\n")
    generation = {"bos_token_id": 1, "eos_token_id": 2, "do_sample": False}
    (folder / "generation_config.json").write_text(json.dumps(generation, indent=1) + "\n")
    save_file(tensors(len(tokens)), str(folder / "model.safetensors"), metadata={"format": "pt"})
    (folder / "tokenizer.json").write_text(tiny_gguf.tokenizer_json())
    tokenizer_config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": "<s>",
        "eos_token": "</s>",
        "unk_token": "<unk>",
        "model_max_length": CONTEXT,
        "add_bos_token": True,
        "chat_template": tiny_gguf.CHATML,
    }
    (folder / "tokenizer_config.json").write_text(json.dumps(tokenizer_config, indent=1) + "\n")
    for name in FILES:  # safetensors writes 0600; a checkpoint is read by the engine's own user
        (folder / name).chmod(0o644)
    return folder
