#!/usr/bin/env python3
"""gguf_to_f32.py — a GGUF with every tensor dequantised to F32 by gguf-py, metadata unchanged.

Purpose
    Comparing sluice's logits with llama.cpp's on the same file (bench/results/gguf): on a quantized file
    llama.cpp's CPU products quantize their activations to 8 bits (Q8_0 / Q8_K), a rounding of ~1% per
    product that hides whether the two engines compute the same model. On an F32 file both multiply in
    f32, so what remains is summation order: a semantic difference (a head mapping, a norm, a gate) shows.

How to run (numpy, gguf-py from llama.cpp's source)
    /usr/bin/python3 tools/gguf_to_f32.py IN.gguf OUT.gguf      (gguf-py from $GGUF_PY or /tmp/llama.cpp/gguf-py)
"""
import os
import sys

sys.path.insert(0, os.environ.get("GGUF_PY", "/tmp/llama.cpp/gguf-py"))
import gguf  # noqa: E402
import numpy as np  # noqa: E402


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: gguf_to_f32.py IN.gguf OUT.gguf")
    reader = gguf.GGUFReader(sys.argv[1])
    writer = gguf.GGUFWriter(sys.argv[2], reader.fields["general.architecture"].contents())
    for key, field in reader.fields.items():
        if key.startswith("GGUF.") or key == "general.architecture":
            continue  # written by the writer itself
        kind = field.types[0]
        if kind == gguf.GGUFValueType.ARRAY:
            writer.add_key_value(key, field.contents(), kind, sub_type=field.types[-1])
        else:
            writer.add_key_value(key, field.contents(), kind)
    for t in reader.tensors:
        writer.add_tensor(t.name, gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


if __name__ == "__main__":
    main()
