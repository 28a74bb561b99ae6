#!/usr/bin/env bash
# Runs dev/recycle_p2p.c (see its head) under `mpirun --enable-recovery -np 4`: kill -9 of rank
# VICTIM from outside once every rank passed round 10, then the survivors' checks.
#   dev/recycle_p2p.sh [VICTIM] [MCA ARGS...]        one machine
#   PT_HOSTS=rcy dev/recycle_p2p.sh hosts [VICTIM]    two namespace hosts of 2 slots (as root)
set -u
here=$(cd "$(dirname "$0")/.." && pwd)
tmp=$(mktemp -d /tmp/recycle_p2p.XXXXXX)
hosts=0
if [ "${1:-}" = hosts ]; then hosts=1; shift; fi
victim=${1:-2}; shift || true
mpicc -O1 -o "$tmp/p2p" "$here/dev/recycle_p2p.c" || exit 1
mkdir -p "$tmp/prog"
root=(); [ "$(id -u)" = 0 ] && root=(--allow-run-as-root)
if [ $hosts = 1 ]; then
  export PT_HOSTS=${PT_HOSTS:-rcy}
  trap '"$here/tools/hosts.sh" down >/dev/null 2>&1; rm -rf "$tmp"' EXIT
  "$here/tools/hosts.sh" up 2 >/dev/null || exit 1
  PT_HOSTS_SLOTS=2 timeout 120 "$here/tools/hosts.sh" mpirun --enable-recovery --oversubscribe -np 4 \
    "$@" "$tmp/p2p" "$tmp/dead" "$tmp/prog" >"$tmp/out" 2>&1 &
else
  trap 'rm -rf "$tmp"' EXIT
  timeout 120 mpirun "${root[@]}" --enable-recovery --oversubscribe -np 4 "$@" \
    "$tmp/p2p" "$tmp/dead" "$tmp/prog" >"$tmp/out" 2>&1 &
fi
job=$!
for ((i = 0; i < 3000; i++)); do      # every rank past round 10 (60 s bound)
  n=0
  for r in 0 1 2 3; do
    read -r round pid 2>/dev/null <"$tmp/prog/rank-$r" || continue
    [ "${round:-0}" -ge 10 ] && n=$((n + 1))
  done
  [ $n = 4 ] && break
  sleep 0.02
done
read -r round pid <"$tmp/prog/rank-$victim"
pids_before=$(for r in 0 1 2 3; do [ $r = "$victim" ] || cut -d' ' -f2 "$tmp/prog/rank-$r"; done | tr '\n' ' ')
echo "killing rank $victim (pid $pid) at its round $round; survivors' pids: $pids_before"
kill -9 "$pid"
sleep 0.3
echo "$victim" >"$tmp/dead"
wait $job; rc=$?
echo "mpirun exit $rc"
sort "$tmp/out"
