#!/usr/bin/env bash
# The adaptive schedule through the runtime's registry path (threads transport): `grad` with
# --schedule adaptive writes the single-process gradients (the math never changes, only the
# order), and train --help lists it. Without the simulator's judge (the runtime does not
# pass one yet) it is the list scheduler's best for unit costs and no delay. docs/stragglers.md.
. tests/lib.sh
BUILD=${BUILD:-build}
P=$PIPETRAIN
CMP="$BUILD/tests/aux_run_cmp"
D=$TEST_TMP/adaptive_run
mkdir -p "$D"
cat > "$D/cfg.json" <<'J'
{"n_layer": 4, "n_head": 2, "n_embd": 32, "vocab_size": 256, "n_positions": 32}
J
for i in $(seq 1 100); do echo "the quick brown fox jumps over the lazy dog $((i % 7))"; done > "$D/text.txt"
export OPENBLAS_NUM_THREADS=1     # one summation order for the single-process reference
grad() { "$P" grad --config "$D/cfg.json" --tokens "$D/text.txt" --batch 8 --seq 16 "$@"; }
# float32 sums of the same terms in another order (microbatches, the tied wte copies)
TOL=1e-4

check adaptive_grad_single_process grad --out "$D/g1.st"
check adaptive_grad_p4_m8 grad --out "$D/ga.st" --stages 4 --schedule adaptive --microbatches 8
check adaptive_grad_equals_single_process "$CMP" "$D/ga.st" "$D/g1.st" $TOL
check adaptive_in_train_help bash -c "$P train --help 2>&1 | grep -q adaptive"
rm -rf "$D"
done_tests
