#!/usr/bin/env python3
# Summarises an `nsys stats --report cuda_gpu_trace --format csv` export of a decode run (tools/gpu_run.sh
# prof35): over the last FRACTION of the kernels (the decode steps; default 0.6), the span from the first
# start to the last end, the summed kernel time, the gaps between consecutive kernels, and per kernel
# name the mean in-graph duration. Usage: tools/nsys_gaps.py TRACE.csv [FRACTION]
import csv, re, sys
from collections import defaultdict

rows = list(csv.reader(open(sys.argv[1], errors='replace')))
frac = float(sys.argv[2]) if len(sys.argv) > 2 else 0.6
header = rows[0]
def col(word):
    return next(i for i, h in enumerate(header) if h.startswith(word))
start, dur, name = col('Start'), col('Duration'), col('Name')
kernels = []
for r in rows[1:]:
    if len(r) <= name or 'memcpy' in r[name].lower() or 'memset' in r[name].lower():
        continue
    kernels.append((int(r[start]), int(r[dur]), re.sub(r'\(.*', '', r[name]).split('::')[-1]))
kernels.sort()
tail = kernels[int(len(kernels) * (1 - frac)):]
span = tail[-1][0] + tail[-1][1] - tail[0][0]
busy = sum(k[1] for k in tail)
gaps = [b[0] - (a[0] + a[1]) for a, b in zip(tail, tail[1:])]
small = sorted(g for g in gaps if g < 20000)
print(f'kernels {len(tail)}  span {span / 1e3:.1f} us  busy {busy / 1e3:.1f} us ({100 * busy / span:.1f}%)')
if small:
    print(f'gaps < 20 us: n {len(small)} mean {sum(small) / len(small) / 1e3:.2f} us  median '
          f'{small[len(small) // 2] / 1e3:.2f} us  p90 {small[int(len(small) * 0.9)] / 1e3:.2f} us')
acc = defaultdict(lambda: [0, 0])
for s, d, n in tail:
    acc[n][0] += d
    acc[n][1] += 1
for n, (d, c) in sorted(acc.items(), key=lambda kv: -kv[1][0]):
    print(f'{d / 1e3:10.1f} us total {d / c / 1e3:8.2f} us x {c:5d}  {n}')
