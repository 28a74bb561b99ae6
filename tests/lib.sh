# Helpers for tests/test_*.sh (sourced). Each check prints "ok NAME" or "FAIL NAME: why";
# tests/run.sh counts them. $PIPETRAIN is the binary under test, $TEST_TMP a scratch folder.
: "${PIPETRAIN:=build/pipetrain}"
: "${TEST_TMP:=$(mktemp -d)}"
T_FAILED=0
ok()   { echo "ok $1"; }
fail() { echo "FAIL $1: $2"; T_FAILED=1; }
# check NAME COND-COMMAND...: runs the command; ok when it exits 0.
check() { local n=$1; shift; if "$@" >/dev/null 2>&1; then ok "$n"; else fail "$n" "command failed: $*"; fi; }
# expect_error NAME PATTERN CMD...: the command must exit non-zero (not by a signal) and its
# stderr must match PATTERN (grep -E), the user-facing error contract.
expect_error() {
  local n=$1 pat=$2; shift 2
  local err="$TEST_TMP/err.$$"
  "$@" >/dev/null 2>"$err"; local rc=$?
  if [ $rc -eq 0 ]; then fail "$n" "exited 0, expected an error"
  elif [ $rc -ge 128 ]; then fail "$n" "killed by signal $((rc-128)): $(head -3 "$err")"
  elif ! grep -Eq -- "$pat" "$err"; then fail "$n" "error did not match /$pat/: $(head -3 "$err")"
  else ok "$n"; fi
}
done_tests() { exit $T_FAILED; }
# mpi_env LIMIT_S: the MPI tests' setting: BUILD, P (the binary under test), CMP (aux_run_cmp),
# JOB_LIMIT_S (each mpirun's limit: a hang is a failure), and the sanitizers' options (Open MPI's
# own leaks; under TSAN=1 its internals suppressed by tests/openmpi.tsan.supp).
mpi_env() {
  BUILD=${BUILD:-build}
  P=$PIPETRAIN
  CMP="$BUILD/tests/aux_run_cmp"
  JOB_LIMIT_S=$1
  export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
  export TSAN_OPTIONS="${TSAN_OPTIONS:+$TSAN_OPTIONS:}suppressions=$PWD/tests/openmpi.tsan.supp"
}
# mpi_run N CMD...: CMD on N processes (mpirun as root, oversubscribed) within JOB_LIMIT_S, passing
# the sanitizers' options and each variable named in $MPI_X.
mpi_run() {
  local n=$1 v x=(); shift
  for v in $MPI_X; do x+=(-x "$v"); done
  timeout "$JOB_LIMIT_S" mpirun --allow-run-as-root --oversubscribe -x ASAN_OPTIONS -x TSAN_OPTIONS "${x[@]}" \
    -np "$n" "$@" < /dev/null
}
# mpi N ARGS...: $P ARGS... on N processes.
mpi() { local n=$1; shift; mpi_run "$n" "$P" "$@"; }
# tp_case DIR: the tensor-parallel scripts' case (test_tp.sh, test_tp_sp.sh) in DIR: n_head 4 (tp
# 1, 2, 4 divide it), vocab 257 (no tp > 1 does: wte's rows are padded), batch 8 x seq 16 (every
# microbatch's B*T even, for --sp); sets gargs and targs (grad's and train's flags) and TOL,
# float32 sums of the same terms in another order (microbatches, replicas, TP partial products,
# under --sp the layer norms' gradients per rank's rows, then over the ranks).
tp_case() {
  mkdir -p "$1"
  echo '{"n_layer": 2, "n_head": 4, "n_embd": 32, "vocab_size": 257, "n_positions": 32}' > "$1/cfg.json"
  for i in $(seq 1 200); do echo "the quick brown fox jumps over the lazy dog $((i % 7))"; done > "$1/text.txt"
  gargs="--config $1/cfg.json --tokens $1/text.txt --batch 8 --seq 16"
  targs="--config $1/cfg.json --data $1/text.txt --batch 8 --seq 16 --lr 3e-3"
  TOL=1e-4
}
# recover_hosts_case DIR LAYOUT...: the namespace-hosts recovery scripts' case (test_recover_hosts.sh,
# test_recover_peer.sh) in DIR: a 4-layer, 32-channel model on a repeated sentence, 40 steps of
# batch 8 x 16 with LAYOUT's flags, every message between ranks 0 and 1 10 ms late (no number
# changes; idle, a step takes 2 ms, so the job would end before a host killed at step 10 is
# noticed and no recovery would follow: the test then failed with "restored" empty); sets args, P (the binary's full path), AGENT (the hosts'
# launch agent) and mpiargs (mpirun over the namespaces' eth0), and last_loss FILE.
recover_hosts_case() {
  local d=$1; shift
  mkdir -p "$d"
  echo '{"n_layer": 4, "n_head": 2, "n_embd": 32, "vocab_size": 256, "n_positions": 32}' > "$d/cfg.json"
  for i in $(seq 1 200); do echo "the quick brown fox jumps over the lazy dog $((i % 7))"; done > "$d/text.txt"
  args="--config $d/cfg.json --data $d/text.txt --batch 8 --seq 16 --lr 3e-3 --grad-clip 0.5 --steps 40 --slow-link 0-1:0.01 $*"
  P=$(realpath "$PIPETRAIN")
  AGENT=$(realpath tools/hosts_agent.sh)
  mpiargs="--mca plm_rsh_agent $AGENT --mca btl tcp,self --mca btl_tcp_if_include eth0 --mca oob_tcp_if_include eth0 --bind-to none"
}
last_loss() { tail -1 "$1" | sed 's/.*"loss":\([0-9.]*\).*/\1/'; }
