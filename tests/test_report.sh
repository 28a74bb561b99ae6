#!/usr/bin/env bash
# pipetrain report: one self-contained HTML page per set of runs. Checks that the page is
# well-formed XML (every inline SVG included), holds the curves, events and overlays, and that
# odd metrics files (a non-finite loss, a resumed run's repeated steps, a line cut by a crash, an
# empty file, 100k steps) give a sensible page or a clear error.
. tests/lib.sh
P=$PIPETRAIN
D=$TEST_TMP/report
mkdir -p "$D"
xml_ok() { xmllint --noout "$1"; }

# a synthetic run: steps 1..N, a falling loss, every key the trainer writes
gen() {   # gen N FIRST > file
  awk -v n="$1" -v f="${2:-1}" 'BEGIN { for (s = f; s < f + n; s++)
    printf "{\"step\":%d,\"loss\":%.6f,\"lr\":%.6e,\"grad_norm\":%.4f,\"tokens_per_s\":%.1f,\"step_ms\":%.3f,\"bubble_fraction\":%.4f}\n",
      s, 5 * exp(-s / 300.0) + 1 + 0.05 * sin(s), 1e-3, 1 + 1 / s, 4000 + s % 7, 60 + s % 5, 0.12 }'
}
gen 200 > "$D/a.jsonl"
echo '{"event":"start","step":0,"layout":{"stages":2,"dp":1,"schedule":"zb-h1"},"model":{"n_layer":4},"machine":{"cpu":"x & <y>"}}' > "$D/a.events.jsonl"
echo '{"event":"save","step":100,"message":"saved run/ckpt-100"}' >> "$D/a.events.jsonl"
check "report: one run" "$P" report "$D/a.jsonl" --out "$D/a.html"
check "report: the page is well-formed XML" xml_ok "$D/a.html"
check "report: default path beside the metrics" "$P" report "$D/a.jsonl"
[ -s "$D/a.html" ] && ok "report: a.jsonl -> a.html" || fail "report: a.jsonl -> a.html" "missing"
n=$(grep -c '<svg' "$D/a.html")
[ "$n" -ge 6 ] && ok "report: a chart per series ($n)" || fail "report: a chart per series" "$n svg elements"
grep -q 'saved run/ckpt-100' "$D/a.html" && ok "report: events are marked" || fail "report: events are marked" "no save event"
grep -q 'x &amp; &lt;y&gt;' "$D/a.html" && ok "report: text is escaped" || fail "report: text is escaped" "no escaped cpu name"
grep -q 'zb-h1' "$D/a.html" && ok "report: the layout is shown" || fail "report: the layout is shown" "no schedule"

# several runs overlaid; a save folder as a run
mkdir -p "$D/dir"; gen 150 > "$D/dir/metrics.jsonl"
check "report: two runs, one of them a folder" "$P" report "$D/a.jsonl" "$D/dir" --out "$D/two.html" --title "a vs b"
check "report: two runs page is XML" xml_ok "$D/two.html"
grep -q '<title>a vs b</title>' "$D/two.html" && grep -q "$D/dir" "$D/two.html" && ok "report: both runs named" \
  || fail "report: both runs named" "title or folder missing"

# a non-finite loss: a gap and a marker, not an error
{ gen 10; echo '{"step":11,"loss":nan,"lr":1e-3,"grad_norm":nan,"tokens_per_s":1,"step_ms":1}'; gen 10 12; } > "$D/nan.jsonl"
check "report: a nan step" "$P" report "$D/nan.jsonl" --out "$D/nan.html"
check "report: nan page is XML" xml_ok "$D/nan.html"
grep -q 'step 11: the loss is not finite' "$D/nan.html" && ok "report: the nan step is marked" || fail "report: the nan step is marked" "no marker"

# a resumed run: steps 1..30, then 21..40 again (the later lines win), a line cut by a crash last
{ gen 30; gen 20 21; printf '{"step":41,"loss":2.'; } > "$D/res.jsonl"
check "report: a resumed run" "$P" report "$D/res.jsonl" --out "$D/res.html"
check "report: resumed page is XML" xml_ok "$D/res.html"
grep -q 'resumed at step 21' "$D/res.html" && grep -q '10 repeated step lines' "$D/res.html" && grep -q '1 unreadable' "$D/res.html" \
  && ok "report: resume and cut line reported" || fail "report: resume and cut line reported" "missing notes"

# clear errors
: > "$D/empty.jsonl"
expect_error "report: an empty metrics file" 'empty.jsonl: no steps in it \(the file is empty\)' "$P" report "$D/empty.jsonl" --out "$D/e.html"
expect_error "report: a missing file" 'nope.jsonl' "$P" report "$D/nope.jsonl" --out "$D/e.html"
{ gen 3; echo 'not json'; gen 3 4; } > "$D/bad.jsonl"
expect_error "report: a bad line in the middle" 'bad.jsonl: line 4 is not a metrics line' "$P" report "$D/bad.jsonl" --out "$D/e.html"
expect_error "report: no run given" 'give one or more runs' "$P" report --out "$D/e.html"
[ ! -e "$D/e.html" ] && ok "report: nothing written on error" || fail "report: nothing written on error" "e.html exists"

# 100k steps: drawn from min/max per pixel column, so the page stays small
gen 100000 > "$D/big.jsonl"
start=$(date +%s)
check "report: 100k steps" "$P" report "$D/big.jsonl" --out "$D/big.html"
sz=$(stat -c %s "$D/big.html")
[ "$sz" -lt 1500000 ] && ok "report: 100k-step page is small ($sz bytes)" || fail "report: 100k-step page is small" "$sz bytes"
check "report: 100k page is XML" xml_ok "$D/big.html"
# written by train: events and the page beside the metrics, a pipelined run with its timeline
cat > "$D/cfg.json" <<'J'
{"n_layer": 2, "n_head": 2, "n_embd": 16, "vocab_size": 256, "n_positions": 16}
J
for i in $(seq 1 100); do echo "the quick brown fox jumps over the lazy dog $i"; done > "$D/text.txt"
train() { "$P" train --config "$D/cfg.json" --data "$D/text.txt" --batch 4 --seq 16 --lr 3e-3 "$@"; }
if train --steps 6 --save "$D/run" --save-every 3 --stages 2 --microbatches 2 > "$D/train.out" 2>&1; then
  ok "train --save: runs"; else fail "train --save: runs" "$(tail -3 "$D/train.out")"; fi
[ "$(wc -l < "$D/run/metrics.jsonl")" -eq 6 ] && ok "train --save keeps DIR/metrics.jsonl" || fail "train --save keeps DIR/metrics.jsonl" "no 6 lines"
grep -q '"event":"start".*"schedule":"1f1b"' "$D/run/metrics.events.jsonl" && grep -q '"event":"save","step":3' "$D/run/metrics.events.jsonl" \
  && grep -q '"event":"end".*"simulated_ms"' "$D/run/metrics.events.jsonl" && ok "train: start, save and end events" \
  || fail "train: start, save and end events" "$(cat "$D/run/metrics.events.jsonl" | cut -c1-120)"
check "train: its report is XML" xml_ok "$D/run/metrics.html"
grep -q "report: $D/run/metrics.html" "$D/train.out" && ok "train: prints the report's path" || fail "train: prints the report's path" "no line"
grep -q 'rank 1' "$D/run/metrics.html" && ok "train: the report holds the last step's timeline" || fail "train: the report holds the last step's timeline" "no timeline"
train --steps 9 --save "$D/run" --save-every 3 --stages 2 --microbatches 2 --resume "$D/run/ckpt-6" > /dev/null 2>&1
grep -q '"event":"resume","step":7' "$D/run/metrics.events.jsonl" && ok "train: a resume is an event" || fail "train: a resume is an event" "none"
check "report: the save folder as the run" "$P" report "$D/run" --out "$D/run2.html"
grep -q 'resume' "$D/run2.html" && ok "report: the resume is marked" || fail "report: the resume is marked" "none"
train --steps 8 --lr 1e10 --grad-clip 0 --metrics "$D/div.jsonl" > /dev/null 2>&1
grep -q '"event":"error".*diverged' "$D/div.events.jsonl" && ok "train: a diverged run logs its error" || fail "train: a diverged run logs its error" "no error event"
[ -s "$D/div.html" ] && xml_ok "$D/div.html" && grep -q 'diverged' "$D/div.html" \
  && ok "train: a diverged run still gets its page" || fail "train: a diverged run still gets its page" "missing"
done_tests
