// Times the npm package gpt-3-encoder (one node thread) on the first BYTES bytes of a text file,
// for bench/bench_tok.sh. The text is encoded line by line (cut at a newline alone between two
// non-spaces, where GPT-2's rule always ends a piece), since the package's encode() is
// quadratic in the length of its input. Prints "SECONDS IDS BYTES CPU_SECONDS"; the times
// exclude loading.
'use strict';
const fs = require('fs');
const path = require('path');
const pkg = process.env.PIPETRAIN_GPT2_DIR || path.join(__dirname, '..', 'build', 'npm', 'node_modules', 'gpt-3-encoder');
const enc = require(path.join(pkg, 'Encoder.js'));
const [file, bytes] = process.argv.slice(2);
const buf = fs.readFileSync(file);
const text = buf.subarray(0, Math.min(buf.length, Number(bytes) || buf.length)).toString('utf8');
const parts = text.split(/(?<=\S\n)(?=\S)/u);
const t0 = process.hrtime.bigint(), c0 = process.cpuUsage();
let n = 0;
for (const p of parts) n += enc.encode(p).length;
const s = Number(process.hrtime.bigint() - t0) / 1e9, c = process.cpuUsage(c0);
console.log(s.toFixed(3), n, Buffer.byteLength(text, 'utf8'), ((c.user + c.system) / 1e6).toFixed(3));
