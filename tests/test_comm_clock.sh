#!/usr/bin/env bash
# Clock offsets over MPI (comm_clock_offsets): each rank plays a host with its own clock through
# the PT_CLOCK_SKEW test hook (seconds added to its pt_now), and build/tests/aux_mpi_comm clock
# checks that the offsets against rank 0 come out as the skews' differences within a few ms, put
# a barrier's exit on one time axis, and leave a skewed rank's injected delays on time. Its
# ok/FAIL lines pass through; this script adds the job's exit status.
. "$(dirname "$0")/lib.sh"
BUILD=${BUILD:-build}
AUX="$BUILD/tests/aux_mpi_comm"
JOB_LIMIT_S=120     # a hang is a failure; a healthy run takes a second or two
# Under SAN=1 / TSAN=1: Open MPI's own leaks and internals are not ours (as test_comm_mpi.sh)
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
export TSAN_OPTIONS="${TSAN_OPTIONS:+$TSAN_OPTIONS:}suppressions=$PWD/tests/openmpi.tsan.supp"

# skewed NAME SKEWS...: one rank per skew (rank r gets the r-th, seconds), aux_mpi_comm clock.
skewed() {
  local n=$1; shift
  local out="$TEST_TMP/clock.out"
  PT_TEST_SKEWS="$*" timeout "$JOB_LIMIT_S" mpirun --allow-run-as-root --oversubscribe \
    -x ASAN_OPTIONS -x TSAN_OPTIONS -x PT_TEST_SKEWS -np $# \
    bash -c 's=($PT_TEST_SKEWS); PT_CLOCK_SKEW=${s[$OMPI_COMM_WORLD_RANK]} exec "$0" clock' "$AUX" \
    > "$out" 2> "$out.err" < /dev/null
  local rc=$?
  sed -n 's/^\(ok\|FAIL\) /\1 '"$n"': /p; s/^# /# '"$n"': /p' "$out"
  [ $rc -eq 0 ] && ok "$n: job exits 0" || fail "$n: job exits 0" "exit $rc: $(grep -v '^ok' "$out" "$out.err" | head -5)"
}
skewed "rank 1 five seconds ahead" 0 5.0
skewed "rank 0 ahead, rank 2 behind" 1.5 0 -2.5
skewed "one clock (no skew)" 0 0
done_tests
