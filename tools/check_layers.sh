#!/usr/bin/env bash
# Keeps the layers of src/ honest. Two checks, each line "ok NAME" or "FAIL NAME: why":
#  1. includes: a file in src/<folder>/ may include only its own folder and the folders below it
#     in LAYERS (the one place the order is written; docs/architecture.md draws it);
#  2. calls: no cycle between the object files of the library (a file that calls into a second
#     file that calls back into the first), read from the symbols `nm` lists.
# Usage: tools/check_layers.sh [BUILD]   (BUILD: where src/*/*.o are; check 2 skips without it)
set -u
cd "$(dirname "$0")/.."
BUILD=${1:-build}

# Lowest first. A folder may include itself and any folder to its left.
LAYERS="util nn io tok model optim ckpt sched trace report sim comm plan run harvest adapt train launch cli"

rank_of() { local i=0; for l in $LAYERS; do [ "$l" = "$1" ] && { echo $i; return; }; i=$((i + 1)); done; echo -1; }

bad=0
for dir in src/*/; do
  mod=$(basename "$dir")
  r=$(rank_of "$mod")
  if [ "$r" -lt 0 ]; then echo "FAIL layers: src/$mod is not in LAYERS (tools/check_layers.sh): place it"; bad=1; continue; fi
  while IFS=: read -r file line inc; do
    to=${inc%%/*}
    t=$(rank_of "$to")
    if [ "$t" -lt 0 ]; then echo "FAIL layers: $file:$line includes \"$inc\": unknown folder $to"; bad=1
    elif [ "$t" -gt "$r" ]; then
      echo "FAIL layers: $file:$line includes \"$inc\": $mod may not include $to (it is above; order: $LAYERS)"; bad=1
    fi
  done < <(grep -n '^[[:space:]]*#[[:space:]]*include[[:space:]]*"[a-z_]*/' "$dir"*.[ch] 2>/dev/null |
           sed -E 's/^([^:]*):([0-9]*):.*"([^"]*)".*/\1:\2:\3/')
done
[ $bad -eq 0 ] && echo "ok layers: every include goes down or sideways ($LAYERS)"

# Call cycles between files: edges a.o -> b.o when a uses a symbol b defines.
objs=$(ls "$BUILD"/src/*/*.o 2>/dev/null | grep -v '/cli/')
if [ -z "$objs" ]; then echo "ok file cycles: skipped (no objects under $BUILD/src)"; exit $bad; fi
cyc=$(for o in $objs; do
        n=${o#"$BUILD"/src/}; n=${n%.o}
        nm "$o" | awk -v f="$n" '$1 ~ /^[TDBR]$/ {print "D", f, $2} $2 ~ /^[TDBR]$/ {print "D", f, $3} $1 == "U" {print "U", f, $2}'
      done | awk '
  $1 == "D" { def[$3] = $2; next }
  { use[++n] = $2 " " $3 }
  END {
    for (i = 1; i <= n; i++) { split(use[i], p, " "); d = def[p[2]];
      if (d != "" && d != p[1] && !((p[1] SUBSEP d) in e)) { e[p[1], d] = 1; adj[p[1]] = adj[p[1]] " " d } }
    for (s in adj) {                      # does s reach itself? (breadth-first, small graph)
      delete seen; q[1] = s; h = 1; t = 1; from[s] = ""
      while (h <= t) { x = q[h++]; m = split(adj[x], nb, " ")
        for (k = 1; k <= m; k++) { y = nb[k]
          if (y == s) { path = x; z = x; while (from[z] != "" && z != s) { z = from[z]; path = z " -> " path }
                        print s ": " path " -> " s; h = t + 1; break }
          if (!(y in seen)) { seen[y] = 1; from[y] = x; q[++t] = y } } }
    } }' | sort -u)
if [ -n "$cyc" ]; then
  echo "$cyc" | sed 's/^/FAIL file cycles: /'
  exit 1
fi
echo "ok file cycles: no two library files call each other, directly or around a loop"
exit $bad
