# train --optim nadam end to end: it changes the run (vs AdamW), a checkpoint carries its state
# ("optim", "nadam_mu_product") and resuming continues exactly; resuming with another rule or
# other NAdam flags is refused; a pipelined run (2 stages) follows the one-process run; AdamW
# manifests stay as before (no "optim" key). The arithmetic itself: test_nadam_torch.c.
. tests/lib.sh
P=$PIPETRAIN
D=$TEST_TMP/optim_cli
mkdir -p "$D"
cat > "$D/cfg.json" <<'J'
{"n_layer": 2, "n_head": 2, "n_embd": 32, "vocab_size": 256, "n_positions": 32}
J
for i in $(seq 1 200); do echo "the quick brown fox jumps over the lazy dog $((i % 7))"; done > "$D/text.txt"
train() { "$P" train --config "$D/cfg.json" --data "$D/text.txt" --batch 4 --seq 16 --lr 3e-3 --steps 6 "$@"; }
losses() { sed 's/.*"loss":\([0-9.]*\).*/\1/' "$1" | tr '\n' ' '; }

train --threads 1 --metrics "$D/a.jsonl" --save "$D/a" --save-every 3 > "$D/a.out" 2>&1 || fail "adamw run" "$(tail -3 "$D/a.out")"
if train --threads 1 --optim nadam --metrics "$D/n.jsonl" --save "$D/n" --save-every 3 > "$D/n.out" 2>&1; then
  ok "nadam run"
else
  fail "nadam run" "$(tail -3 "$D/n.out")"
fi
la=$(sed -n 3p "$D/a.jsonl" | sed 's/.*"loss":\([0-9.]*\).*/\1/')
ln=$(sed -n 3p "$D/n.jsonl" | sed 's/.*"loss":\([0-9.]*\).*/\1/')
[ -n "$la" ] && [ -n "$ln" ] && [ "$la" != "$ln" ] && ok "nadam changes the run (step 3: $ln vs adamw $la)" \
  || fail "nadam changes the run" "step 3 loss '$ln' vs adamw '$la'"
grep -q '"optim"' "$D/a/ckpt-3/manifest.json" && fail "adamw manifest unchanged" "has an optim key" \
  || ok "adamw manifest unchanged (no optim key)"
grep -q '"optim":[[:space:]]*"nadam"' "$D/n/ckpt-3/manifest.json" && grep -q '"nadam_mu_product"' "$D/n/ckpt-3/manifest.json" \
  && ok "nadam manifest: optim and mu product" || fail "nadam manifest" "$(head -c 400 "$D/n/ckpt-3/manifest.json")"

if train --threads 1 --optim nadam --resume "$D/n/ckpt-3" --metrics "$D/r.jsonl" > "$D/r.out" 2>&1; then
  a=$(sed -n '4,6p' "$D/n.jsonl" | sed 's/.*"loss":\([0-9.]*\).*/\1/' | tr '\n' ' ')
  b=$(losses "$D/r.jsonl")
  [ "$a" = "$b" ] && ok "nadam resume: losses equal the uninterrupted run" || fail "nadam resume: losses equal" "$a vs $b"
else
  fail "nadam resume runs" "$(tail -3 "$D/r.out")"
fi
expect_error "resume a nadam checkpoint as adamw" "resume with --optim nadam" train --threads 1 --resume "$D/n/ckpt-3"
expect_error "resume an adamw checkpoint as nadam" "resume with --optim adamw" train --threads 1 --optim nadam --resume "$D/a/ckpt-3"
expect_error "resume nadam with another --beta1" "mu product" train --threads 1 --optim nadam --beta1 0.99 --resume "$D/n/ckpt-3"
expect_error "--optim names the choices" "--optim must be adamw or nadam" train --threads 1 --optim sgd
expect_error "--momentum-decay range" "--momentum-decay must be >= 0" train --threads 1 --optim nadam --momentum-decay -1

# pipelined (2 stages, threads): each stage updates its own span with the same rule
if train --optim nadam --stages 2 --metrics "$D/p.jsonl" > "$D/p.out" 2>&1; then
  a=$(losses "$D/n.jsonl"); b=$(losses "$D/p.jsonl")
  awk -v a="$a" -v b="$b" 'BEGIN{n=split(a,x," "); m=split(b,y," "); if (n!=6||m!=6) exit 1;
    for(i=1;i<=n;i++){d=x[i]-y[i]; if(d<0)d=-d; if(d>1e-4*x[i]) exit 1}}' \
    && ok "nadam pipelined follows one process (rel 1e-4)" || fail "nadam pipelined follows one process" "$a vs $b"
else
  fail "nadam pipelined runs" "$(tail -3 "$D/p.out")"
fi
# recovery from snapshots (launch, --kill-at): the restored checkpoint keeps NAdam's fields, and
# the run ends on the uninterrupted run's loss bitwise
SNAP=/dev/shm/pt-test-optim-$$
trap 'rm -rf "$SNAP"*' EXIT
timeout 120 "$P" launch --snapshot-dir "$SNAP" -- train --config "$D/cfg.json" --data "$D/text.txt" --batch 4 --seq 16 \
  --lr 3e-3 --steps 6 --optim nadam --stages 2 --snapshot-every 1 --kill-at 0@4 --metrics "$D/l.jsonl" > "$D/l.out" 2>&1
rc=$?
a=$(tail -1 "$D/p.jsonl" | sed 's/.*"loss":\([0-9.]*\).*/\1/'); b=$(tail -1 "$D/l.jsonl" 2>/dev/null | sed 's/.*"loss":\([0-9.]*\).*/\1/')
[ $rc = 0 ] && [ -n "$b" ] && [ "$a" = "$b" ] && ok "nadam: launch recovers from a kill, same final loss ($b)" \
  || fail "nadam: launch recovers from a kill" "rc $rc, loss '$b' vs '$a': $(tail -3 "$D/l.out")"
done_tests
