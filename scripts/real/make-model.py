#!/usr/bin/env python3
# Writes a tiny Qwen2-architecture GGUF model with random weights for `npm run test:real`.
# Its tokenizer (vocabulary, merges, special tokens) and chat template are copied from the
# vocab file llama.cpp ships for its own tokenizer tests (models/ggml-vocab-qwen2.gguf), so
# the server tokenizes and templates exactly as it would for a real Qwen2 model; only the
# weights are noise. Written with llama.cpp's own gguf-py; nothing is downloaded.
#
# usage: make-model.py LLAMA_CPP_SOURCE_DIR OUT.gguf

import sys
from pathlib import Path

src = Path(sys.argv[1])
out = Path(sys.argv[2])
sys.path.insert(0, str(src / 'gguf-py'))

import numpy as np  # noqa: E402
import gguf  # noqa: E402

ARCH = 'qwen2'
# Small enough to generate hundreds of tokens a second on one core, big enough to be a real
# transformer: 2 layers, 4 query heads sharing 2 KV heads (GQA), as Qwen2 does.
N_EMBD, N_HEAD, N_HEAD_KV, N_FF, N_LAYER = 64, 4, 2, 128, 2
# The training context; the server is started with a smaller --ctx-size, and discovery must
# report the served one (/props n_ctx), not this.
N_CTX_TRAIN = 8192

vocab = gguf.GGUFReader(src / 'models' / 'ggml-vocab-qwen2.gguf')
n_vocab = len(vocab.fields['tokenizer.ggml.tokens'].contents())

w = gguf.GGUFWriter(out, ARCH)
w.add_name('tollgate-tiny-qwen2')
w.add_context_length(N_CTX_TRAIN)
w.add_embedding_length(N_EMBD)
w.add_block_count(N_LAYER)
w.add_feed_forward_length(N_FF)
w.add_head_count(N_HEAD)
w.add_head_count_kv(N_HEAD_KV)
w.add_rope_freq_base(1000000.0)
w.add_layer_norm_rms_eps(1e-6)
w.add_file_type(gguf.LlamaFileType.ALL_F32)

# Qwen2.5's fill-in-the-middle tokens, at the ids Qwen2.5 gives them: the vocab file is Qwen2's,
# which pads those ids ([PAD151659]...). With them llama.cpp's /infill serves this model as it
# serves Qwen2.5-Coder ([FIM_PRE]prefix[FIM_SUF]suffix[FIM_MID]). Only these three: the FIM
# pad, repo and file-separator tokens would be end-of-generation tokens, which would change
# how every other answer ends.
FIM_TOKENS = {151659: '<|fim_prefix|>', 151660: '<|fim_middle|>', 151661: '<|fim_suffix|>'}

# Every tokenizer.* key, chat template included, exactly as the vocab file has it, but for
# the FIM tokens' names and types (control).
for key, field in vocab.fields.items():
    if not key.startswith('tokenizer.'):
        continue
    main = field.types[0]
    sub = field.types[-1] if main == gguf.GGUFValueType.ARRAY else None
    value = field.contents()
    if key == 'tokenizer.ggml.tokens':
        value = [FIM_TOKENS.get(i, tok) for i, tok in enumerate(value)]
    elif key == 'tokenizer.ggml.token_type':
        value = [int(gguf.TokenType.CONTROL) if i in FIM_TOKENS else ty for i, ty in enumerate(value)]
    w.add_key_value(key, value, main, sub)

# A fixed seed: the same file on every machine, so answers are reproducible run to run.
rng = np.random.default_rng(20261123)


def t(*shape, scale=0.5):
    return (rng.standard_normal(shape) * scale).astype(np.float32)


head = N_EMBD // N_HEAD
kv = head * N_HEAD_KV
# numpy shapes are the reverse of ggml's: token_embd is {n_embd, n_vocab} in ggml terms.
w.add_tensor('token_embd.weight', t(n_vocab, N_EMBD))
w.add_tensor('output_norm.weight', np.ones(N_EMBD, dtype=np.float32))
for i in range(N_LAYER):
    p = f'blk.{i}.'
    w.add_tensor(p + 'attn_norm.weight', np.ones(N_EMBD, dtype=np.float32))
    w.add_tensor(p + 'attn_q.weight', t(N_EMBD, N_EMBD, scale=0.2))
    w.add_tensor(p + 'attn_q.bias', t(N_EMBD, scale=0.1))
    w.add_tensor(p + 'attn_k.weight', t(kv, N_EMBD, scale=0.2))
    w.add_tensor(p + 'attn_k.bias', t(kv, scale=0.1))
    w.add_tensor(p + 'attn_v.weight', t(kv, N_EMBD, scale=0.2))
    w.add_tensor(p + 'attn_v.bias', t(kv, scale=0.1))
    w.add_tensor(p + 'attn_output.weight', t(N_EMBD, N_EMBD, scale=0.2))
    w.add_tensor(p + 'ffn_norm.weight', np.ones(N_EMBD, dtype=np.float32))
    w.add_tensor(p + 'ffn_gate.weight', t(N_FF, N_EMBD, scale=0.2))
    w.add_tensor(p + 'ffn_up.weight', t(N_FF, N_EMBD, scale=0.2))
    w.add_tensor(p + 'ffn_down.weight', t(N_EMBD, N_FF, scale=0.2))

w.write_header_to_file()
w.write_kv_data_to_file()
w.write_tensors_to_file()
w.close()
print(f'wrote {out} ({n_vocab} tokens, {N_LAYER} layers, n_embd {N_EMBD})')
