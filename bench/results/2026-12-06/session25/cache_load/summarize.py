#!/usr/bin/env python3
"""Prints one row per raw file of round.sh: round, label, config, load at
start, then per route req/s, p50 ms, p99 ms (client) and server-side p50/p99."""
import glob, os, re, sys

here = os.path.dirname(os.path.abspath(__file__))
for f in sorted(glob.glob(os.path.join(here, "r*_*_*.txt"))):
    name = os.path.basename(f)[:-4]
    rnd, label, config = name.split("_", 2)
    text = open(f).read().splitlines()
    load = re.search(r"load (\S+)", text[0]).group(1)
    server = False
    rows = []
    for line in text:
        if line.startswith("server-side"):
            server = True
            continue
        m = re.match(r"^(GET|PUT|list|dashboard|all)\s+(\d+)\s+(\d+)?\s+(\d+)\s+(\d+)$", line)
        if m:
            route, n, rps, p50, p99 = m.groups()
            tag = route + (" (server)" if server else "")
            rows.append(f"{tag}: {'' if server else rps + ' req/s, '}p50 {int(p50)/1000:.2f} p99 {int(p99)/1000:.2f} ms")
    ok = [l for l in text if l.startswith("acknowledged")]
    print(f"{rnd} {label:22s} {config:8s} load {load:5s} | " + "; ".join(rows) + (" | " + ok[0].split(";", 1)[1] if ok else ""))
