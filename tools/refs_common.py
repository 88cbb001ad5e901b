"""What the transformers reference generators (tools/make_*_ref.py) share:
BF16-exact random weights, float32 files, and the greedy run with its checks."""
import struct

import torch


def bf16_exact(t):
    """What bf16 can hold, so the checkpoint and the reference agree exactly."""
    return t.to(torch.bfloat16).to(torch.float32)


def randomize(model, seed):
    """Spread every parameter around its identity, then round it to BF16."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("A_log"):
                p.copy_(torch.log(torch.empty(p.shape).uniform_(1.0, 8.0, generator=g)))
            elif name.endswith("dt_bias"):
                p.copy_(torch.empty(p.shape).uniform_(-1.0, 1.0, generator=g))
            elif "norm" in name and p.dim() == 1:
                ident = 0.0 if float(p.detach().abs().mean()) < 1e-6 else 1.0
                p.copy_(ident + 0.2 * torch.randn(p.shape, generator=g))
            elif p.dim() >= 2:
                p.copy_(torch.randn(p.shape, generator=g) / p.shape[-1] ** 0.5)
            else:
                p.copy_(0.1 * torch.randn(p.shape, generator=g))
            p.copy_(bf16_exact(p))


def write_f32(path, t):
    """T as little-endian float32, flattened."""
    t = t.detach().to(torch.float32).contiguous().cpu().flatten().tolist()
    with open(path, "wb") as f:
        f.write(struct.pack(f"<{len(t)}f", *t))


def greedy_reference(model, ids, n_gen):
    """The whole-prompt forward (hidden states kept), then n_gen greedy tokens
    through the cache with each step's top-2 margin, and whether the same
    tokens come from one forward without the cache.
    Returns (full forward output, generated ids, margins, nocache agrees)."""
    with torch.no_grad():
        full = model(input_ids=ids, output_hidden_states=True, use_cache=False)
        gen, margins = [], []
        o = model(input_ids=ids, use_cache=True)
        past, nxt = o.past_key_values, o.logits[0, -1]
        for _ in range(n_gen):
            top = torch.topk(nxt, 2)
            tok = int(top.indices[0])
            gen.append(tok)
            margins.append(float(top.values[0] - top.values[1]))
            o = model(input_ids=torch.tensor([[tok]]), past_key_values=past, use_cache=True)
            past, nxt = o.past_key_values, o.logits[0, -1]
        seq = torch.cat([ids, torch.tensor([gen])], dim=1)
        nocache = model(input_ids=seq, use_cache=False).logits[0, ids.shape[1] - 1:-1].argmax(-1).tolist()
    return full, gen, margins, nocache == gen
