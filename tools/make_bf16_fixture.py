#!/usr/bin/python3
"""bf16 reference for `--precision bf16`: torch.autocast("cpu", dtype=torch.bfloat16) on the
weights and batch 0 of existing fixtures (tests/fixtures/gpt-tiny and gpt-odd, written by
make_fixtures.py, whose model code this imports), written next to them as bf16.safetensors:
  "loss" (shape [] scalar), "logits" (B, T, V), "grad/<name>" for every parameter (names and the
  tied wte sum as expected.safetensors; make_fixtures.py's FORMAT CONTRACT).
Parameters and gradients stay fp32 (autocast casts to bf16 inside the matmuls only); layer norms,
GELU, softmax and the loss run as autocast runs them. Not part of the test suite (the C test
test_bf16_torch reads the file); deterministic: a second run writes the same bytes.
Run with Debian's PyTorch:  /usr/bin/python3 tools/make_bf16_fixture.py [--dir tests/fixtures]
It prints how far autocast is from the fp32 reference (expected.safetensors), the scale the C
test's tolerance is set against."""
import argparse
import json
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_fixtures as mf  # noqa: E402

CASES = ["gpt-tiny", "gpt-odd"]


def load_case(d):
    with open(os.path.join(d, "config.json")) as f:
        cfg = json.load(f)
    with open(os.path.join(d, "case.json")) as f:
        case = json.load(f)
    st, _ = mf.st_read(os.path.join(d, "model.safetensors"))
    params = {}
    for name, _shape in mf.param_shapes(cfg):
        key = "transformer." + name if "transformer." + name in st else name
        params[name] = torch.tensor(np.array(st[key]), dtype=torch.float32)
    tokens = mf.tokens_read(os.path.join(d, "tokens.bin"))
    return cfg, case["B"], case["T"], params, tokens


def autocast_grads(params, cfg, tokens, B, T):
    p = {k: v.clone().requires_grad_(True) for k, v in params.items()}
    idx, tgt = mf.batch(tokens, 0, B, T)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        logits, loss = mf.forward(p, cfg, idx, tgt)
    loss.float().backward()
    return logits.detach().float(), loss.detach().float(), {k: v.grad.detach() for k, v in p.items()}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", default="tests/fixtures")
    a = ap.parse_args()
    torch.set_num_threads(1)
    for cname in CASES:
        d = os.path.join(a.dir, cname)
        cfg, B, T, params, tokens = load_case(d)
        logits, loss, grads = autocast_grads(params, cfg, tokens, B, T)
        ref, _ = mf.st_read(os.path.join(d, "expected.safetensors"))
        worst = max((mf.relerr(grads[k].numpy(), ref["grad/" + k]), k) for k in grads)
        print("%s: autocast loss %.6f (fp32 %.6f); logits relerr %.3g, worst grad relerr %.3g (%s) "
              "vs fp32" % (cname, loss.item(), float(ref["loss"]), mf.relerr(logits.numpy(), ref["logits"]),
                           worst[0], worst[1]))
        assert worst[0] > 1e-4, "autocast changed nothing: is bf16 autocast working on this CPU?"
        out = [("loss", loss), ("logits", logits)] + [("grad/" + k, v) for k, v in grads.items()]
        path = os.path.join(d, "bf16.safetensors")
        mf.st_write(path, sorted(out, key=lambda kv: kv[0]))
        back, _ = mf.st_read(path)
        assert all(np.array_equal(back[k], np.array(v, dtype="<f4")) for k, v in out), path
        print("  wrote %s (%d bytes)" % (path, os.path.getsize(path)))


if __name__ == "__main__":
    main()
