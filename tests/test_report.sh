#!/usr/bin/env bash
# pipetrain report: one self-contained HTML page per set of runs. Checks that the page is
# well-formed XML (every inline SVG included), holds the curves, events and overlays, and that
# odd metrics files (a non-finite loss, a resumed run's repeated steps, a line cut by a crash, an
# empty file, 100k steps) give a sensible page or a clear error.
. tests/lib.sh
P=$(realpath "$PIPETRAIN")
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
grep -q 'step 11: the loss is not a finite number' "$D/nan.html" && ok "report: the nan step is marked" || fail "report: the nan step is marked" "no marker"

# a resumed run: steps 1..30, then 21..40 again (the later lines win), a line cut by a crash last
{ gen 30; gen 20 21; printf '{"step":41,"loss":2.'; } > "$D/res.jsonl"
check "report: a resumed run" "$P" report "$D/res.jsonl" --out "$D/res.html"
check "report: resumed page is XML" xml_ok "$D/res.html"
grep -q 'resumed at step 21' "$D/res.html" && grep -q '10 repeated step lines' "$D/res.html" && grep -q '1 lines cut short' "$D/res.html" \
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

# --- what a review found (each once broke): bounded ticks on a tiny range, a crash then a resume,
# sparse series, a diverged run's marker, text that is not UTF-8, a report from another folder,
# a fresh run reusing a save folder, a long nan run, runs with the same file name, --out over
# the metrics, steps that are not whole numbers >= 0.
printf '{"step":1,"loss":2,"lr":0.3}\n{"step":2,"loss":1,"lr":0.30000000000000004}\n' > "$D/tiny.jsonl"
printf '{"step":1e15,"loss":1}\n' > "$D/huge.jsonl"
check "report: a range of one ulp ends" timeout 10 "$P" report "$D/tiny.jsonl" --out "$D/tiny.html"
check "report: a step of 1e15 ends" timeout 10 "$P" report "$D/huge.jsonl" --out "$D/huge.html"
{ gen 20; printf '{"step":21,"loss":2.'; echo; gen 10 16; } > "$D/cut.jsonl"
check "report: a cut line before a resume" "$P" report "$D/cut.jsonl" --out "$D/cut.html"
awk 'BEGIN { for (s = 1; s <= 300; s++) if (s % 100 == 0) printf "{\"step\":%d,\"loss\":2,\"eval_loss\":%.2f}\n", s, 3 - s / 300; else printf "{\"step\":%d,\"loss\":2}\n", s }' > "$D/ev.jsonl"
"$P" report "$D/ev.jsonl" --out "$D/ev.html" >/dev/null 2>&1
grep -q 'evaluation loss' "$D/ev.html" && [ "$(grep -A200 'evaluation loss' "$D/ev.html" | grep -m1 -c 'L[0-9]')" -ge 1 ] \
  && ok "report: a series logged every 100 steps is drawn as a line" || fail "report: a series logged every 100 steps is drawn as a line" "no segment"
# eval_loss at the step whose weights it measured (eval_step), not at the line it came in: the
# evaluations of steps 100 and 200 complete at steps 110 and 230, one of step 250 is an event
awk 'BEGIN { for (s = 1; s <= 300; s++) if (s == 110 || s == 230) printf "{\"step\":%d,\"loss\":2,\"eval_loss\":%.1f,\"eval_step\":%d}\n", s, s == 110 ? 3 : 2.5, s == 110 ? 100 : 200; else printf "{\"step\":%d,\"loss\":2}\n", s }' > "$D/evs.jsonl"
echo '{"event":"side_task","step":300,"what":"eval","message":"eval: the weights of step 250","eval_loss":2.2,"eval_step":250}' > "$D/evs.events.jsonl"
"$P" report "$D/evs.jsonl" --out "$D/evs.html" >/dev/null 2>&1
# the x of the step axis' tick label N in the evaluation chart, and the x of its curve's points
evchart() { sed -n '/evaluation loss/,/<\/svg>/p' "$D/evs.html"; }
tick_x() { evchart | grep -o "<text x=\"[0-9.]*\" y=\"[0-9.]*\" class=\"xt\">$1<" | sed 's/<text x="\([0-9.]*\)".*/\1/'; }
pts=$(evchart | grep -o 'class="ln" stroke="[^"]*" d="[^"]*"' | sed 's/.* d="//; s/"$//; s/l0 0 //' | tr 'ML' '\n\n' | awk 'NF { print $1 }' | tr '\n' ' ')
want="$(tick_x 100) $(tick_x 200) "
[ -n "$(tick_x 100)" ] && [ "${pts#"$want"}" != "$pts" ] && [ "$(echo "$pts" | wc -w)" -eq 3 ] \
  && ok "report: eval_loss drawn at eval_step (100, 200 and an event's 250), not where it was logged" \
  || fail "report: eval_loss drawn at eval_step" "points at x = $pts; ticks 100, 200 at $want"
check "report: ... the page is XML" xml_ok "$D/evs.html"
gen 5 > "$D/u.jsonl"
printf '{"event":"error","step":3,"message":"a\xff\xfe b \xc3"}\n{"event":"save","step":4,"message":"\\uffff"}\n' > "$D/u.events.jsonl"
check "report: bytes that are not UTF-8" "$P" report "$D/u.jsonl" --out "$D/u.html"
check "report: ... still give XML" xml_ok "$D/u.html"
{ gen 3; echo '{"step":-5,"loss":1}'; } > "$D/neg.jsonl"
expect_error "report: a negative step" 'neg.jsonl: line 4 is not a metrics line' "$P" report "$D/neg.jsonl" --out "$D/e.html"
{ gen 3; echo '{"step":4.5,"loss":1}'; gen 2 5; } > "$D/half.jsonl"
expect_error "report: a step that is not whole" 'half.jsonl: line 4' "$P" report "$D/half.jsonl" --out "$D/e.html"
expect_error "report: --out over the metrics" 'is a file of the run' "$P" report "$D/a.jsonl" --out "$D/a.jsonl"
head -c 10 "$D/a.jsonl" > /dev/null
awk 'BEGIN { for (s = 1; s <= 100000; s++) printf "{\"step\":%d,\"loss\":%s}\n", s, s < 1000 ? "2" : "nan" }' > "$D/nan100k.jsonl"
"$P" report "$D/nan100k.jsonl" --out "$D/nan100k.html" > /dev/null 2>&1
sz=$(stat -c %s "$D/nan100k.html" 2>/dev/null || echo 0)
[ "$sz" -gt 0 ] && [ "$sz" -lt 400000 ] && grep -q 'steps 1000..100000: the loss is not a finite number' "$D/nan100k.html" \
  && ok "report: 99k nan steps are one marker ($sz bytes)" || fail "report: 99k nan steps are one marker" "$sz bytes"
mkdir -p "$D/ra" "$D/rb"; gen 5 > "$D/ra/metrics.jsonl"; gen 6 > "$D/rb/metrics.jsonl"
"$P" report "$D/ra/metrics.jsonl" "$D/rb/metrics.jsonl" --out "$D/ab.html" > /dev/null 2>&1
grep -q 'class="lg">ra<' "$D/ab.html" && grep -q 'class="lg">rb<' "$D/ab.html" && ok "report: runs named by their folders" \
  || fail "report: runs named by their folders" "legend"

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
# a crash mid-line, then a resume: the run's page keeps working
head -c -20 "$D/run/metrics.jsonl" > "$D/x" && mv "$D/x" "$D/run/metrics.jsonl"
train --steps 12 --save "$D/run" --save-every 3 --stages 2 --microbatches 2 --resume "$D/run/ckpt-9" > "$D/cr.out" 2>&1
! grep -q warning "$D/cr.out" && xml_ok "$D/run/metrics.html" && ok "train: a cut metrics line, then a resume" \
  || fail "train: a cut metrics line, then a resume" "$(grep warning "$D/cr.out")"
(cd "$D/run" && "$P" report . --out ../other.html > /dev/null 2>&1)
grep -q 'rank 1' "$D/other.html" && ok "report: the timeline found from another folder" || fail "report: the timeline found from another folder" "none"
# a fresh run reusing the save folder: the page shows it alone
train --steps 4 --save "$D/run" > /dev/null 2>&1
grep -q '1 .. 4 (4 logged)' "$D/run/metrics.html" && grep -q 'earlier run in the same file not shown' "$D/run/metrics.html" \
  && ok "train: a fresh run in a used folder is shown alone" || fail "train: a fresh run in a used folder is shown alone" "mixed"
grep -c 'class="ev"' "$D/div.html" | grep -qv '^0$' && ok "train: the diverged step is marked on the curves" \
  || fail "train: the diverged step is marked on the curves" "no marker"
done_tests
