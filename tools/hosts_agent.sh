#!/bin/sh
# Open MPI's launch agent for tools/hosts.sh (in place of ssh): runs the daemon's command inside
# the network namespace of the host named by its address (10.77.0.K+1 is host K). A host that is
# not up is a named failure at once, never a wait.
P=${PT_HOSTS:-pth}
while [ $# -gt 0 ]; do case "$1" in -*) shift ;; *) break ;; esac; done   # ssh-style options
host=$1; shift
k=${host##*.}
case "$host" in
  10.77.0.*) ;;
  *) echo "hosts: $host: not a host of tools/hosts.sh (10.77.0.N)" >&2; exit 255 ;;
esac
ns="${P}h$((k - 1))"
if ! ip netns list | grep -q "^$ns\b"; then
  echo "hosts: $host does not answer: host $((k - 1)) ($ns) is not up" >&2
  exit 255
fi
# PT_HOSTS_SKEW "K:SECONDS,...": this host's processes read their clock SECONDS off (the
# PT_CLOCK_SKEW test hook of pt_now); hosts not named read it as it is.
if [ -n "${PT_HOSTS_SKEW:-}" ]; then
  skew=0
  IFS=,
  for e in $PT_HOSTS_SKEW; do [ "${e%%:*}" = "$((k - 1))" ] && skew=${e#*:}; done
  unset IFS
  exec ip netns exec "$ns" env PT_CLOCK_SKEW="$skew" /bin/sh -c "$*"
fi
exec ip netns exec "$ns" /bin/sh -c "$*"
