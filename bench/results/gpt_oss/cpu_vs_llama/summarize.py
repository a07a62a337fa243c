#!/usr/bin/env python3
"""Summarize raw/ (run.sh): per-round tok/s, peak RSS, CPU share and load for sluice and llama.cpp, then
mean ± sd and the ratios sluice / llama.cpp. sluice: its per-rep numbers; llama.cpp: llama-bench's mean of
its reps in each run (one sample a round). Usage: summarize.py [RAW_DIR] [--exclude 3]"""
import glob, os, re, statistics as st, sys

args = sys.argv[1:]
EXCL = set()
if "--exclude" in args:
    i = args.index("--exclude")
    EXCL = {int(x) for x in args[i + 1].split(",")}
    del args[i:i + 2]
D = args[0] if args else os.path.join(os.path.dirname(os.path.abspath(__file__)), "raw")

def cpu(t):
    m = re.findall(r"Percent of CPU this job got: (\d+)%", t)
    return "/".join(x + "%" for x in m) or "?"

def rss(t):
    m = re.findall(r"Maximum resident set size \(kbytes\): (\d+)", t)
    return max(int(x) for x in m) * 1024 / 1e9 if m else float("nan")

def loads(name):
    p = os.path.join(D, f"load_{name}.txt")
    return " → ".join(l.split("load average:")[1].split(",")[0].strip() for l in open(p)) if os.path.exists(p) else ""

def ms(v):
    return f"{st.mean(v):.2f} ± {st.stdev(v):.2f}" if len(v) > 1 else (f"{v[0]:.2f}" if v else "—")

def sluice(t):
    out = {}
    for sec in re.split(r"^== bench \d+ of \d+: ", t, flags=re.M)[1:]:
        p = int(re.match(r"-p (\d+)", sec).group(1))
        reps = re.findall(r"^rep \d+: prefill ([\d.]+) tok/s, decode ([\d.]+) tok/s", sec, re.M)
        out[f"pp{p}"] = [float(a) for a, _ in reps]
        out[f"tg32@d{p}"] = [float(b) for _, b in reps]
    return out

def llama(t):
    out = {}
    for test, val in re.findall(r"\|\s+(pp\d+|tg\d+(?: @ d\d+)?)\s+\|\s+([\d.]+) ± [\d.]+", t):
        key = test.replace(" @ ", "@") if "@" in test else (test + "@d0" if test.startswith("tg") else test)
        out[key] = float(val)
    return out

rounds = sorted({int(re.search(r"_r(\d+)", f).group(1)) for f in glob.glob(os.path.join(D, "*_r*.txt"))})
S, L = {}, {}
rows = []
for r in rounds:
    ex = " (excluded)" if r in EXCL else ""
    p = os.path.join(D, f"sluice_r{r}.txt")
    if os.path.exists(p):
        t = open(p).read()
        s = sluice(t)
        if not ex:
            for k, v in s.items():
                S.setdefault(k, []).extend(v)
            S.setdefault("rss", []).append(rss(t))
        rows.append(f"| {r}{ex} | sluice | " + " | ".join(", ".join(f"{x:.2f}" for x in s.get(k, [])) for k in
                    ("pp128", "pp512", "tg32@d128", "tg32@d512")) + f" | — | {rss(t):.2f} | {cpu(t)} | {loads(f'sluice_r{r}')} |")
    p = os.path.join(D, f"llama_r{r}.txt")
    if os.path.exists(p):
        t = open(p).read()
        t2 = open(os.path.join(D, f"llama_r{r}_d128.txt")).read() if os.path.exists(os.path.join(D, f"llama_r{r}_d128.txt")) else ""
        g = llama(t)
        g.update(llama(t2))
        if not ex:
            for k, v in g.items():
                L.setdefault(k, []).append(v)
            L.setdefault("rss", []).append(max(rss(t), rss(t2)))
        f = lambda k: f"{g[k]:.2f}" if k in g else ""
        rows.append(f"| {r}{ex} | llama.cpp | {f('pp128')} | {f('pp512')} | {f('tg32@d128')} | — | {f('tg32@d0')} | "
                    f"{max(rss(t), rss(t2)):.2f} | {cpu(t)}/{cpu(t2)} | {loads(f'llama_r{r}')} |")
print("| round | engine | pp128 | pp512 | tg32 @ d128 | tg32 @ d512 | tg32 @ d0 | peak RSS GB | CPU share | load before → after |")
print("|---|---|---|---|---|---|---|---|---|---|")
print("\n".join(rows))
print()
print("| test | sluice | llama.cpp | sluice / llama.cpp |")
print("|---|---|---|---|")
for k, lk in (("pp128", "pp128"), ("pp512", "pp512"), ("tg32@d128", "tg32@d128"), ("tg32@d512", None), (None, "tg32@d0")):
    sv, lv = S.get(k, []) if k else [], L.get(lk, []) if lk else []
    ratio = f"**{st.mean(sv) / st.mean(lv):.2f}**" if sv and lv else "—"
    print(f"| {k or lk} | {ms(sv)} | {ms(lv)} | {ratio} |")
if S.get("rss") and L.get("rss"):
    print(f"| peak RSS GB (max over runs) | {max(S['rss']):.2f} | {max(L['rss']):.2f} | {max(S['rss']) / max(L['rss']):.2f} |")
