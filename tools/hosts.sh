#!/usr/bin/env bash
# Hosts on one machine, for multi-host runs of pipetrain without a cluster: N network namespaces
# joined by veth pairs to a bridge (in a namespace of its own), addresses inside those namespaces
# only, Open MPI started across them over TCP with a hostfile and a launch agent that runs each
# daemon inside its host's namespace (in place of ssh). One host's link can be shaped with
# `tc qdisc tbf` (rate, burst, latency; netem is not available on these kernels). Needs root and
# iproute2. docs/hosts.md has the recipe for real machines.
#
#   tools/hosts.sh up N                 make hosts h0..h(N-1): 10.77.0.1 .. 10.77.0.N
#   tools/hosts.sh check                exit 0 when namespaces can be made here (else says why)
#   tools/hosts.sh hostfile [SLOTS]     print the hostfile (one line per host)
#   tools/hosts.sh mpirun ARGS...       mpirun from h0 over all hosts (ARGS as for mpirun)
#   tools/hosts.sh shape K RATE [BURST [LATENCY]]   e.g. shape 1 30mbit 32kbit 400ms; "off" to clear
#   tools/hosts.sh exec K CMD...        run CMD inside host K
#   tools/hosts.sh kill K [NAME]        kill every process inside host K (a dead host), or only
#                                       those named NAME (a dead rank: kill 1 pipetrain)
#   tools/hosts.sh down                 remove the hosts (also after a failure; idempotent)
#
# Environment: PT_HOSTS (name prefix, default "pth"; <= 6 characters so interface names fit),
# PT_HOSTS_TIMEOUT (seconds mpirun may run, default 300), PT_HOSTS_FILE (a hostfile of your own
# for mpirun instead of one line per host), PT_HOSTS_SLOTS (ranks per host, default 1),
# PT_HOSTS_SKEW ("K:SECONDS,...": host K's ranks read their clock SECONDS off, through pipetrain's
# PT_CLOCK_SKEW test hook: hosts with clocks of their own, for tests of clock alignment).
set -u
P=${PT_HOSTS:-pth}
NET=10.77.0
SW=${P}sw
STATE=/tmp/$P.hosts
here=$(cd "$(dirname "$0")" && pwd)

die() { echo "hosts: $*" >&2; exit 1; }
ns() { echo "${P}h$1"; }
n_hosts() { [ -f "$STATE" ] && cat "$STATE" || echo 0; }

cmd_check() {
  [ "$(id -u)" = 0 ] || { echo "hosts: not root: network namespaces need root"; return 1; }
  command -v ip >/dev/null || { echo "hosts: ip (iproute2) not found"; return 1; }
  local t="${P}chk$$"
  ip netns add "$t" 2>/dev/null || { echo "hosts: cannot make a network namespace here"; return 1; }
  ip netns del "$t"
  if ! ip link add "${P}c0" type veth peer name "${P}c1" 2>/dev/null; then
    echo "hosts: cannot make veth pairs here"; return 1
  fi
  ip link del "${P}c0" 2>/dev/null
  return 0
}

cmd_up() {
  local n=${1:-}
  [[ "$n" =~ ^[0-9]+$ ]] && [ "$n" -ge 1 ] && [ "$n" -le 16 ] || die "up N: N must be 1..16 (got '$n')"
  [ ${#P} -le 6 ] || die "PT_HOSTS '$P' is longer than 6 characters (interface names would not fit)"
  cmd_check >/dev/null || die "$(cmd_check)"
  cmd_down 2>/dev/null
  set -e
  ip netns add "$SW"
  ip -n "$SW" link add br0 type bridge
  ip -n "$SW" link set br0 up
  ip -n "$SW" link set lo up
  for ((i = 0; i < n; i++)); do
    local h; h=$(ns $i)
    ip netns add "$h"
    ip link add "${P}v$i" type veth peer name "${P}p$i"
    ip link set "${P}v$i" netns "$h"
    ip link set "${P}p$i" netns "$SW"
    ip -n "$h" link set "${P}v$i" name eth0
    ip -n "$h" addr add "$NET.$((i + 1))/24" dev eth0
    ip -n "$h" link set eth0 up
    ip -n "$h" link set lo up
    ip -n "$SW" link set "${P}p$i" master br0
    ip -n "$SW" link set "${P}p$i" up
  done
  set +e
  echo "$n" > "$STATE"
  echo "hosts: $n up ($NET.1 .. $NET.$n), namespaces $(ns 0) .. $(ns $((n - 1)))"
}

cmd_down() {
  local n; n=$(n_hosts)
  for ((i = 0; i < (n > 16 ? 16 : n); i++)); do cmd_kill "$i" 2>/dev/null; done
  for h in $(ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^${P}(h[0-9]+|sw)$"); do
    ip netns pids "$h" 2>/dev/null | xargs -r kill -9 2>/dev/null
    ip netns del "$h"
  done
  rm -f "$STATE" "/tmp/$P.hostfile"
  return 0
}

cmd_hostfile() {
  local n; n=$(n_hosts); [ "$n" -ge 1 ] || die "no hosts are up (tools/hosts.sh up N)"
  for ((i = 0; i < n; i++)); do echo "$NET.$((i + 1)) slots=${1:-1}"; done
}

cmd_mpirun() {
  local n; n=$(n_hosts); [ "$n" -ge 1 ] || die "no hosts are up (tools/hosts.sh up N)"
  local hf=${PT_HOSTS_FILE:-/tmp/$P.hostfile} e skew0=()
  [ -n "${PT_HOSTS_FILE:-}" ] || cmd_hostfile "${PT_HOSTS_SLOTS:-1}" > "$hf"
  for e in ${PT_HOSTS_SKEW:+${PT_HOSTS_SKEW//,/ }}; do   # host 0's ranks are mpirun's children; the agent does the rest
    [[ "$e" =~ ^[0-9]+:-?[0-9]+(\.[0-9]*)?$ ]] || die "PT_HOSTS_SKEW: '$e' is not K:SECONDS (e.g. 1:5.0)"
    [ "${e%%:*}" = 0 ] && skew0=(PT_CLOCK_SKEW="${e#*:}")
  done
  # From h0: the daemons of the other hosts start through the agent, inside their namespaces;
  # messages go over TCP on eth0 only; no binding (the hosts share this machine's cores).
  # Messages up to 1 MB go eagerly (Open MPI's TCP default is 64 kB, then a rendezvous whose
  # answer queues behind the other direction's data on a slow link: docs/comm.md, "A real slow
  # link"); OMPI_MCA_btl_tcp_* in the environment still win.
  local eager=1048576
  timeout "${PT_HOSTS_TIMEOUT:-300}" ip netns exec "$(ns 0)" env OMPI_ALLOW_RUN_AS_ROOT=1 \
    OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 PT_HOSTS="$P" ${skew0[@]+"${skew0[@]}"} \
    OMPI_MCA_btl_tcp_eager_limit="${OMPI_MCA_btl_tcp_eager_limit:-$eager}" \
    OMPI_MCA_btl_tcp_rndv_eager_limit="${OMPI_MCA_btl_tcp_rndv_eager_limit:-$eager}" \
    OMPI_MCA_btl_tcp_max_send_size="${OMPI_MCA_btl_tcp_max_send_size:-$eager}" \
    mpirun --hostfile "$hf" --mca plm_rsh_agent "$here/hosts_agent.sh" \
      --mca btl tcp,self --mca btl_tcp_if_include eth0 --mca oob_tcp_if_include eth0 \
      --bind-to none "$@" &
  local pid=$! down=""
  down=$(watch_hosts "$pid" "$n")
  wait "$pid"
  local rc=$?
  [ $rc -ne 0 ] && [ -n "$down" ] && echo "hosts: $down" >&2
  return $rc
}

# While mpirun (pid) runs: the first host other than h0 whose processes all vanished, or whose
# ranks (pipetrain processes) vanished while its other processes ran, before h0's ranks ended:
# "host K (ADDR) ..." (a dead host or rank, not the job's end; printed only when mpirun fails).
# Whether each process runs is read every 20 ms from /proc without a fork; the hosts' processes
# are listed every 0.3 s (ip netns pids), and a verdict waits for a fresh list: at once for a
# host (a new process may have replaced another), 0.3 s for a rank (the processes of a killed
# host die one by one on a loaded machine; a dead rank's daemon lives on for seconds). A pid is
# known with its start tick: a pid reused by another process is not the host's.
# The order is read per process, not per look: h0's ranks end milliseconds after a peer host
# dies (mpirun aborts them), and a look reads one process after another, so a loaded machine
# can see h0's rank gone before it sees the killed host gone, in one look or across two. A host
# counts as dead before h0's ranks ended when it was last read alive before h0's ranks were read
# gone, and a process that is exiting (PF_EXITING: it has taken its kill, and closes its sockets,
# which is how its peers learn of it, only after) counts as gone. A rank of h0 that dies first
# is named by mpirun itself.
watch_hosts() {
  local pid=$1 n=$2 k p t now next=0 r0_seen=0 r0_end=-1 seen=() ranks=() verdict="" vk=0 vt=0
  local alive=() ralive=()   # per host: when a process of it, a rank of it, was last read alive
  local -A host=() rank=() start=()
  local ST=()
  while kill -0 "$pid" 2>/dev/null; do
    now=${EPOCHREALTIME/./}
    local fresh=0
    if [ "$now" -ge "$next" ]; then
      for ((k = 0; k < n; k++)); do
        for p in $(ip netns pids "$(ns $k)" 2>/dev/null); do
          [ -n "${host[$p]:-}" ] && proc_stat "$p" && [ "${ST[19]}" = "${start[$p]}" ] && continue
          local comm=""; read -r comm 2>/dev/null < "/proc/$p/comm"
          proc_stat "$p" || continue
          host[$p]=$k; start[$p]=${ST[19]}; rank[$p]=0; [ "$comm" = pipetrain ] && rank[$p]=1
        done
      done
      next=$(( now + 300000 )); fresh=1
    fi
    local c=() r=() r0_read=0
    for p in "${!host[@]}"; do
      k=${host[$p]}
      if ! proc_runs "$p"; then   # gone, dying, or the pid reused
        [ "$k" = 0 ] && [ "${rank[$p]}" = 1 ] && r0_read=${EPOCHREALTIME/./}
        continue
      fi
      t=${EPOCHREALTIME/./}
      c[k]=$(( ${c[k]:-0} + 1 )); r[k]=$(( ${r[k]:-0} + ${rank[$p]} ))
      alive[k]=$t; [ "${rank[$p]}" = 1 ] && ralive[k]=$t
    done
    now=${EPOCHREALTIME/./}
    if [ -n "$verdict" ] && [ $fresh = 1 ] && [ "$now" -ge "$vt" ]; then   # does it still hold?
      if [ "${c[vk]:-0}" -eq 0 ]; then echo "host $vk ($NET.$((vk + 1))) went down while the job ran"; return
      elif [ "${r[vk]:-0}" -eq 0 ]; then echo "$verdict"; return; fi
      verdict=""
    fi
    [ "${r[0]:-0}" -gt 0 ] && r0_seen=1
    [ $r0_seen = 1 ] && [ "${r[0]:-0}" -eq 0 ] && [ $r0_end -lt 0 ] && r0_end=$r0_read
    for ((k = 1; k < n; k++)); do
      [ "${c[k]:-0}" -gt 0 ] && seen[k]=1
      [ "${r[k]:-0}" -gt 0 ] && ranks[k]=1
      [ $r0_seen = 1 ] && [ -z "$verdict" ] || continue
      if [ "${c[k]:-0}" -eq 0 ] && [ "${seen[k]:-0}" = 1 ] && { [ $r0_end -lt 0 ] || [ "${alive[k]}" -lt $r0_end ]; }; then
        verdict="host $k ($NET.$((k + 1))) went down while the job ran"; vk=$k; vt=$now; next=0
      elif [ "${r[k]:-0}" -eq 0 ] && [ "${ranks[k]:-0}" = 1 ] && { [ $r0_end -lt 0 ] || [ "${ralive[k]}" -lt $r0_end ]; }; then
        verdict="host $k ($NET.$((k + 1))): its rank died while the job ran"; vk=$k; vt=$((now + 300000))
      fi
    done
    [ "$next" = 0 ] || sleep 0.02
  done
  [ -n "$verdict" ] && echo "$verdict"   # mpirun ended before the verdict could be confirmed
}

# ST: the fields of /proc/PID/stat after the command's name (ST[0] the state, ST[6] the flags,
# ST[19] the start tick, which tells a reused pid), read without a fork; 1 when the process is gone.
proc_stat() {
  local st
  ST=()
  read -r st 2>/dev/null < "/proc/$1/stat" || return 1
  st=${st##*) }
  ST=($st)
}

# 0 when the process pid known with start tick start[pid] runs: not gone, not a zombie, not
# exiting (PF_EXITING, 0x4: set as it takes a kill, before it closes its files), not a reused pid.
proc_runs() {
  proc_stat "$1" && [ "${ST[0]}" != Z ] && [ "${ST[0]}" != X ] && [ "${ST[19]}" = "${start[$1]}" ] \
    && (( (ST[6] & 4) == 0 ))
}

cmd_shape() {
  local k=${1:-} rate=${2:-}; [ -n "$k" ] && [ -n "$rate" ] || die "shape K RATE [BURST [LATENCY]]"
  local h; h=$(ns "$k"); ip netns list | grep -q "^$h" || die "host $k is not up"
  ip netns exec "$h" tc qdisc del dev eth0 root 2>/dev/null
  [ "$rate" = off ] && return 0
  ip netns exec "$h" tc qdisc add dev eth0 root tbf rate "$rate" burst "${3:-32kbit}" latency "${4:-400ms}"
}

cmd_exec() { local k=$1; shift; ip netns exec "$(ns "$k")" "$@"; }

# kill K [NAME]: every process inside host K, or only those whose command name is NAME. One
# kill call for all of them: a host dies at once, as a real one does (a rank killed a moment
# before its host's daemon would be taken for a dead rank).
cmd_kill() {
  local h pids=() comm; h=$(ns "$1")
  for pid in $(ip netns pids "$h" 2>/dev/null); do
    comm=""; read -r comm 2>/dev/null < "/proc/$pid/comm"
    [ -z "${2:-}" ] || [ "$comm" = "$2" ] && pids+=("$pid")
  done
  [ ${#pids[@]} -eq 0 ] || kill -9 "${pids[@]}" 2>/dev/null
  return 0
}

sub=${1:-}; shift || true
case "$sub" in
  up) cmd_up "$@" ;;
  down) cmd_down ;;
  check) cmd_check ;;
  hostfile) cmd_hostfile "$@" ;;
  mpirun) cmd_mpirun "$@" ;;
  shape) cmd_shape "$@" ;;
  exec) cmd_exec "$@" ;;
  kill) cmd_kill "$@" ;;
  *) sed -n '2,20p' "$0" >&2; exit 2 ;;
esac
