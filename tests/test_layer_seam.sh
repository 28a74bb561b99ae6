#!/usr/bin/env bash
# Where layers sit is model/'s alone (src/model/gpt_seq.c, docs/architecture.md "A layer kind"):
# no file outside src/model/ counts the layers from n_layer (n_layer + 2, + 3), takes the head as
# the last layer by arithmetic (n_layers - 1, gpt_num_layers(m) - 1) or subtracts the embedding
# and the head from a chunk's layers ((c == 0) - ...). Fails naming the file and line.
cd "$(dirname "$0")/.."
. tests/lib.sh
pat='n_layer *\+ *[0-9]|n_layers *- *[12]\b|gpt_num_layers\([^)]*\) *- *[12]|gpt_config_num_layers\([^)]*\) *- *[12]|\(c *== *0\) *-'
hits=$(grep -rnE "$pat" src --include='*.c' --include='*.h' | grep -v '^src/model/')
if [ -z "$hits" ]; then ok "layer seam: no layer arithmetic outside src/model"
else fail "layer seam: layer arithmetic outside src/model (ask model/gpt.h's layer sequence)" "$hits"; fi
# the check can fail: the same pattern finds the old forms
probe=$(printf 'int n = cfg->n_layer + 2;\nint h = lo->n_layers - 1;\n' | grep -cE "$pat")
if [ "$probe" = 2 ]; then ok "layer seam: the pattern finds n_layer + 2 and n_layers - 1"
else fail "layer seam: the pattern" "found $probe of 2"; fi
done_tests
