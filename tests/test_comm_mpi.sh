#!/usr/bin/env bash
# MPI transport under mpirun -np 4: build/tests/aux_mpi_comm prints its own ok/FAIL lines (passed
# through here); this script adds the whole-job checks: clean exit, and an aborting or dying rank
# ends the job with an error naming it, within a bounded time (never a hang).
. "$(dirname "$0")/lib.sh"
BUILD=${BUILD:-build}
AUX="$BUILD/tests/aux_mpi_comm"
JOB_LIMIT_S=120     # a hang is a failure; a healthy run takes seconds
# Under SAN=1: Open MPI leaks at MPI_Finalize (inside plugins it has dlclose'd, so suppressions
# by library name cannot match); leak checks of our own code are in test_comm (threads, faulty).
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
# Under TSAN=1: Open MPI's own internals are suppressed (tests/openmpi.tsan.supp).
export TSAN_OPTIONS="${TSAN_OPTIONS:+$TSAN_OPTIONS:}suppressions=$PWD/tests/openmpi.tsan.supp"
mpi() { timeout "$JOB_LIMIT_S" mpirun --allow-run-as-root --oversubscribe -x ASAN_OPTIONS -x TSAN_OPTIONS -np 4 "$AUX" "$@"; }

out="$TEST_TMP/mpi_comm.out"
mpi >"$out" 2>"$out.err"; rc=$?
grep -E '^(ok|FAIL) ' "$out"
if [ $rc -eq 0 ]; then ok "mpi comm: job exits 0"
else fail "mpi comm: job exits 0" "exit $rc: $(grep -v '^ok' "$out" "$out.err" | head -5)"; fi

# expect_job_error NAME PATTERN MODE: the job must fail (not time out) and say PATTERN.
expect_job_error() {
  local n=$1 pat=$2 mode=$3
  mpi "$mode" >"$out" 2>&1; local rc=$?
  if [ $rc -eq 0 ]; then fail "$n" "job exited 0"
  elif [ $rc -eq 124 ]; then fail "$n" "job still running after ${JOB_LIMIT_S}s (hang)"
  elif ! grep -Eq -- "$pat" "$out"; then fail "$n" "output did not match /$pat/: $(head -3 "$out")"
  else ok "$n"; fi
}
expect_job_error "mpi abort by rank 2 ends the job naming it" "rank 2 failed: injected failure" abort
expect_job_error "mpi faulty: rank 1 dying after 3 sends ends the job naming it" \
  "rank 1 failed: died after 3 sends" die
done_tests
