#!/usr/bin/env python3
# Per-message link times from a measured trace (train --trace, 2 ranks): for each direction, in
# the order sent, milliseconds from when the message was posted (or the one before it arrived,
# if later) to when its receiver got it; '?' marks one whose receiver did not wait (it may have
# arrived earlier). The same reading as src/run/run_link.c, by hand. Usage: link_held.py TRACE
import json, sys
ev = [e for e in json.load(open(sys.argv[1]))['traceEvents'] if e.get('ph') == 'X']
recv = {(e['pid'], e['name']): e for e in ev if 'RECV' in e['name']}
for d, (sk, rk) in enumerate([('SEND_F', 'RECV_F'), ('SEND_B', 'RECV_B')]):
    msgs = []
    for e in ev:
        if sk not in e['name']: continue
        g, mb = e['name'].split(sk)
        r = recv.get((1 - e['pid'], f"{int(g) + (1 if d == 0 else -1)}{rk}{mb}"))
        if r: msgs.append((e['ts'], r['ts'] + r['dur'], r['dur']))
    msgs.sort()
    prev, out = None, []
    for post, got, waited in msgs:
        start = post if prev is None or prev < post else prev
        out.append(f"{(got - start) / 1000:.0f}{'' if waited > 50 else '?'}")
        prev = got
    print(sk, 'ms:', ' '.join(out))
# and the compute actions' median and mean (a loaded machine's preemptions: the mean is what a step pays)
import statistics
for k in 'FBW':
    d = [e['dur'] / 1000 for e in ev if e['name'][1:].rstrip('0123456789') == k]
    if d: print(f"{k}: {len(d)} actions, median {statistics.median(d):.1f} ms, mean {statistics.mean(d):.1f} ms")
