#!/usr/bin/env python3
"""The floors of src/ and the includes allowed between them (docs/ARCHITECTURE.md, "Layers"):
every #include "dir/..." of a file under src/DIR must name DIR itself, the public API (sluice/),
or a floor below DIR. Exits 1 listing every include that points up or sideways; run by ctest."""
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
BELOW = {
    "core": set(),
    "io": {"core"},
    "format": {"core", "io"},
    "kernels": {"core"},
    "tokenizer": {"core", "io", "format"},
    "constrain": {"core"},
    "model": {"core", "io", "format", "kernels"},
    "experts": {"core", "io", "format", "kernels", "model"},
    "convert": {"core", "io", "format", "kernels", "model", "experts"},
    "runtime": {"core", "io", "format", "kernels", "model", "experts", "tokenizer", "constrain"},
    "server": {"core", "io", "format"},  # and the public API: the engine is reached through sluice/
    "cli": {"core", "io", "format", "convert", "server"},
}
include = re.compile(r'^\s*#\s*include\s+"([a-z_]+)/')
bad = []
for path in sorted((ROOT / "src").rglob("*")):
    if path.suffix not in {".h", ".cpp", ".cu", ".cuh", ".inc"}:
        continue
    floor = path.relative_to(ROOT / "src").parts[0]
    allowed = BELOW.get(floor)
    if allowed is None:
        bad.append(f"{path.relative_to(ROOT)}: folder '{floor}' has no floor in tools/check_layers.py")
        continue
    for n, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
        m = include.match(line)
        if m and m.group(1) not in allowed | {floor, "sluice"}:
            bad.append(f"{path.relative_to(ROOT)}:{n}: {floor}/ includes {m.group(1)}/ ({line.strip()})")
for b in bad:
    print(b)
print(f"check_layers: {len(bad)} include(s) against the floors")
sys.exit(1 if bad else 0)
