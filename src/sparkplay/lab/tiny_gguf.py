"""A tiny random llama model in GGUF, for the lab's `lab-tiny` recipe.

llama.cpp serves it on CPU in milliseconds, so the lab can run the whole
flow (mirror, units, ordered start, health, a real completion) with no GPU.
The weights are random but seeded: the same file, byte for byte, every time.

The tokenizer is the smallest one llama.cpp accepts (lab-testbed.md):
`llama` (SentencePiece-style) with <unk>/<s>/</s>, the 256 byte tokens and a
few printable single characters. The output rows of every token that is not
printable are zero, so greedy output stays readable.
"""

from __future__ import annotations

import json
import string
from pathlib import Path

import numpy as np

LAYERS = 4
HIDDEN = 128
HEADS = 4
FFN = 256
CONTEXT = 512
SEED = 20261130
CHATML = (
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n'}}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
# gguf's token types
NORMAL, _UNKNOWN, _CONTROL, _BYTE = 1, 2, 3, 6


def vocabulary() -> tuple[list[str], list[float], list[int]]:
    """Tokens, scores and types: specials, the 256 bytes, then printable characters."""
    tokens = ["<unk>", "<s>", "</s>", *(f"<0x{b:02X}>" for b in range(256))]
    types = [_UNKNOWN, _CONTROL, _CONTROL, *([_BYTE] * 256)]
    printable = ["\u2581", *string.ascii_lowercase, *string.ascii_uppercase, *string.digits, *".,!?'-:;()"]
    tokens += printable
    types += [NORMAL] * len(printable)
    # SentencePiece merges by score: higher first; specials and bytes score 0
    scores = [0.0] * (len(tokens) - len(printable)) + [-float(i) for i in range(len(printable))]
    return tokens, scores, types


def tokenizer_json() -> str:
    """The same vocabulary as a Hugging Face tokenizer.json (Llama's layout: a BPE model with no merges
    and byte fallback, spaces as U+2581), for clients that count tokens, such as llama-benchy."""
    tokens, _, _ = vocabulary()
    specials = [
        {
            "id": i,
            "content": t,
            "single_word": False,
            "lstrip": False,
            "rstrip": False,
            "normalized": False,
            "special": True,
        }
        for i, t in enumerate(tokens[:3])
    ]
    document = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": specials,
        "normalizer": {
            "type": "Sequence",
            "normalizers": [
                {"type": "Prepend", "prepend": "\u2581"},
                {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"},
            ],
        },
        "pre_tokenizer": None,
        "post_processor": None,
        "decoder": {
            "type": "Sequence",
            "decoders": [
                {"type": "Replace", "pattern": {"String": "\u2581"}, "content": " "},
                {"type": "ByteFallback"},
                {"type": "Fuse"},
                {"type": "Strip", "content": " ", "start": 1, "stop": 0},
            ],
        },
        "model": {
            "type": "BPE",
            "dropout": None,
            "unk_token": "<unk>",
            "continuing_subword_prefix": None,
            "end_of_word_suffix": None,
            "fuse_unk": True,
            "byte_fallback": True,
            "ignore_merges": False,
            "vocab": {token: index for index, token in enumerate(tokens)},
            "merges": [],
        },
    }
    return json.dumps(document, ensure_ascii=False, indent=1) + "\n"


# the lab's second model (lab-small, served beside lab-tiny: docs/serving.md "Several models"): another size
SMALL = {"name": "lab-small", "layers": 2, "hidden": 64, "heads": 2, "ffn": 128}


def write(
    path: Path, name: str = "lab-tiny", layers: int = LAYERS, hidden: int = HIDDEN, heads: int = HEADS, ffn: int = FFN
) -> Path:
    """Write the model to `path` (a .gguf file); return it. The defaults are lab-tiny's; SMALL is lab-small's."""
    import gguf  # late: only the lab needs it

    tokens, scores, types = vocabulary()
    rng = np.random.default_rng(SEED)

    def weights(*shape: int) -> np.ndarray:
        return (rng.standard_normal(shape) / np.sqrt(shape[-1])).astype(np.float32)

    path.parent.mkdir(parents=True, exist_ok=True)
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_name(f"sparkplay {name}")
    writer.add_context_length(CONTEXT)
    writer.add_embedding_length(hidden)
    writer.add_block_count(layers)
    writer.add_feed_forward_length(ffn)
    writer.add_head_count(heads)
    writer.add_head_count_kv(heads)
    writer.add_rope_dimension_count(hidden // heads)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_file_type(gguf.LlamaFileType.ALL_F32)
    writer.add_tokenizer_model("llama")
    writer.add_token_list(tokens)
    writer.add_token_scores(scores)
    writer.add_token_types(types)
    writer.add_unk_token_id(0)
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    writer.add_add_bos_token(True)
    writer.add_chat_template(CHATML)

    output = weights(len(tokens), hidden)
    output[[i for i, kind in enumerate(types) if kind != NORMAL]] = 0.0
    writer.add_tensor("token_embd.weight", weights(len(tokens), hidden))
    writer.add_tensor("output_norm.weight", np.ones(hidden, dtype=np.float32))
    writer.add_tensor("output.weight", output)
    for layer in range(layers):
        block = f"blk.{layer}"
        writer.add_tensor(f"{block}.attn_norm.weight", np.ones(hidden, dtype=np.float32))
        for name in ("attn_q", "attn_k", "attn_v", "attn_output"):
            writer.add_tensor(f"{block}.{name}.weight", weights(hidden, hidden))
        writer.add_tensor(f"{block}.ffn_norm.weight", np.ones(hidden, dtype=np.float32))
        writer.add_tensor(f"{block}.ffn_gate.weight", weights(ffn, hidden))
        writer.add_tensor(f"{block}.ffn_up.weight", weights(ffn, hidden))
        writer.add_tensor(f"{block}.ffn_down.weight", weights(hidden, ffn))

    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path
