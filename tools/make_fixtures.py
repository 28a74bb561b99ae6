#!/usr/bin/python3
"""PyTorch reference fixtures for pipetrain's numerics tests (tests/fixtures/gpt-*/).

What it is: a plain-torch reimplementation of Hugging Face's GPT2LMHeadModel forward (no dropout),
torch autograd for the gradients and torch.optim.AdamW for 5 training steps, written to small files
that the C tests read. What it is not: part of the test suite (tests never need Python) nor a
trainer. Run with Debian's PyTorch:  /usr/bin/python3 tools/make_fixtures.py [--out tests/fixtures]
It is deterministic (fixed seeds, one torch thread) and re-runnable: a second run rewrites the same
bytes. It reads every file back with its own reader and checks float32 against a float64 run.

FORMAT CONTRACT (the C tests depend on it; change it only together with them)
------------------------------------------------------------------------------
One directory per case: gpt-tiny, gpt-hf, gpt-odd. Legend: B batch, T time, C n_embd, V vocab_size,
NP n_positions, L n_layer, K steps (5).

config.json   {"n_layer","n_head","n_embd","vocab_size","n_positions","model_type":"gpt2"} plus
              extra Hugging Face keys ("activation_function", "layer_norm_epsilon", ...) that a
              reader must ignore.
model.safetensors
              safetensors: u64 LE header length N, N bytes of JSON (padded with spaces to a multiple
              of 8), then the data section; "data_offsets" [begin, end) are relative to the data
              section. All tensors dtype "F32", little-endian, row-major. Hugging Face GPT-2 layouts:
                wte.weight (V, C)  wpe.weight (NP, C)
                h.{i}.ln_1.weight/bias (C)      h.{i}.attn.c_attn.weight (C, 3C) bias (3C)
                h.{i}.attn.c_proj.weight (C, C) bias (C)
                h.{i}.ln_2.weight/bias (C)      h.{i}.mlp.c_fc.weight (C, 4C) bias (4C)
                h.{i}.mlp.c_proj.weight (4C, C) bias (C)
                ln_f.weight/bias (C)
              Weights are (in, out) (Conv1D: y = x @ W + b); q, k, v are the three C-wide column
              blocks of c_attn, heads are contiguous head_dim-wide slices of each block.
                gpt-tiny: names prefixed "transformer.", no lm_head, no mask buffers, no __metadata__.
                gpt-hf:   names WITHOUT prefix, plus buffers h.{i}.attn.bias (1,1,NP,NP) lower-
                          triangular ones and h.{i}.attn.masked_bias shape [] = -1e4;
                          "__metadata__": {"format": "pt"}.
                gpt-odd:  prefixed names plus "lm_head.weight" (V, C), an exact copy of wte (tied).
tokens.bin    llm.c token file: 256 int32 LE header [20240520, 1, n_tokens, 0, ...], then n_tokens
              uint16 LE tokens in [0, V). n_tokens = 5*B*T + 1 + 3.
case.json     {"B","T","steps":5,"lr","lr_min","warmup","schedule":"cosine","beta1","beta2","eps",
               "weight_decay","grad_clip","clipped":[bool x K],"seed"}; "clipped"[t-1] says whether
              step t's global grad norm exceeded grad_clip.
expected.safetensors (all F32, no prefix in any name)
              "logits" (B, T, V) and "loss" (shape [] scalar) of batch 0 at the initial weights;
              "grad/<name>" for every parameter (same shape as the parameter; "grad/wte.weight" is
              the SUM of the embedding and the tied LM-head gradients; no lm_head, no buffers);
              "train/losses" (K,) loss of step t's batch before its update; "train/grad_norms" (K,)
              global L2 norm of all gradients before clipping; "train/lrs" (K,) lr used at step t;
              "final/<name>" every parameter after K steps.

Semantics the numbers follow
  Model: x = wte[tok] + wpe[pos]; per block x += attn(ln_1(x)); x += mlp(ln_2(x)); LayerNorm
  eps 1e-5 (biased variance); attention softmax(q k^T / sqrt(head_dim)) with a causal mask; GELU
  tanh approximation 0.5x(1+tanh(sqrt(2/pi)(x+0.044715x^3))); logits = ln_f(x) @ wte^T;
  loss = mean cross-entropy over all B*T positions.
  Batch k (0-based) = tokens[k*B*T : k*B*T + B*T + 1]; inputs the first B*T as (B, T), targets
  the last B*T. Step t (1-based) uses batch t-1.
  LR at step t of K: t <= warmup: lr*t/warmup; else p = (t-warmup)/max(1, K-warmup),
  lr_min + 0.5*(lr-lr_min)*(1+cos(pi*p)).
  Each step: zero grads; forward/backward; torch.nn.utils.clip_grad_norm_(params, grad_clip)
  (norm = L2 of all grads; every grad *= min(1, grad_clip/(norm+1e-6))); set lr; AdamW step
  (torch semantics: p *= 1-lr*wd; m,v moments; bias-corrected; p -= lr/bc1 * m/(sqrt(v)/sqrt(bc2)+eps)).
  Decay group: every tensor with dim >= 2 (wte, wpe, all weight matrices); weight_decay 0 for 1-D.
Weights: GPT-2 init (normal 0.02; attn.c_proj and mlp.c_proj weights 0.02/sqrt(2L); biases 0; LN
  weight 1, bias 0), then normal(0, 0.1) noise added to every bias and LN weight/bias and
  normal(0, 0.05) to wpe and normal(0, 0.2) to the q and k columns of every c_attn weight (so
  attention is far from uniform), so that every gradient path carries signal.

Notes for the tests that compare against these numbers
  - grad_clip sits at least 3% away from every step's grad norm, so float rounding cannot flip a
    clipping decision.
  - The k third (columns C..2C) of every c_attn.bias gradient is exactly zero in exact arithmetic
    (softmax ignores a shift shared by all keys): the stored values are float32 rounding noise
    (~1e-11), and AdamW's division by sqrt(v) turns that noise into drift of the final k bias
    (~1e-5 absolute here, float32 vs float64). Compare those entries with an absolute tolerance
    (1e-4 is safe) rather than a relative one.
  - float32 vs float64, normalised as tests/test.h test_tensor_relerr: logits, loss and grads
    agree to ~5e-7, train/losses and grad norms to ~1e-6, final parameters to ~2e-6 (k bias
    aside). The script asserts 1e-5 (3e-5 for final parameters).
"""
import argparse
import json
import math
import os
import struct
import sys

import numpy as np
import torch

STEPS = 5
EXTRA_TOKENS = 3
TOKEN_MAGIC, TOKEN_VERSION, TOKEN_HEADER_INTS = 20240520, 1, 256
# float32 vs float64 of the same computation: a sound reference agrees to this normalised error.
F32_F64_TOL = 1e-5
# Parameters after 5 AdamW steps: Adam divides by sqrt(v), which amplifies the rounding of small or
# sign-changing gradients, so float32 drifts a little further from float64 there.
F32_F64_FINAL_TOL = 3e-5
# grad_clip must sit at least this far (relative) from every step's norm, so that a C run whose
# norms differ by float rounding makes the same clip decisions.
CLIP_MARGIN = 0.03
# Noise added to the q and k columns of c_attn: GPT-2's 0.02 leaves attention almost uniform
# (logits ~0.01), which would hide softmax-backward errors under the v path's gradients.
QK_NOISE = 0.2
# The k third of every c_attn.bias has an exactly zero gradient (softmax ignores a shift shared by
# all keys), so float32 stores rounding noise there and AdamW turns it into drift of this size.
KBIAS_ABS_TOL = 1e-4

HYPER = {"steps": STEPS, "lr": 3e-3, "lr_min": 3e-4, "warmup": 2, "schedule": "cosine",
         "beta1": 0.9, "beta2": 0.95, "eps": 1e-8, "weight_decay": 0.1}

CASES = [
    {"name": "gpt-tiny", "cfg": {"n_layer": 2, "n_head": 3, "n_embd": 24, "vocab_size": 67,
                                 "n_positions": 32},
     "B": 2, "T": 13, "seed": 1001, "prefix": True, "buffers": False, "lm_head": False,
     "metadata": None},
    {"name": "gpt-hf", "cfg": {"n_layer": 1, "n_head": 2, "n_embd": 16, "vocab_size": 256,
                               "n_positions": 16},
     "B": 3, "T": 7, "seed": 1002, "prefix": False, "buffers": True, "lm_head": False,
     "metadata": {"format": "pt"}},
    {"name": "gpt-odd", "cfg": {"n_layer": 3, "n_head": 5, "n_embd": 20, "vocab_size": 97,
                                "n_positions": 24},
     "B": 2, "T": 11, "seed": 1003, "prefix": True, "buffers": False, "lm_head": True,
     "metadata": None},
]


# ---------------------------------------------------------------- parameters

def param_shapes(cfg):
    """Ordered (name, shape) of every parameter, Hugging Face names without "transformer."."""
    C, V, NP = cfg["n_embd"], cfg["vocab_size"], cfg["n_positions"]
    out = [("wte.weight", (V, C)), ("wpe.weight", (NP, C))]
    for i in range(cfg["n_layer"]):
        h = "h.%d." % i
        out += [(h + "ln_1.weight", (C,)), (h + "ln_1.bias", (C,)),
                (h + "attn.c_attn.weight", (C, 3 * C)), (h + "attn.c_attn.bias", (3 * C,)),
                (h + "attn.c_proj.weight", (C, C)), (h + "attn.c_proj.bias", (C,)),
                (h + "ln_2.weight", (C,)), (h + "ln_2.bias", (C,)),
                (h + "mlp.c_fc.weight", (C, 4 * C)), (h + "mlp.c_fc.bias", (4 * C,)),
                (h + "mlp.c_proj.weight", (4 * C, C)), (h + "mlp.c_proj.bias", (C,))]
    out += [("ln_f.weight", (C,)), ("ln_f.bias", (C,))]
    return out


def init_params(cfg, seed):
    """GPT-2 init then noise on biases, LN params and wpe; dict name -> float32 tensor."""
    g = torch.Generator().manual_seed(seed)
    proj_std = 0.02 / math.sqrt(2 * cfg["n_layer"])
    params = {}
    for name, shape in param_shapes(cfg):
        if name.endswith("ln_1.weight") or name.endswith("ln_2.weight") or name == "ln_f.weight":
            t = torch.ones(shape)
        elif len(shape) == 1:
            t = torch.zeros(shape)
        else:
            std = proj_std if name.endswith("c_proj.weight") else 0.02
            t = torch.randn(shape, generator=g) * std
        params[name] = t
    for name, t in params.items():
        if t.dim() == 1:
            t += torch.randn(t.shape, generator=g) * 0.1
    params["wpe.weight"] += torch.randn(params["wpe.weight"].shape, generator=g) * 0.05
    C = cfg["n_embd"]
    for i in range(cfg["n_layer"]):  # q, k columns: attention logits of std ~1, not ~0.01
        w = params["h.%d.attn.c_attn.weight" % i]
        w[:, :2 * C] += torch.randn(C, 2 * C, generator=g) * QK_NOISE
    return {k: v.to(torch.float32).contiguous() for k, v in params.items()}


# ---------------------------------------------------------------- model

def layernorm(x, w, b):
    """x (B, T, C) -> (B, T, C); eps 1e-5, biased variance (torch / HF semantics)."""
    mu = x.mean(-1, keepdim=True)
    var = ((x - mu) ** 2).mean(-1, keepdim=True)
    return (x - mu) / torch.sqrt(var + 1e-5) * w + b


def gelu_tanh(x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def attention(x, p, h, n_head):
    """x (B, T, C) -> (B, T, C): causal multi-head attention of block prefix h."""
    B, T, C = x.shape
    hd = C // n_head
    qkv = x @ p[h + "attn.c_attn.weight"] + p[h + "attn.c_attn.bias"]        # (B, T, 3C)
    q, k, v = qkv.split(C, dim=2)
    q, k, v = (t.view(B, T, n_head, hd).transpose(1, 2) for t in (q, k, v))  # (B, NH, T, hd)
    att = (q @ k.transpose(-2, -1)) / math.sqrt(hd)                        # (B, NH, T, T)
    mask = torch.tril(torch.ones(T, T, dtype=torch.bool))
    att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
    y = (att @ v).transpose(1, 2).reshape(B, T, C)
    return y @ p[h + "attn.c_proj.weight"] + p[h + "attn.c_proj.bias"]


def forward(p, cfg, idx, targets):
    """idx, targets (B, T) int64 -> logits (B, T, V), scalar mean cross-entropy loss."""
    T = idx.shape[1]
    x = p["wte.weight"][idx] + p["wpe.weight"][:T]                          # (B, T, C)
    for i in range(cfg["n_layer"]):
        h = "h.%d." % i
        x = x + attention(layernorm(x, p[h + "ln_1.weight"], p[h + "ln_1.bias"]), p, h,
                          cfg["n_head"])
        a = layernorm(x, p[h + "ln_2.weight"], p[h + "ln_2.bias"])
        a = gelu_tanh(a @ p[h + "mlp.c_fc.weight"] + p[h + "mlp.c_fc.bias"])
        x = x + a @ p[h + "mlp.c_proj.weight"] + p[h + "mlp.c_proj.bias"]
    x = layernorm(x, p["ln_f.weight"], p["ln_f.bias"])
    logits = x @ p["wte.weight"].t()                                        # (B, T, V)
    loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                                             targets.reshape(-1))
    return logits, loss


def batch(tokens, k, B, T):
    """Batch k of the token stream: inputs, targets (B, T) int64."""
    chunk = torch.tensor(tokens[k * B * T: k * B * T + B * T + 1].astype(np.int64))
    return chunk[:-1].view(B, T), chunk[1:].view(B, T)


def lr_at(t, hp):
    """LR of step t (1-based): linear warm-up then cosine to lr_min."""
    if t <= hp["warmup"]:
        return hp["lr"] * t / hp["warmup"]
    prog = (t - hp["warmup"]) / max(1, hp["steps"] - hp["warmup"])
    return hp["lr_min"] + 0.5 * (hp["lr"] - hp["lr_min"]) * (1 + math.cos(math.pi * prog))


def grads_at(params, cfg, tokens, B, T, dtype):
    """Logits, loss and gradients of batch 0 in the given dtype."""
    p = {k: v.to(dtype).clone().requires_grad_(True) for k, v in params.items()}
    idx, tgt = batch(tokens, 0, B, T)
    logits, loss = forward(p, cfg, idx, tgt)
    loss.backward()
    return logits.detach(), loss.detach(), {k: v.grad.detach() for k, v in p.items()}


def train(params, cfg, tokens, B, T, hp, clip, dtype):
    """K AdamW steps; returns losses, grad norms, lrs, final params (dict)."""
    p = {k: torch.nn.Parameter(v.to(dtype).clone()) for k, v in params.items()}
    decay = [v for v in p.values() if v.dim() >= 2]
    no_decay = [v for v in p.values() if v.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": hp["weight_decay"]},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=hp["lr"], betas=(hp["beta1"], hp["beta2"]), eps=hp["eps"])
    losses, norms, lrs = [], [], []
    for t in range(1, hp["steps"] + 1):
        opt.zero_grad(set_to_none=False)
        idx, tgt = batch(tokens, t - 1, B, T)
        _, loss = forward(p, cfg, idx, tgt)
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(list(p.values()), clip)
        lr = lr_at(t, hp)
        for group in opt.param_groups:
            group["lr"] = lr
        opt.step()
        losses.append(loss.item())
        norms.append(norm.item())
        lrs.append(lr)
    return losses, norms, lrs, {k: v.detach() for k, v in p.items()}


def pick_clip(params, cfg, tokens, B, T, hp):
    """A grad_clip that is active on some steps and not on others, far from every norm."""
    _, free_norms, _, _ = train(params, cfg, tokens, B, T, hp, float("inf"), torch.float32)
    s = sorted(free_norms)
    best, best_margin = None, -1.0
    for cand in [0.5 * (a + b) for a, b in zip(s, s[1:])]:
        _, norms, _, _ = train(params, cfg, tokens, B, T, hp, cand, torch.float32)
        flags = [n > cand for n in norms]
        margin = min(abs(n - cand) / cand for n in norms)
        if any(flags) and not all(flags) and margin > best_margin:
            best, best_margin = cand, margin
    if best is None or best_margin < CLIP_MARGIN:
        sys.exit("no grad_clip with mixed clipping and margin %.2f (norms %s)"
                 % (CLIP_MARGIN, free_norms))
    return float(np.float32(best))


# ---------------------------------------------------------------- files

def st_write(path, tensors, metadata=None):
    """Writes safetensors: tensors is a list of (name, array-like), stored as F32 LE."""
    header, blobs, off = {}, [], 0
    if metadata is not None:
        header["__metadata__"] = metadata
    for name, t in tensors:
        a = np.array(t, dtype="<f4", order="C")  # (ascontiguousarray would make [] into [1])
        b = a.tobytes()
        header[name] = {"dtype": "F32", "shape": list(a.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def st_read(path):
    """Reads safetensors (F32 only) -> (dict name -> np array, metadata or None)."""
    with open(path, "rb") as f:
        raw = f.read()
    n = struct.unpack("<Q", raw[:8])[0]
    assert n % 8 == 0, "%s: header length %d not a multiple of 8" % (path, n)
    header = json.loads(raw[8:8 + n].decode())
    data = raw[8 + n:]
    meta = header.pop("__metadata__", None)
    out, end = {}, 0
    for name, e in header.items():
        assert e["dtype"] == "F32", "%s: %s dtype %s" % (path, name, e["dtype"])
        b0, b1 = e["data_offsets"]
        count = int(np.prod(e["shape"])) if e["shape"] else 1
        assert b1 - b0 == 4 * count, "%s: %s size mismatch" % (path, name)
        out[name] = np.frombuffer(data[b0:b1], dtype="<f4").reshape(e["shape"])
        end = max(end, b1)
    assert end == len(data), "%s: data section %d bytes, tensors end at %d" % (path, len(data), end)
    return out, meta


def tokens_write(path, tokens):
    head = np.zeros(TOKEN_HEADER_INTS, dtype="<i4")
    head[:3] = [TOKEN_MAGIC, TOKEN_VERSION, len(tokens)]
    with open(path, "wb") as f:
        f.write(head.tobytes() + np.asarray(tokens, dtype="<u2").tobytes())


def tokens_read(path):
    with open(path, "rb") as f:
        raw = f.read()
    head = np.frombuffer(raw[:4 * TOKEN_HEADER_INTS], dtype="<i4")
    assert head[0] == TOKEN_MAGIC and head[1] == TOKEN_VERSION, "%s: bad header" % path
    toks = np.frombuffer(raw[4 * TOKEN_HEADER_INTS:], dtype="<u2")
    assert len(toks) == head[2], "%s: %d tokens, header says %d" % (path, len(toks), head[2])
    return toks


def json_write(path, obj):
    with open(path, "w") as f:
        json.dump(obj, f, indent=1)
        f.write("\n")


# ---------------------------------------------------------------- checks

def relerr(a, b):
    """max|a-b| / max|b| over the tensor (as tests/test.h test_tensor_relerr)."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    den = np.abs(b).max()
    return float(np.abs(a - b).max() / den) if den > 0 else float(np.abs(a - b).max())


def check_close(what, a, b, tol=F32_F64_TOL):
    e = relerr(a, b)
    if e > tol:
        sys.exit("%s: float32 vs float64 normalised error %.3g > %.3g" % (what, e, tol))
    return e


def split_kbias(name, t, C):
    """(t without the k third, the k third) for c_attn.bias; (t, empty) for other tensors."""
    t = torch.as_tensor(t, dtype=torch.float64)
    if not name.endswith("attn.c_attn.bias"):
        return t, t[:0]
    return torch.cat([t[:C], t[2 * C:]]), t[C:2 * C]


def check_f64(case, params, tokens, ref32, train32, clip):
    """float32 reference agrees with float64 on logits, loss, grads and training.
    Returns the worst errors: (forward+grads, training, updates alone, |k-bias drift|)."""
    cfg, B, T, C = case["cfg"], case["B"], case["T"], case["cfg"]["n_embd"]
    logits, loss, grads = grads_at(params, cfg, tokens, B, T, torch.float64)
    fwd = [check_close("logits", ref32[0], logits), check_close("loss", ref32[1], loss)]
    fwd += [check_close("grad/" + k, ref32[2][k], grads[k]) for k in grads]
    losses, norms, _, final = train(params, cfg, tokens, B, T, HYPER, clip, torch.float64)
    trn = [check_close("train/losses", train32[0], losses),
           check_close("train/grad_norms", train32[1], norms)]
    upd, kdrift = [], [0.0]
    for k in final:
        (a, ka), (b, kb) = split_kbias(k, train32[3][k], C), split_kbias(k, final[k], C)
        trn.append(check_close("final/" + k, a, b, F32_F64_FINAL_TOL))
        if len(ka):
            kdrift.append(float((ka - kb).abs().max()))
        p0, _ = split_kbias(k, params[k], C)
        upd.append(relerr(a - p0, b - p0))  # informative only: Adam amplifies tiny gradients
    if max(kdrift) > KBIAS_ABS_TOL:
        sys.exit("final c_attn.bias k third: float32 vs float64 differ by %.3g" % max(kdrift))
    return max(fwd), max(trn), max(upd), max(kdrift)


def check_ops():
    """The hand-written ops equal torch's own (float64) and a per-head loop attention."""
    g = torch.Generator().manual_seed(7)
    B, T, C, NH = 2, 5, 12, 3
    x = torch.randn(B, T, C, generator=g, dtype=torch.float64)
    w, b = torch.randn(C, generator=g, dtype=torch.float64), torch.randn(C, generator=g,
                                                                         dtype=torch.float64)
    errs = [relerr(layernorm(x, w, b), torch.nn.functional.layer_norm(x, (C,), w, b, 1e-5)),
            relerr(gelu_tanh(x), torch.nn.functional.gelu(x, approximate="tanh"))]
    p = {"attn.c_attn.weight": torch.randn(C, 3 * C, generator=g, dtype=torch.float64),
         "attn.c_attn.bias": torch.randn(3 * C, generator=g, dtype=torch.float64),
         "attn.c_proj.weight": torch.eye(C, dtype=torch.float64),
         "attn.c_proj.bias": torch.zeros(C, dtype=torch.float64)}
    errs.append(relerr(attention(x, p, "", NH), attention_loop(x, p, NH)))
    logits = torch.randn(7, 11, generator=g, dtype=torch.float64)
    tgt = torch.arange(7) % 11
    ce = -(logits.log_softmax(-1)[torch.arange(7), tgt]).mean()
    errs.append(relerr(torch.nn.functional.cross_entropy(logits, tgt), ce))
    if max(errs) > 1e-12:
        sys.exit("op self-check failed: errors %s" % errs)


def attention_loop(x, p, n_head):
    """Attention one (batch, head, query) at a time, for check_ops; c_proj left out."""
    B, T, C = x.shape
    hd = C // n_head
    qkv = x @ p["attn.c_attn.weight"] + p["attn.c_attn.bias"]
    y = torch.zeros(B, T, C, dtype=x.dtype)
    for bb in range(B):
        for h in range(n_head):
            q = qkv[bb, :, h * hd:(h + 1) * hd]
            k = qkv[bb, :, C + h * hd:C + (h + 1) * hd]
            v = qkv[bb, :, 2 * C + h * hd:2 * C + (h + 1) * hd]
            for t in range(T):
                s = torch.softmax(k[:t + 1] @ q[t] / math.sqrt(hd), dim=0)
                y[bb, t, h * hd:(h + 1) * hd] = s @ v[:t + 1]
    return y


def check_files(d, case, params, tokens, expected):
    """Reads the written files back and compares them bit for bit with what was meant."""
    model, meta = st_read(os.path.join(d, "model.safetensors"))
    assert meta == case["metadata"], "%s: metadata %s" % (d, meta)
    pre = "transformer." if case["prefix"] else ""
    for k, v in params.items():
        assert np.array_equal(model.pop(pre + k), v.numpy()), "%s: %s" % (d, k)
    if case["lm_head"]:
        assert np.array_equal(model.pop("lm_head.weight"), params["wte.weight"].numpy())
    if case["buffers"]:
        for i in range(case["cfg"]["n_layer"]):
            assert model.pop("h.%d.attn.masked_bias" % i).shape == ()
            assert model.pop("h.%d.attn.bias" % i)[0, 0].sum() == \
                case["cfg"]["n_positions"] * (case["cfg"]["n_positions"] + 1) // 2
    assert not model, "%s: unexpected tensors %s" % (d, list(model))
    assert np.array_equal(tokens_read(os.path.join(d, "tokens.bin")), tokens)
    exp, _ = st_read(os.path.join(d, "expected.safetensors"))
    assert sorted(exp) == sorted(n for n, _ in expected)
    for name, v in expected:
        assert np.array_equal(exp[name], np.asarray(v, dtype="<f4")), "%s: %s" % (d, name)
    cfg = json.load(open(os.path.join(d, "config.json")))
    assert all(cfg[k] == v for k, v in case["cfg"].items())


# ---------------------------------------------------------------- cases

def model_tensors(case, params):
    """The (name, tensor) list of model.safetensors for this case's naming variant."""
    pre = "transformer." if case["prefix"] else ""
    out = [(pre + k, v) for k, v in params.items()]
    if case["lm_head"]:
        out.append(("lm_head.weight", params["wte.weight"]))
    if case["buffers"]:
        NP = case["cfg"]["n_positions"]
        for i in range(case["cfg"]["n_layer"]):
            out.append(("h.%d.attn.bias" % i, torch.tril(torch.ones(NP, NP)).view(1, 1, NP, NP)))
            out.append(("h.%d.attn.masked_bias" % i, torch.tensor(-1e4)))
    return sorted(out, key=lambda kv: kv[0])


def make_case(case, outdir):
    cfg, B, T = case["cfg"], case["B"], case["T"]
    params = init_params(cfg, case["seed"])
    rng = np.random.default_rng(case["seed"])
    tokens = rng.integers(0, cfg["vocab_size"], STEPS * B * T + 1 + EXTRA_TOKENS).astype(np.uint16)
    ref32 = grads_at(params, cfg, tokens, B, T, torch.float32)
    clip = pick_clip(params, cfg, tokens, B, T, HYPER)
    train32 = train(params, cfg, tokens, B, T, HYPER, clip, torch.float32)
    assert abs(train32[0][0] - ref32[1].item()) <= 1e-6 * abs(train32[0][0])
    worst = check_f64(case, params, tokens, ref32, train32, clip)

    expected = [("logits", ref32[0]), ("loss", ref32[1])]
    expected += [("grad/" + k, v) for k, v in ref32[2].items()]
    expected += [("train/losses", train32[0]), ("train/grad_norms", train32[1]),
                 ("train/lrs", train32[2])]
    expected += [("final/" + k, v) for k, v in train32[3].items()]
    expected = [(n, np.asarray(v, dtype="<f4")) for n, v in expected]

    d = os.path.join(outdir, case["name"])
    os.makedirs(d, exist_ok=True)
    json_write(os.path.join(d, "config.json"), dict(cfg, model_type="gpt2",
               activation_function="gelu_new", layer_norm_epsilon=1e-05, resid_pdrop=0.0,
               architectures=["GPT2LMHeadModel"]))
    st_write(os.path.join(d, "model.safetensors"), model_tensors(case, params), case["metadata"])
    tokens_write(os.path.join(d, "tokens.bin"), tokens)
    json_write(os.path.join(d, "case.json"), dict({"B": B, "T": T}, **HYPER, grad_clip=clip,
               clipped=[n > clip for n in train32[1]], seed=case["seed"]))
    st_write(os.path.join(d, "expected.safetensors"), expected)
    check_files(d, case, params, tokens, expected)
    return d, ref32[1].item(), train32, clip, worst


def dir_bytes(d):
    return sum(os.path.getsize(os.path.join(d, f)) for f in os.listdir(d))


def main():
    ap = argparse.ArgumentParser(description="write pipetrain's PyTorch reference fixtures")
    ap.add_argument("--out", default="tests/fixtures", help="output folder (default %(default)s)")
    args = ap.parse_args()
    torch.set_num_threads(1)  # same bits on every run
    check_ops()
    total = 0
    for case in CASES:
        d, loss, tr, clip, worst = make_case(case, args.out)
        size = dir_bytes(d)
        total += size
        print("%-9s loss %.6f  grad_norms %s  grad_clip %.4g  clipped %s  %d bytes"
              % (case["name"], loss, " ".join("%.4f" % n for n in tr[1]), clip,
                 "".join("y" if n > clip else "n" for n in tr[1]), size))
        print("          float32 vs float64: grads %.1e, training %.1e, updates alone %.1e, "
              "k-bias drift %.1e (absolute)" % worst)
    print("total %d bytes" % total)


if __name__ == "__main__":
    main()
