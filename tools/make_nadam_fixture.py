#!/usr/bin/python3
"""Writes tests/fixtures/nadam/nadam.safetensors: what torch.optim.NAdam (the installed torch 1.13)
computes over STEPS steps on one flat tensor of N float32 parameters, for the cases below.

Contract with tests/test_nadam_torch.c:
  "p0"            (N)   the initial parameters (the same for every case)
  "g<k>"          (N)   the gradient given at step k = 1..STEPS (the same for every case)
  "<case>/p<k>"   (N)   the parameters after step k
  "<case>/m", "<case>/v" (N)  exp_avg and exp_avg_sq after the last step
  metadata "<case>" = "beta1,beta2,eps,weight_decay,momentum_decay"; "<case>/mu_product" = the
  state's mu_product after the last step (float32, printed with repr); "lr" = the STEPS learning
  rates, comma separated, set on the param group before each step (a schedule, so a C side that
  ignored lr per step would fail); "steps", "n".
torch 1.13's NAdam: L2 weight decay added to the gradient (no decoupled variant exists in it), the
mu product kept in a float32 tensor, and mu_product_next = mu_product * mu * mu_next (mu counted
twice: torch's own formula, which later versions changed). The C side must match this exactly.
Deterministic: running it again rewrites the same bytes.

    /usr/bin/python3 tools/make_nadam_fixture.py [--out DIR]     # default tests/fixtures/nadam
"""
import argparse
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_fixtures import st_write, st_read  # noqa: E402

N, STEPS = 37, 8
LRS = [1e-2 * (1 - 0.1 * k) for k in range(STEPS)]
CASES = {  # name: (beta1, beta2, eps, weight_decay, momentum_decay)
    "plain": (0.9, 0.999, 1e-8, 0.0, 4e-3),
    "decay": (0.99, 0.95, 1e-8, 0.1, 4e-3),
}


def run_case(p0, grads, beta1, beta2, eps, wd, md):
    p = torch.nn.Parameter(torch.tensor(p0))
    opt = torch.optim.NAdam([p], lr=LRS[0], betas=(beta1, beta2), eps=eps, weight_decay=wd,
                            momentum_decay=md)
    out = []
    for k in range(STEPS):
        opt.param_groups[0]["lr"] = LRS[k]
        p.grad = torch.tensor(grads[k])
        opt.step()
        out.append(p.detach().numpy().copy())
    st = opt.state[p]
    return out, st["exp_avg"].numpy().copy(), st["exp_avg_sq"].numpy().copy(), float(st["mu_product"])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "tests", "fixtures", "nadam"))
    a = ap.parse_args()
    rng = np.random.default_rng(23)
    p0 = rng.standard_normal(N).astype(np.float32)
    grads = [(rng.standard_normal(N) * (0.5 + k)).astype(np.float32) for k in range(STEPS)]
    grads[3][::5] = 0.0   # some zero gradients: the update is then the momentum's alone
    tensors = [("p0", p0)] + [("g%d" % (k + 1), g) for k, g in enumerate(grads)]
    meta = {"lr": ",".join(repr(x) for x in LRS), "steps": str(STEPS), "n": str(N)}
    for name, hp in CASES.items():
        ps, m, v, mu = run_case(p0, grads, *hp)
        tensors += [("%s/p%d" % (name, k + 1), x) for k, x in enumerate(ps)]
        tensors += [(name + "/m", m), (name + "/v", v)]
        meta[name] = ",".join(repr(x) for x in hp)
        meta[name + "/mu_product"] = repr(mu)
        moved = float(np.abs(ps[-1] - p0).max())
        print("%s: betas (%g, %g) wd %g: max |p8 - p0| %.4g, mu_product %r" % (name, hp[0], hp[1], hp[3], moved, mu))
    os.makedirs(a.out, exist_ok=True)
    path = os.path.join(a.out, "nadam.safetensors")
    st_write(path, tensors, meta)
    back, bmeta = st_read(path)
    if bmeta != meta or any(not np.array_equal(back[n], np.asarray(t, dtype=np.float32)) for n, t in tensors):
        sys.exit("%s: read back differs" % path)
    print("wrote %s (%d bytes)" % (path, os.path.getsize(path)))


if __name__ == "__main__":
    main()
