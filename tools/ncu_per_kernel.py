#!/usr/bin/env python3
# Sums an ncu log of gpu__time_duration (tools/gpu_run.sh ncu35) into one line per kernel and grid:
# total GPU time, average and invocations, largest first. Reads `ncu --csv --print-summary none`
# (one row per launch, so launches of one kernel with different grids stay apart) or the older
# `--print-summary per-kernel` text. Usage: tools/ncu_per_kernel.py LOG
import csv, re, sys
from collections import defaultdict

txt = open(sys.argv[1], errors='replace').read()
rows = []
csv_lines = [l for l in txt.splitlines() if l.startswith('"')]
if csv_lines:
    reader = csv.reader(csv_lines)
    header = None
    acc = defaultdict(lambda: [0.0, 0])
    for r in reader:
        if header is None or r[:2] == header[:2]:
            header = r
            col = {name: i for i, name in enumerate(header)}
            continue
        if r[col['Metric Name']] != 'gpu__time_duration.sum':
            continue
        us = float(r[col['Metric Value']].replace(',', ''))
        if r[col['Metric Unit']] == 'ns':
            us /= 1000.0
        elif r[col['Metric Unit']] == 'ms':
            us *= 1000.0
        name = re.sub(r'\(.*', '', r[col['Kernel Name']].split('::')[-1])
        key = (name, r[col['Grid Size']])
        acc[key][0] += us
        acc[key][1] += 1
    for (name, grid), (total, n) in acc.items():
        rows.append((total, name, grid, total / n, n))
else:
    for b in re.finditer(r'^  (\S.*?)\n(.*?)(?=^  \S|\Z)', txt, re.S | re.M):
        name = b.group(1)
        body = b.group(2)
        m = re.search(r'gpu__time_duration.sum\s+(\S+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)', body)
        inv = re.search(r'Invocations?:?\s*(\d+)', name + body)
        if m and inv:
            avg = float(m.group(4))
            n = int(inv.group(1))
            k = re.sub(r'\(.*', '', name.split('::')[-1])
            grid = re.search(r'\) (\(\d+, \d+, \d+\))x', name)
            rows.append((avg * n, k, grid.group(1) if grid else '', avg, n))
rows.sort(reverse=True)
for r in rows:
    print(f"{r[0]:9.1f} us total  {r[3]:7.2f} us x {r[4]:4d}  {r[1]} {r[2]}")
print("sum", sum(r[0] for r in rows))
