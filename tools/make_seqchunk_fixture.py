#!/usr/bin/python3
"""PyTorch reference for sequence chunks (train --seq-chunks; tests/test_seqchunk.c reads it).

What it is: for a few model shapes drawn at random (fixed seed), the loss and every parameter
gradient of one batch from tools/make_fixtures.py's plain-torch GPT-2, plus a float64 check, in
torch, that the chunked computation (each chunk's queries over the keys and values of every
position up to its end, positions offset by the chunk's start) gives the same gradients. What it
is not: part of the test suite (the C test needs no Python). Run with Debian's PyTorch:
  /usr/bin/python3 tools/make_seqchunk_fixture.py [--out tests/fixtures/seqchunk]
Deterministic: a second run rewrites the same bytes.

FORMAT (tests/test_seqchunk.c depends on it): one folder per case, case-<i>/:
  config.json        the model's config (n_layer, n_head, n_embd, vocab_size, n_positions)
  case.json          {"B", "T", "K"}: batch, sequence length, chunks (K divides T)
  model.safetensors  every parameter, Hugging Face names without "transformer.", F32
  expected.safetensors  "tokens", "targets" (B, T) as F32 (exact small integers), "loss" [],
                     "grad/<name>" for every parameter (wte's: embedding + tied head)
"""
import argparse
import os
import random
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_fixtures as mf  # noqa: E402

N_CASES = 3
SEED = 2406
CHUNK_TOL = 1e-10   # float64, chunked against whole: the same sums in another order


def draw_case(rng, i):
    """A random shape: heads, head size, layers, vocabulary, K and T = K * Tc."""
    nh, hs = rng.choice([1, 2, 4]), rng.choice([4, 8])
    K, Tc = rng.choice([2, 3, 4]), rng.randint(1, 6)
    cfg = {"n_layer": rng.randint(1, 3), "n_head": nh, "n_embd": nh * hs,
           "vocab_size": rng.randint(11, 70), "n_positions": K * Tc + rng.randint(0, 5)}
    return {"cfg": cfg, "B": rng.randint(1, 3), "T": K * Tc, "K": K, "seed": SEED + i}


def layer_block(p, h, x, nh, kv_past):
    """One block on a chunk x (B, Tc, C) whose earlier positions' keys and values are kv_past
    (a pair of (B, NH, t0, hs), or None); returns the output and the keys and values so far."""
    B, Tc, C = x.shape
    hd = C // nh
    a = mf.layernorm(x, p[h + "ln_1.weight"], p[h + "ln_1.bias"])
    qkv = a @ p[h + "attn.c_attn.weight"] + p[h + "attn.c_attn.bias"]
    q, k, v = (t.view(B, Tc, nh, hd).transpose(1, 2) for t in qkv.split(C, dim=2))
    if kv_past is not None:
        k, v = torch.cat([kv_past[0], k], 2), torch.cat([kv_past[1], v], 2)
    Tk, t0 = k.shape[2], k.shape[2] - Tc
    att = (q @ k.transpose(-2, -1)) / hd ** 0.5
    mask = torch.arange(Tk)[None, :] <= (t0 + torch.arange(Tc))[:, None]
    att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
    y = (att @ v).transpose(1, 2).reshape(B, Tc, C)
    x = x + y @ p[h + "attn.c_proj.weight"] + p[h + "attn.c_proj.bias"]
    a = mf.layernorm(x, p[h + "ln_2.weight"], p[h + "ln_2.bias"])
    a = mf.gelu_tanh(a @ p[h + "mlp.c_fc.weight"] + p[h + "mlp.c_fc.bias"])
    return x + a @ p[h + "mlp.c_proj.weight"] + p[h + "mlp.c_proj.bias"], (k, v)


def chunked_loss(p, cfg, idx, tgt, K):
    """The mean loss computed chunk by chunk, each chunk's attention over the kept keys/values."""
    B, T = idx.shape
    Tc, kv, total = T // K, [None] * cfg["n_layer"], 0
    for c in range(K):
        ids = idx[:, c * Tc:(c + 1) * Tc]
        x = p["wte.weight"][ids] + p["wpe.weight"][c * Tc:(c + 1) * Tc]
        for i in range(cfg["n_layer"]):
            x, kv[i] = layer_block(p, "h.%d." % i, x, cfg["n_head"], kv[i])
        x = mf.layernorm(x, p["ln_f.weight"], p["ln_f.bias"])
        logits = x @ p["wte.weight"].t()
        total = total + torch.nn.functional.cross_entropy(
            logits.reshape(-1, logits.shape[-1]), tgt[:, c * Tc:(c + 1) * Tc].reshape(-1))
    return total / K


def grads(params, fn, dtype):
    p = {k: v.to(dtype).clone().requires_grad_(True) for k, v in params.items()}
    loss = fn(p)
    loss.backward()
    return loss.detach(), {k: v.grad.detach() for k, v in p.items()}


def make_case(case, out, i):
    cfg, B, T, K = case["cfg"], case["B"], case["T"], case["K"]
    params = mf.init_params(cfg, case["seed"])
    g = torch.Generator().manual_seed(case["seed"])
    idx = torch.randint(0, cfg["vocab_size"], (B, T), generator=g)
    tgt = torch.randint(0, cfg["vocab_size"], (B, T), generator=g)
    loss, gr = grads(params, lambda p: mf.forward(p, cfg, idx, tgt)[1], torch.float32)
    l64, g64 = grads(params, lambda p: mf.forward(p, cfg, idx, tgt)[1], torch.float64)
    c64, gc64 = grads(params, lambda p: chunked_loss(p, cfg, idx, tgt, K), torch.float64)
    worst = max(mf.relerr(gc64[k], g64[k]) for k in g64)
    if abs(float(c64 - l64)) > CHUNK_TOL or worst > CHUNK_TOL:
        sys.exit("case %d: chunked torch differs from whole (loss %g, grads %g)"
                 % (i, abs(float(c64 - l64)), worst))
    for k in gr:
        mf.check_close("case %d grad/%s" % (i, k), gr[k], g64[k])
    d = os.path.join(out, "case-%d" % i)
    os.makedirs(d, exist_ok=True)
    mf.json_write(os.path.join(d, "config.json"), dict(cfg, model_type="gpt2"))
    mf.json_write(os.path.join(d, "case.json"), {"B": B, "T": T, "K": K})
    mf.st_write(os.path.join(d, "model.safetensors"),
                [(n, params[n]) for n, _ in mf.param_shapes(cfg)])
    exp = [("tokens", idx.float()), ("targets", tgt.float()), ("loss", loss)]
    exp += [("grad/" + n, gr[n]) for n, _ in mf.param_shapes(cfg)]
    mf.st_write(os.path.join(d, "expected.safetensors"), exp)
    return "case-%d: %s B %d T %d K %d, chunked vs whole (float64) %.1e" % (
        i, cfg, B, T, K, worst)


def main():
    ap = argparse.ArgumentParser(description="write the sequence-chunk PyTorch fixture")
    ap.add_argument("--out", default="tests/fixtures/seqchunk")
    args = ap.parse_args()
    torch.set_num_threads(1)
    rng = random.Random(SEED)
    for i in range(N_CASES):
        print(make_case(draw_case(rng, i), args.out, i))


if __name__ == "__main__":
    main()
