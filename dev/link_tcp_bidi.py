#!/usr/bin/env python3
# Plain TCP over one connection between two hosts of tools/hosts.sh, without Open MPI: 8 messages
# of 262144 bytes (issue 19's step) one way alone, then both ways at once, seconds per direction.
# Shows what a tc tbf link does to two directions sharing it (docs/comm.md, "A real slow link").
#   PT_HOSTS=x tools/hosts.sh up 2; for h in 0 1; do PT_HOSTS=x tools/hosts.sh shape $h 30mbit 64kb 2s; done
#   PT_HOSTS=x tools/hosts.sh exec 1 python3 dev/link_tcp_bidi.py srv bidi &
#   PT_HOSTS=x tools/hosts.sh exec 0 python3 dev/link_tcp_bidi.py cli bidi      (or: uni)
import socket, sys, threading, time
role, mode = sys.argv[1], sys.argv[2]
N, SZ = 8, 262144
out = {}
def sender(s, tag):
    t = time.time()
    for _ in range(N): s.sendall(b'x' * SZ)
    out[tag + ' sent'] = time.time() - t
def receiver(s, tag):
    t, got = time.time(), 0
    while got < N * SZ:
        d = s.recv(1 << 20)
        if not d: break
        got += len(d)
    out[tag + ' received'] = time.time() - t
if role == 'srv':
    l = socket.socket(); l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    l.bind(('10.77.0.2', 5555)); l.listen(1); s, _ = l.accept()
    th = [threading.Thread(target=receiver, args=(s, 'host 1'))]
    if mode == 'bidi': th.append(threading.Thread(target=sender, args=(s, 'host 1')))
else:
    s = socket.create_connection(('10.77.0.2', 5555))
    th = [threading.Thread(target=sender, args=(s, 'host 0'))]
    if mode == 'bidi': th.append(threading.Thread(target=receiver, args=(s, 'host 0')))
for t in th: t.start()
for t in th: t.join()
print(mode, ', '.join(f'{k} {v:.3f} s' for k, v in sorted(out.items())))
