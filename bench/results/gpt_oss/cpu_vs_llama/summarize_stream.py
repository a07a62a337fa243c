#!/usr/bin/env python3
"""Summarize raw_stream/ (run_stream.sh): per-round tok/s, hit rate, bytes read per token, peak RSS and the
cgroup's peak usage; then mean ± sd (sluice: its per-rep numbers; llama.cpp: one llama-batched-bench run a
round) and the ratios sluice / llama.cpp."""
import glob, os, re, statistics as st

D = os.path.join(os.path.dirname(os.path.abspath(__file__)), "raw_stream")
def rss(t):
    m = re.search(r"Maximum resident set size \(kbytes\): (\d+)", t); return int(m.group(1)) * 1024 / 1e9
def cg(t):
    m = re.search(r"cgroup max usage (\d+)", t); return int(m.group(1)) / 1e9
def ms(v): return f"{st.mean(v):.2f} ± {st.stdev(v):.2f}"
rounds = sorted({int(re.search(r"_r(\d+)", f).group(1)) for f in glob.glob(os.path.join(D, "*_r*.txt"))})
S = {"pp": [], "tg": []}; L = {"pp": [], "tg": []}
print("| round | engine | prefill 128 tok/s | decode 16 tok/s | decode hit rate | read per token | peak RSS GB | cgroup peak GB |")
print("|---|---|---|---|---|---|---|---|")
for r in rounds:
    order = ["sluice", "llama"] if r % 2 else ["llama", "sluice"]
    for e in order:
        t = open(os.path.join(D, f"{e}_r{r}.txt")).read()
        if e == "sluice":
            reps = re.findall(r"^rep \d+: prefill ([\d.]+) tok/s, decode ([\d.]+) tok/s, .*hit rate ([\d.]+)%, ([\d.]+) MB read/token", t, re.M)
            S["pp"] += [float(x[0]) for x in reps]; S["tg"] += [float(x[1]) for x in reps]
            print(f"| {r} | sluice | {', '.join(x[0] for x in reps)} | {', '.join(x[1] for x in reps)} | "
                  f"{', '.join(x[2] + '%' for x in reps)} | {', '.join(x[3] + ' MB' for x in reps)} | {rss(t):.2f} | {cg(t):.2f} |")
        else:
            m = re.search(r"\|\s+128 \|\s+16 \|\s+1 \|\s+\d+ \|\s+[\d.]+ \|\s+([\d.]+) \|\s+[\d.]+ \|\s+([\d.]+) \|", t)
            L["pp"].append(float(m.group(1))); L["tg"].append(float(m.group(2)))
            print(f"| {r} | llama.cpp (mmap, -nr) | {m.group(1)} | {m.group(2)} | — | — | {rss(t):.2f} | {cg(t):.2f} |")
print()
print("| test | sluice | llama.cpp | sluice / llama.cpp |")
print("|---|---|---|---|")
for k, n in (("pp", "prefill 128"), ("tg", "decode 16 @ depth 128")):
    print(f"| {n} | {ms(S[k])} | {ms(L[k])} | **{st.mean(S[k]) / st.mean(L[k]):.2f}** |")
