#!/usr/bin/env bash
# GPT-2's tokenizer: pipetrain tokenize against the npm package gpt-3-encoder under node, on the
# same text (the fortunes corpus and tests/tok/ repeated, each copy numbered), in alternating
# rounds. Ours: `pipetrain tokenize` on the whole text (default 100 MB) with 1 thread and with
# every core, the time it prints (loading the vocabulary, encoding, writing the token file);
# node: encode() on the text's first NODE_MB (default 8 MB; it is about 100x slower), loading
# excluded. Prints the machine, each round, the medians in MB/s and the ratios; and the same per
# CPU-second (user + system time of the process), which a loaded machine changes less.
#   bench/bench_tok.sh [TEXT_MB [NODE_MB [ROUNDS]]]
set -u
cd "$(dirname "$0")/.."
P=${PIPETRAIN:-build/pipetrain}
MB=${1:-100}; NODE_MB=${2:-8}; ROUNDS=${3:-3}
D=$(mktemp -d); trap 'rm -rf "$D"' EXIT
command -v node >/dev/null || { echo "bench_tok: node is missing (make installs it)"; exit 1; }
texts=$(ls /usr/share/games/fortunes/* 2>/dev/null | grep -v '\.dat$' | grep -v '\.u8$')
[ -n "$texts" ] || { echo "bench_tok: the fortunes corpus is missing (make installs it)"; exit 1; }
i=0
while [ "$(stat -c %s "$D/text.txt" 2>/dev/null || echo 0)" -lt $((MB * 1000000)) ]; do
  i=$((i + 1)); { echo "copy $i"; cat $texts tests/tok/*.txt; } >> "$D/text.txt"
done
truncate -s $((MB * 1000000)) "$D/text.txt"
cpu=$(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //')
isa=SSE2; grep -qw avx2 /proc/cpuinfo && isa=AVX2; grep -qw avx512f /proc/cpuinfo && isa=AVX-512
echo "machine: $cpu, $(nproc) cores, $isa; node $(node -v); load $(cut -d' ' -f1-3 /proc/loadavg) at the start"
echo "text: $MB MB for pipetrain, its first $NODE_MB MB for node (fortunes + tests/tok, $i copies)"
ours() {   # threads -> "MB/s MB-per-CPU-second"
  /usr/bin/time -f 'cpu %U %S' -o "$D/time" "$P" tokenize --threads "$1" "$D/text.txt" --out "$D/out.bin" 2>/dev/null |
    sed -E 's/.* in ([0-9.]+) s .*/\1/' > "$D/wall"
  awk -v mb="$MB" -v w="$(cat "$D/wall")" '$1 == "cpu" { printf "%.2f %.2f", mb / w, mb / ($2 + $3) }' "$D/time"
}
n1=(); nn=(); nd=(); c1=(); cn=(); cd=()
for r in $(seq 1 "$ROUNDS"); do
  read -r s ids bytes cpu < <(node bench/tok_npm.js "$D/text.txt" $((NODE_MB * 1000000)))
  nd+=("$(awk -v b="$bytes" -v s="$s" 'BEGIN { printf "%.3f", b / 1e6 / s }')")
  cd+=("$(awk -v b="$bytes" -v s="$cpu" 'BEGIN { printf "%.3f", b / 1e6 / s }')")
  read -r a b < <(ours 1); n1+=("$a"); c1+=("$b")
  read -r a b < <(ours 0); nn+=("$a"); cn+=("$b")
  echo "round $r: node ${nd[-1]} MB/s (${cd[-1]} per CPU-s), pipetrain 1 thread ${n1[-1]} MB/s (${c1[-1]}), $(nproc) threads ${nn[-1]} MB/s (${cn[-1]}) (load $(cut -d' ' -f1 /proc/loadavg))"
done
med() { printf '%s\n' "$@" | sort -g | awk '{ a[NR] = $1 } END { print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2 }'; }
m_node=$(med "${nd[@]}"); m1=$(med "${n1[@]}"); mn=$(med "${nn[@]}")
k_node=$(med "${cd[@]}"); k1=$(med "${c1[@]}"); kn=$(med "${cn[@]}")
echo "median MB/s: node gpt-3-encoder $m_node, pipetrain 1 thread $m1, $(nproc) threads $mn"
awk -v a="$m1" -v b="$mn" -v c="$m_node" -v n="$(nproc)" 'BEGIN { printf "ratio: 1 thread %.1fx node, %d threads %.1fx node (%.2fx one thread)\n", a / c, n, b / c, b / a }'
echo "median MB per CPU-second: node $k_node, pipetrain 1 thread $k1 ($(awk -v a="$k1" -v b="$k_node" 'BEGIN { printf "%.1fx", a / b }')), $(nproc) threads $kn"
echo "load $(cut -d' ' -f1-3 /proc/loadavg) at the end"
