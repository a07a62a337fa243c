#!/usr/bin/env python3
"""Plot `sluice bench --json` results against the memory budget: decode tok/s (with the
speed-of-light bound) and the decode expert-cache hit rate. Writes an SVG; standard library only.

    python3 bench/plot_streaming.py OUT.svg RESULT.json [RESULT.json ...]
"""
import json
import sys


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    out, files = sys.argv[1], sys.argv[2:]
    rows = []
    for f in files:
        r = json.load(open(f))
        if not r.get("prefetch", True):
            continue  # one line per prefetch setting would clutter; plotted runs have prefetch on
        rows.append((r["memory_budget_bytes"] / 1e9, r["decode_tok_s"]["mean"], r["decode_tok_s"]["sd"],
                     r["speed_of_light_tok_s"], r["decode_hit_rate"]))
    rows.sort()
    if not rows:
        sys.exit("no results with prefetch on")
    W, H, L, R, T, B = 640, 400, 70, 70, 40, 60
    xmax = max(r[0] for r in rows) * 1.1
    ymax = max(max(r[1] + r[2], r[3]) for r in rows) * 1.15
    def x(v): return L + (W - L - R) * v / xmax
    def y(v): return H - B - (H - T - B) * v / ymax
    def yh(v): return H - B - (H - T - B) * v
    s = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif" font-size="12">',
         f'<rect width="{W}" height="{H}" fill="white"/>',
         f'<text x="{W/2}" y="20" text-anchor="middle" font-size="14">{json.load(open(files[0]))["model"]}: decode vs memory budget</text>',
         f'<line x1="{L}" y1="{H-B}" x2="{W-R}" y2="{H-B}" stroke="black"/>',
         f'<line x1="{L}" y1="{T}" x2="{L}" y2="{H-B}" stroke="black"/>',
         f'<line x1="{W-R}" y1="{T}" x2="{W-R}" y2="{H-B}" stroke="black"/>',
         f'<text x="{W/2}" y="{H-15}" text-anchor="middle">memory budget (GB)</text>',
         f'<text x="15" y="{H/2}" transform="rotate(-90 15 {H/2})" text-anchor="middle" fill="#1f5fbf">decode tok/s</text>',
         f'<text x="{W-15}" y="{H/2}" transform="rotate(90 {W-15} {H/2})" text-anchor="middle" fill="#bf5f1f">expert-cache hit rate</text>']
    for i in range(6):
        v = xmax * i / 5
        s.append(f'<text x="{x(v)}" y="{H-B+16}" text-anchor="middle">{v:.0f}</text>')
        t = ymax * i / 5
        s.append(f'<text x="{L-6}" y="{y(t)+4}" text-anchor="end" fill="#1f5fbf">{t:.2f}</text>')
        s.append(f'<text x="{W-R+6}" y="{yh(i/5)+4}" fill="#bf5f1f">{i*20}%</text>')
    def path(points, color, dash=""):
        d = " ".join(("M" if k == 0 else "L") + f"{px:.1f},{py:.1f}" for k, (px, py) in enumerate(points))
        return f'<path d="{d}" fill="none" stroke="{color}" stroke-width="2" {dash}/>'
    s.append(path([(x(r[0]), y(r[1])) for r in rows], "#1f5fbf"))
    s.append(path([(x(r[0]), y(r[3])) for r in rows], "#1f5fbf", 'stroke-dasharray="5,4"'))
    s.append(path([(x(r[0]), yh(r[4])) for r in rows], "#bf5f1f"))
    for r in rows:
        s.append(f'<line x1="{x(r[0])}" y1="{y(r[1]-r[2])}" x2="{x(r[0])}" y2="{y(r[1]+r[2])}" stroke="#1f5fbf"/>')
        s.append(f'<circle cx="{x(r[0])}" cy="{y(r[1])}" r="3" fill="#1f5fbf"/>')
        s.append(f'<circle cx="{x(r[0])}" cy="{yh(r[4])}" r="3" fill="#bf5f1f"/>')
    s.append(f'<text x="{L+10}" y="{T+14}" fill="#1f5fbf">— decode tok/s (mean ± sd)   - - speed of light</text>')
    s.append(f'<text x="{L+10}" y="{T+30}" fill="#bf5f1f">— decode hit rate</text>')
    s.append("</svg>")
    open(out, "w").write("\n".join(s) + "\n")


if __name__ == "__main__":
    main()
