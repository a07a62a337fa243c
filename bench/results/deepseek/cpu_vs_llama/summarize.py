#!/usr/bin/env python3
"""Summarize raw/ (or the folder given): per-round tok/s, load averages, CPU share, peak RSS, and mean ± sd over
the rounds' reps for sluice and llama.cpp, with ratios. Usage: summarize.py [RAW_DIR] [--exclude 6,7]
(excluded rounds are listed but left out of the means)."""
import glob, json, os, re, statistics as st, sys

args = [a for a in sys.argv[1:]]
EXCL = set()
if "--exclude" in args:
    i = args.index("--exclude")
    EXCL = {int(x) for x in args[i + 1].split(",")}
    del args[i:i + 2]
D = args[0] if args else os.path.join(os.path.dirname(os.path.abspath(__file__)), "raw")

def cpu(txt):
    m = re.search(r"Percent of CPU this job got: (\d+)%", txt)
    return m.group(1) + "%" if m else "?"

def rss_gb(txt):
    m = re.search(r"Maximum resident set size \(kbytes\): (\d+)", txt)
    return int(m.group(1)) * 1024 / 1e9 if m else float("nan")

def loads(name):
    p = os.path.join(D, f"load_{name}.txt")
    return [l.split("load average:")[1].split(",")[0].strip() for l in open(p)] if os.path.exists(p) else []

def ms(v):
    return f"{st.mean(v):.2f} ± {st.stdev(v):.2f}" if len(v) > 1 else f"{v[0]:.2f}"

rounds = sorted({int(re.search(r"_r(\d+)", f).group(1)) for f in glob.glob(os.path.join(D, "*_r*.txt"))})
S = {"pp": [], "tg": [], "rss": []}
L = {"pp0": [], "tg0": [], "pp1": [], "tg1": [], "rss": []}
print("| round | engine | prefill 128 tok/s (per rep) | decode 16 tok/s (per rep) | peak RSS GB | CPU share | load before → after |")
print("|---|---|---|---|---|---|---|")
for r in rounds:
    sp = os.path.join(D, f"sluice_r{r}.txt")
    if os.path.exists(sp):
        t = open(sp).read()
        reps = re.findall(r"^rep \d+: prefill ([\d.]+) tok/s, decode ([\d.]+) tok/s", t, re.M)
        pp = [float(a) for a, _ in reps]; tg = [float(b) for _, b in reps]
        if r not in EXCL:
            S["pp"] += pp; S["tg"] += tg; S["rss"].append(rss_gb(t))
        print(f"| {r}{' (excluded)' if r in EXCL else ''} | sluice | {', '.join(f'{x:.2f}' for x in pp)} | {', '.join(f'{x:.2f}' for x in tg)} | "
              f"{rss_gb(t):.2f} | {cpu(t)} | {' → '.join(loads(f'sluice_r{r}'))} |")
    lp = os.path.join(D, f"llama_r{r}.txt")
    if os.path.exists(lp):
        t = open(lp).read()
        got = {}
        for fa, test, val in re.findall(r"\|\s+(\d)\s+\|\s+(pp128|tg16)\s+\|\s+([\d.]+) ± ([\d.]+)", t) and \
                [(a, b, c) for a, b, c, _ in re.findall(r"\|\s+(\d)\s+\|\s+(pp128|tg16)\s+\|\s+([\d.]+) ± ([\d.]+)", t)]:
            got[(fa, test)] = float(val)
        # llama-bench prints mean ± sd of its -r 2 reps; the samples are the per-run means
        for fa in "01":
            if (fa, "pp128") in got and r not in EXCL:
                L["pp" + fa].append(got[(fa, "pp128")]); L["tg" + fa].append(got[(fa, "tg16")])
        L["rss"].append(rss_gb(t))
        print(f"| {r}{' (excluded)' if r in EXCL else ''} | llama.cpp | fa0 {got.get(('0','pp128'))}, fa1 {got.get(('1','pp128'))} | "
              f"fa0 {got.get(('0','tg16'))}, fa1 {got.get(('1','tg16'))} | {rss_gb(t):.2f} | {cpu(t)} | "
              f"{' → '.join(loads(f'llama_r{r}'))} |")
print()
print("sluice  prefill", ms(S["pp"]), " decode", ms(S["tg"]), " RSS max", f"{max(S['rss']):.2f}")
for fa in "01":
    if L["pp" + fa]:
        print(f"llama fa{fa} prefill", ms(L["pp" + fa]), " decode", ms(L["tg" + fa]))
print("llama RSS max", f"{max(L['rss']):.2f}")
best_pp = max(st.mean(L["pp0"]), st.mean(L["pp1"])) if L["pp1"] else st.mean(L["pp0"])
best_tg = max(st.mean(L["tg0"]), st.mean(L["tg1"])) if L["tg1"] else st.mean(L["tg0"])
print(f"ratios sluice/llama: prefill vs fa0 {st.mean(S['pp'])/st.mean(L['pp0']):.2f}, vs fa1 "
      f"{st.mean(S['pp'])/st.mean(L['pp1']):.2f}, vs best {st.mean(S['pp'])/best_pp:.2f}; decode vs fa0 "
      f"{st.mean(S['tg'])/st.mean(L['tg0']):.2f}, vs fa1 {st.mean(S['tg'])/st.mean(L['tg1']):.2f}, vs best "
      f"{st.mean(S['tg'])/best_tg:.2f}; RSS {max(S['rss'])/max(L['rss']):.2f}")
