#!/usr/bin/python3
"""Writes tests/fixtures/outer/outer.safetensors: DiLoCo's outer step (arXiv 2311.08105) as
torch.optim.SGD(momentum=mu, nesterov=True) computes it (the installed torch 1.13), the outer
gradient being the replicas' mean change theta_start - theta_d, over STEPS outer steps.

Contract with tests/test_dpsync.c:
  "s0"               (N)  theta_start before the first outer step (the same for every case)
  "d<k>/r<r>"        (N)  replica r's weights theta_r after the inner steps of outer step k
                          (k = 1..STEPS, r = 0..D-1); the change is s_{k-1} - theta_r
  "<case>/s<k>"      (N)  theta_start after outer step k
  "<case>/buf"       (N)  the momentum buffer after the last step
  metadata "<case>" = "lr,momentum"; "steps", "n", "replicas".
The mean is torch's sum over replicas in replica order, divided by D, in float32. Deterministic:
running it again rewrites the same bytes.

    /usr/bin/python3 tools/make_outer_fixture.py [--out DIR]     # default tests/fixtures/outer
"""
import argparse
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_fixtures import st_write, st_read  # noqa: E402

N, STEPS, D = 41, 5, 3
CASES = {"diloco": (0.7, 0.9), "average": (1.0, 0.0), "slow": (0.3, 0.5)}


def run_case(s0, thetas, lr, mu):
    p = torch.nn.Parameter(torch.tensor(s0))
    opt = torch.optim.SGD([p], lr=lr, momentum=mu, nesterov=mu > 0)
    out = []
    for k in range(STEPS):
        start = p.detach().clone()
        total = torch.zeros(N, dtype=torch.float32)
        for r in range(D):
            total = total + (start - torch.tensor(thetas[k][r]))
        p.grad = total / D
        opt.step()
        out.append(p.detach().numpy().copy())
    st = opt.state[p]
    buf = st["momentum_buffer"].numpy().copy() if mu > 0 else np.zeros(N, np.float32)
    return out, buf


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "tests", "fixtures", "outer"))
    a = ap.parse_args()
    rng = np.random.default_rng(31)
    s0 = rng.standard_normal(N).astype(np.float32)
    # each replica's weights after its inner steps: near s0, drifting (the C side recomputes the
    # change from its own theta_start, so these are weights, not changes)
    thetas = [[(s0 + 0.05 * (k + 1) * rng.standard_normal(N)).astype(np.float32) for _ in range(D)]
              for k in range(STEPS)]
    tensors = [("s0", s0)] + [("d%d/r%d" % (k + 1, r), thetas[k][r]) for k in range(STEPS) for r in range(D)]
    meta = {"steps": str(STEPS), "n": str(N), "replicas": str(D)}
    for name, (lr, mu) in CASES.items():
        ss, buf = run_case(s0, thetas, lr, mu)
        tensors += [("%s/s%d" % (name, k + 1), x) for k, x in enumerate(ss)]
        tensors += [(name + "/buf", buf)]
        meta[name] = "%r,%r" % (lr, mu)
        print("%s: lr %g momentum %g: max |s5 - s0| %.4g" % (name, lr, mu, float(np.abs(ss[-1] - s0).max())))
    os.makedirs(a.out, exist_ok=True)
    path = os.path.join(a.out, "outer.safetensors")
    st_write(path, tensors, meta)
    back, bmeta = st_read(path)
    if bmeta != meta or any(not np.array_equal(back[n], np.asarray(t, dtype=np.float32)) for n, t in tensors):
        sys.exit("%s: read back differs" % path)
    print("wrote %s (%d bytes)" % (path, os.path.getsize(path)))


if __name__ == "__main__":
    main()
