"""The streaming GGUF write the family writers share (tools/synth_gguf_{gptoss,deepseek2,glm4moe}.py):
tensor infos from a plan, then each tensor's data in plan order — F32 tensors from the writer's own
initialiser, quantized ones from ../shared/peer/synth_gguf.py's block pools — aligned as GGUFWriter aligns
them, with progress every 5 s. Import after synth_gguf (it puts gguf-py on sys.path)."""
import os
import time

import numpy as np
import gguf


def write_gguf(out, arch, plan, sizes, pools, write_metadata, f32_data, t0):
    """plan: [(name, ne, qtype)]; sizes: bytes per tensor; write_metadata(w): the KV pairs;
    f32_data(name, ne): an f32 ndarray of sizes[i] bytes; t0: when the writer started (for the rate)."""
    F32 = gguf.GGMLQuantizationType.F32
    w = gguf.GGUFWriter(out, arch)
    write_metadata(w)
    for (name, ne, qt), s in zip(plan, sizes):
        np_shape = tuple(reversed(ne))
        if qt == F32:
            w.add_tensor_info(name, np_shape, np.dtype(np.float32), s)
        else:
            w.add_tensor_info(name, np_shape, np.dtype(np.float32), s, raw_dtype=qt)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    f = w.fout[0]
    align = w.data_alignment
    total = sum(sizes)
    done, last = 0, time.time()
    for (name, ne, qt), s in zip(plan, sizes):
        pad = (-f.tell()) % align
        if pad:
            f.write(b"\0" * pad)
        if qt == F32:
            d = f32_data(name, ne)
            assert d.nbytes == s
            f.write(d.tobytes())
        else:
            pools.write_quant(f, qt, s)
        done += s
        if time.time() - last > 5:
            last = time.time()
            print(f"  {done / 1e9:.1f} of {total / 1e9:.1f} GB, {done / 1e9 / (last - t0):.2f} GB/s", flush=True)
    pad = (-f.tell()) % align
    if pad:
        f.write(b"\0" * pad)
    w.close()
    dt = time.time() - t0
    size = os.path.getsize(out)
    print(f"wrote {out}: {size / 1e9:.2f} GB in {dt:.1f} s ({size / 1e9 / dt:.2f} GB/s)", flush=True)
