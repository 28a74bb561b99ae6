#!/usr/bin/python3
"""PyTorch side of bench/bench_train.c: the same GPT-2 shape (n_layer 4, n_embd 256, n_head 4,
vocab 256, B 8, T 256) on one thread, timing zero grads + forward + backward (no optimizer
update), median of repeats, plus torch's own 1024 matmul GFLOP/s. A plain GPT-2 written here
(pre-LN blocks, tanh GELU, tied head), not Hugging Face's class, so it runs without transformers.
Run with Debian's /usr/bin/python3 (python3-torch). Usage: torch_train.py [repeats]"""
import math, statistics, sys, time
import torch
import torch.nn as nn
import torch.nn.functional as F

L, C, NH, V, B, T = 4, 256, 4, 256, 8, 256


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln_1, self.ln_2 = nn.LayerNorm(C), nn.LayerNorm(C)
        self.c_attn, self.c_proj = nn.Linear(C, 3 * C), nn.Linear(C, C)
        self.c_fc, self.mlp_proj = nn.Linear(C, 4 * C), nn.Linear(4 * C, C)
        self.register_buffer("mask", torch.tril(torch.ones(T, T, dtype=torch.bool)))

    def forward(self, x):
        q, k, v = self.c_attn(self.ln_1(x)).split(C, dim=2)
        q, k, v = (t.view(B, T, NH, C // NH).transpose(1, 2) for t in (q, k, v))
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(C // NH))
        att = att.masked_fill(~self.mask, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).reshape(B, T, C)
        x = x + self.c_proj(y)
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(V, C), nn.Embedding(T, C)
        self.h = nn.ModuleList(Block() for _ in range(L))
        self.ln_f = nn.LayerNorm(C)

    def forward(self, idx, targets):
        x = self.wte(idx) + self.wpe(torch.arange(T))
        for blk in self.h:
            x = blk(x)
        logits = self.ln_f(x) @ self.wte.weight.t()
        return F.cross_entropy(logits.view(-1, V), targets.view(-1))


def main():
    repeats = int(sys.argv[1]) if len(sys.argv) > 1 else 7
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = GPT()
    idx, tgt = torch.randint(0, V, (B, T)), torch.randint(0, V, (B, T))
    n_params = sum(p.numel() for p in model.parameters()) - model.wpe.weight.numel()
    flops = 6 * n_params * B * T + 6 * L * B * T * T * C
    a, b = torch.randn(1024, 1024), torch.randn(1024, 1024)
    steps, mms = [], []
    model(idx, tgt).backward()  # warm-up
    for _ in range(repeats):
        t0 = time.perf_counter(); a @ b; mms.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        model.zero_grad(set_to_none=False)
        model(idx, tgt).backward()
        steps.append(time.perf_counter() - t0)
    step, mm = statistics.median(steps), statistics.median(mms)
    print(f"torch_train: torch {torch.__version__}, 1 thread, same shape; median of {repeats}")
    print(f"  ms/step            {step * 1e3:8.1f}")
    print(f"  tokens/s           {B * T / step:8.0f}")
    print(f"  model GFLOP/s      {flops / step * 1e-9:8.2f}")
    print(f"  matmul GFLOP/s     {2 * 1024**3 / mm * 1e-9:8.2f}   (square 1024)")
    print(f"  ratio model/matmul {flops / step / (2 * 1024**3 / mm):8.3f}")


if __name__ == "__main__":
    main()
