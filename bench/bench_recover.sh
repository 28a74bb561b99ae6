#!/usr/bin/env bash
# Recovery, issue 22's "done when" (docs/recovery.md): the demo model (examples/char-gpt.json,
# batch 32 x 64 tokens) as 2 stages x 2 replicas over Open MPI on two hosts (network namespaces,
# tools/hosts.sh, 2 ranks each) for 60 steps under `pipetrain launch --snapshot-every 1`, a random
# rank killed with kill -9 from outside at two random steps. For each run: whether it reached step
# 60 by itself, each recovery's time from the kill to the next completed step (the supervisor's
# "recovered" event, seen by polling its events file every 20 ms), the steps it repeated, and the
# final loss against an uninterrupted run. Prints one line per run and a summary with the machine
# and its load. Skips where namespaces cannot be made. Usage: bench/bench_recover.sh [RUNS] (20)
# [--recycle]: launch --recycle: the first kill is gone on from in place (the killed rank's replica
# dropped, the other goes on in the same processes), the second (one replica left) restarted with
# the whole layout: both paths measured in each run, in the same conditions.
set -u
cd "$(dirname "$0")/.."
P=$(realpath "${PIPETRAIN:-build/pipetrain}")
H=tools/hosts.sh
export PT_HOSTS=rcbr PT_HOSTS_TIMEOUT=300
RUNS=${1:-20}
RECYCLE=${2:-}
[ -z "$RECYCLE" ] || [ "$RECYCLE" = --recycle ] || { echo "usage: bench/bench_recover.sh [RUNS] [--recycle]"; exit 2; }
if ! why=$($H check 2>&1); then echo "bench_recover: skipped: $why"; exit 0; fi
D=$(mktemp -d)
SNAP=/dev/shm/pt-bench-recover-$$
trap '$H down >/dev/null 2>&1; rm -rf "$D" "$SNAP"' EXIT
for i in $(seq 1 3000); do echo "the quick brown fox jumps over the lazy dog, line $i of the bench corpus"; done > "$D/t.txt"
cpu=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')
isa=$(grep -qw avx512f /proc/cpuinfo && echo AVX-512 || (grep -qw avx2 /proc/cpuinfo && echo AVX2 || echo other))
echo "machine: $cpu, $isa, $(nproc) cores; load before: $(cut -d' ' -f1-3 /proc/loadavg); 2 hosts as network namespaces"
$H up 2 > /dev/null || exit 1
printf "10.77.0.1 slots=2\n10.77.0.2 slots=2\n" > "$D/hf"
STEPS=60
args="--config $(realpath examples/char-gpt.json) --data $D/t.txt --batch 32 --seq 64 --lr 1e-3 --steps $STEPS --stages 2 --dp 2 --microbatches 4"
mpiargs="--mca plm_rsh_agent $(realpath tools/hosts_agent.sh) --mca btl tcp,self --mca btl_tcp_if_include eth0 --mca oob_tcp_if_include eth0 --bind-to none"
now() { date +%s.%N; }
loss() { tail -1 "$1" | sed 's/.*"loss":\([0-9.]*\).*/\1/'; }
n_rec() { grep -c '"event":"recovered"' "$1" 2>/dev/null; }
sup() {
  timeout 300 $H exec 0 env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 PT_HOSTS="$PT_HOSTS" \
    "$P" launch --np 4 --hostfile "$D/hf" $mpiargs --snapshot-dir "$SNAP" $RECYCLE "$@" > "$D/run.out" 2>&1 < /dev/null
}
RECYCLE="" sup -- train $args --metrics "$D/ref.jsonl" || { echo "bench_recover: the uninterrupted run failed"; tail -5 "$D/run.out"; exit 1; }
ref=$(loss "$D/ref.jsonl")
echo "uninterrupted: step $STEPS, loss $ref"
ok_runs=0; : > "$D/rec_s"; : > "$D/lost"; : > "$D/rel"; : > "$D/inplace_s"; : > "$D/restart_s"
for ((r = 1; r <= RUNS; r++)); do
  rm -rf "$SNAP" "$D/m.jsonl" "$D/m.events.jsonl"
  k1=$((5 + RANDOM % 20)); k2=$((k1 + 8 + RANDOM % 20))
  sup -- train $args --snapshot-every 1 --metrics "$D/m.jsonl" &
  lp=$!
  line="run $r:"
  i=0
  for k in $k1 $k2; do
    i=$((i + 1)); w=$((RANDOM % 4)); t_kill=""
    [ -n "$RECYCLE" ] && [ $i = 2 ] && w=$((RANDOM % 2))   # one replica (2 ranks) left after the first
    while kill -0 $lp 2>/dev/null; do   # kill -9 rank w once rank 0's step reaches k
      s=""; [ -f "$SNAP/rank-0/heartbeat" ] && read -r s _ < "$SNAP/rank-0/heartbeat"
      if [ -n "$s" ] && [ "$s" -ge "$k" ] && [ -f "$SNAP/rank-$w/heartbeat" ]; then
        read -r _ pid _ < "$SNAP/rank-$w/heartbeat"
        kill -9 "$pid" 2>/dev/null && t_kill=$(now); break
      fi
      sleep 0.02
    done
    [ -n "$t_kill" ] || { line="$line kill $i missed;"; continue; }
    while kill -0 $lp 2>/dev/null && [ "$(n_rec "$D/m.events.jsonl")" -lt $i ]; do sleep 0.02; done
    if [ "$(n_rec "$D/m.events.jsonl")" -ge $i ]; then
      sec=$(awk -v a="$t_kill" -v b="$(now)" 'BEGIN {printf "%.2f", b - a}')
      ev=$(grep '"recovered"' "$D/m.events.jsonl" | sed -n "${i}p")
      lost=$(echo "$ev" | sed 's/.*"steps_lost":\([0-9]*\).*/\1/')
      parts=$(echo "$ev" | sed -n 's/.*"end_s":\([0-9.e-]*\),"restore_s":\([0-9.e-]*\),"start_s":\([0-9.e-]*\).*/\1 \2 \3/p' |
              awk '{printf "ending %.2f s, restoring %.2f s, starting to the next step %.2f s", $1, $2, $3}')
      echo "$sec" >> "$D/rec_s"; echo "$lost" >> "$D/lost"
      how=restart; echo "$ev" | grep -q '"in_place":true' && how="in place"
      [ "$how" = restart ] && echo "$sec" >> "$D/restart_s" || echo "$sec" >> "$D/inplace_s"
      line="$line rank $w killed at step >= $k: recovered ($how) in $sec s ($parts), $lost step(s) repeated;"
    else
      line="$line rank $w killed at step >= $k: no recovery;"
    fi
  done
  wait $lp
  rc=$?
  got=$(loss "$D/m.jsonl")
  rel=$(awk -v a="$got" -v b="$ref" 'BEGIN {d = (a - b) / b; if (d < 0) d = -d; printf "%.2e", d}')
  echo "$rel" >> "$D/rel"
  last=$(tail -1 "$D/m.jsonl" | sed 's/{"step":\([0-9]*\).*/\1/')
  good=$(awk -v rc=$rc -v last="$last" -v s=$STEPS -v rel="$rel" -v n="$(n_rec "$D/m.events.jsonl")" \
         'BEGIN {print (rc == 0 && last == s && rel <= 1e-3 && n == 2) ? 1 : 0}')
  [ "$good" = 1 ] && ok_runs=$((ok_runs + 1))
  echo "$line exit $rc, step $last, loss $got (relative difference $rel) $([ "$good" = 1 ] && echo ok || echo FAILED)"
done
med() { sort -n "$1" | awk '{v[NR]=$1} END {if (NR) print NR%2 ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2; else print "-"}'; }
max_s=$(sort -n "$D/rec_s" | tail -1); med_s=$(med "$D/rec_s")
[ -n "$RECYCLE" ] && echo "by path: in place median $(med "$D/inplace_s") s, max $(sort -n "$D/inplace_s" | tail -1) s over" \
  "$(wc -l < "$D/inplace_s") kills; restart median $(med "$D/restart_s") s, max $(sort -n "$D/restart_s" | tail -1) s over $(wc -l < "$D/restart_s")"
echo "summary: $ok_runs of $RUNS runs reached step $STEPS by themselves with 2 recoveries and the final loss within 1e-3;" \
  "recovery from kill to the next step: median $med_s s, max $max_s s over $(wc -l < "$D/rec_s") kills;" \
  "steps repeated: max $(sort -n "$D/lost" | tail -1); largest relative loss difference $(sort -g "$D/rel" | tail -1);" \
  "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
[ "$ok_runs" = "$RUNS" ]
