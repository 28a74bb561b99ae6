#!/usr/bin/python3
"""PyTorch side of the training benchmarks: the GPT-2 shapes of bench/bench_train.c, timing
zero grads + forward + backward (and, with --adamw, gradient clipping and an AdamW step: what
`pipetrain train` does per step). A plain GPT-2 written here (pre-LN blocks, tanh GELU, tied
head), not Hugging Face's class, so it runs without transformers. Run with Debian's
/usr/bin/python3 (python3-torch).

  torch_train.py [--shape ref|gpt2] [--threads N] [--repeats N] [--adamw]
      prints medians of N steps after a warm-up, and torch's own 1024 matmul GFLOP/s
  torch_train.py --serve [--shape ...] [--threads N] [--adamw]
      for bench_train, which interleaves its own steps with these: builds the model, runs a
      warm-up step, prints "ready <torch version> <threads> <peak RSS kB>", then answers each
      line "step" with the seconds of one step and "mm" with those of a 1024^3 matmul (wall
      clock, then the CPU seconds of this thread), until "quit" or end of input."""
import argparse, math, os, resource, statistics, sys, time


def _threads_from_argv():
    """--threads, read before torch loads: Debian's torch calls the system BLAS (OpenBLAS), whose
    own thread pool torch.set_num_threads does not size; OPENBLAS_NUM_THREADS must be set first."""
    argv = sys.argv[1:]
    for i, a in enumerate(argv):
        if a == "--threads" and i + 1 < len(argv):
            return argv[i + 1]
        if a.startswith("--threads="):
            return a.split("=", 1)[1]
    return "1"


os.environ["OPENBLAS_NUM_THREADS"] = _threads_from_argv()
os.environ.setdefault("OMP_NUM_THREADS", os.environ["OPENBLAS_NUM_THREADS"])
import torch  # noqa: E402  (after the thread count is in the environment)
import torch.nn as nn
import torch.nn.functional as F

SHAPES = {  # n_layer, n_embd, n_head, vocab, B, T
    "ref": (4, 256, 4, 256, 8, 256),
    "gpt2": (12, 768, 12, 50257, 4, 256),
}


class Block(nn.Module):
    def __init__(self, C, NH, T):
        super().__init__()
        self.C, self.NH = C, NH
        self.ln_1, self.ln_2 = nn.LayerNorm(C), nn.LayerNorm(C)
        self.c_attn, self.c_proj = nn.Linear(C, 3 * C), nn.Linear(C, C)
        self.c_fc, self.mlp_proj = nn.Linear(C, 4 * C), nn.Linear(4 * C, C)
        self.register_buffer("mask", torch.tril(torch.ones(T, T, dtype=torch.bool)))

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(C, dim=2)
        q, k, v = (t.view(B, T, self.NH, C // self.NH).transpose(1, 2) for t in (q, k, v))
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(C // self.NH))
        att = att.masked_fill(~self.mask[:T, :T], float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).reshape(B, T, C)
        x = x + self.c_proj(y)
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, L, C, NH, V, T):
        super().__init__()
        self.V = V
        self.wte, self.wpe = nn.Embedding(V, C), nn.Embedding(T, C)
        self.h = nn.ModuleList(Block(C, NH, T) for _ in range(L))
        self.ln_f = nn.LayerNorm(C)

    def forward(self, idx, targets):
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1]))
        for blk in self.h:
            x = blk(x)
        logits = self.ln_f(x) @ self.wte.weight.t()
        return F.cross_entropy(logits.view(-1, self.V), targets.view(-1))


class Bench:
    def __init__(self, shape, adamw):
        L, C, NH, V, B, T = SHAPES[shape]
        torch.manual_seed(0)
        self.model = GPT(L, C, NH, V, T)
        self.idx, self.tgt = torch.randint(0, V, (B, T)), torch.randint(0, V, (B, T))
        n_params = sum(p.numel() for p in self.model.parameters()) - self.model.wpe.weight.numel()
        self.flops = 6 * n_params * B * T + 6 * L * B * T * T * C
        self.tokens = B * T
        self.opt = torch.optim.AdamW(self.model.parameters(), lr=1e-4, betas=(0.9, 0.95),
                                     weight_decay=0.1) if adamw else None
        self.a, self.b = torch.randn(1024, 1024), torch.randn(1024, 1024)

    def step(self):
        """(wall seconds, this thread's CPU seconds) of one step."""
        t0, c0 = time.perf_counter(), time.thread_time()
        self.model.zero_grad(set_to_none=False)
        self.model(self.idx, self.tgt).backward()
        if self.opt:
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
            self.opt.step()
        return time.perf_counter() - t0, time.thread_time() - c0

    def mm(self):
        t0, c0 = time.perf_counter(), time.thread_time()
        self.a @ self.b
        return time.perf_counter() - t0, time.thread_time() - c0


def peak_rss_kb():
    """VmHWM: this address space's peak (ru_maxrss carries the parent's peak across exec)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def serve(bench):
    bench.step()  # warm-up: buffers, the allocator's pools
    rss_kb = peak_rss_kb()
    print(f"ready {torch.__version__} {torch.get_num_threads()} {rss_kb}", flush=True)
    for line in sys.stdin:
        cmd = line.strip()
        if cmd == "quit":
            break
        wall, cpu = bench.step() if cmd == "step" else bench.mm()
        print(f"{wall:.6f} {cpu:.6f}", flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("repeats_pos", nargs="?", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--shape", choices=SHAPES, default="ref")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--adamw", action="store_true")
    ap.add_argument("--serve", action="store_true")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    bench = Bench(a.shape, a.adamw)
    if a.serve:
        return serve(bench)
    repeats = a.repeats_pos or a.repeats
    bench.step()
    steps, mms = [], []
    for _ in range(repeats):
        mms.append(bench.mm()[0])
        steps.append(bench.step()[0])
    step, mm = statistics.median(steps), statistics.median(mms)
    L, C, NH, V, B, T = SHAPES[a.shape]
    print(f"torch_train: torch {torch.__version__}, {torch.get_num_threads()} thread(s), shape {a.shape} "
          f"(n_layer {L}, n_embd {C}, n_head {NH}, vocab {V}, B {B}, T {T})"
          f"{', with AdamW' if a.adamw else ''}; median of {repeats}")
    print(f"  ms/step            {step * 1e3:8.1f}")
    print(f"  tokens/s           {bench.tokens / step:8.0f}")
    print(f"  model GFLOP/s      {bench.flops / step * 1e-9:8.2f}")
    print(f"  matmul GFLOP/s     {2 * 1024**3 / mm * 1e-9:8.2f}   (square 1024)")
    print(f"  ratio model/matmul {bench.flops / step / (2 * 1024**3 / mm):8.3f}")
    print(f"  peak RSS           {peak_rss_kb() / 1024:8.0f} MB")


if __name__ == "__main__":
    main()
