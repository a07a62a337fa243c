#!/usr/bin/env python3
# Sums an `ncu --print-summary per-kernel` log (tools/gpu_run.sh ncu35) into one line per kernel and
# grid: total GPU time, average and invocations, largest first. Usage: tools/ncu_per_kernel.py LOG
import re,sys
txt=open(sys.argv[1]).read()
tot=0
rows=[]
for b in re.finditer(r'^  (\S.*?)\n(.*?)(?=^  \S|\Z)', txt, re.S|re.M):
    name=b.group(1); body=b.group(2)
    m=re.search(r'gpu__time_duration.sum\s+(\S+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)', body)
    inv=re.search(r'Invocations?:?\s*(\d+)', name+body)
    if m and inv:
        avg=float(m.group(4)); n=int(inv.group(1))
        k=re.sub(r'\(.*','',name.split('::')[-1])
        grid=re.search(r'\) (\(\d+, \d+, \d+\))x',name)
        rows.append((avg*n, k, grid.group(1) if grid else '', avg, n)); tot+=avg*n
rows.sort(reverse=True)
for r in rows: print(f"{r[0]:9.1f} us total  {r[3]:7.2f} us x {r[4]:4d}  {r[1]} {r[2]}")
print("sum", tot)
