// tiny_next_greedy.test.mjs — the built-in trained model (models/tiny-next) end to end against PyTorch.
//
// tools/train_tiny.py ran transformers' Qwen3NextForCausalLM (f32, CPU) with the SHIPPED 4-bit weights
// (dequantized) and recorded greedy continuations of five prompts in samples.json. Greedy decoding is
// reproduced by teacher forcing: feed prompt + continuation[:-1] to `sluice logits` and require that the
// argmax at every continuation position is the token transformers chose. A position counts as a near-tie
// (reported, not failed) only when sluice's logit for transformers' token is within 1e-3 of its maximum.
// The prompts are tokenized with @lenml/tokenizers (the reference tokenizer of the oracle suites); the
// held-out text's token count is checked against the count HF `tokenizers` produced during training.
// Lifetime: one temporary .npy per prompt, removed at the end. Single-threaded driver.
import { TokenizerLoader } from "@lenml/tokenizers";
import { execFileSync } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";

const bin = process.env.SLUICE_BIN;
const src = process.env.SLUICE_SOURCE_DIR;
if (!bin || !src) {
    console.error("[tiny_next_greedy] SLUICE_BIN and SLUICE_SOURCE_DIR must be set");
    process.exit(2);
}
const dir = path.join(src, "models", "tiny-next");
const readJson = (f) => JSON.parse(fs.readFileSync(path.join(dir, f), "utf8"));
const tok = TokenizerLoader.fromPreTrained({
    tokenizerJSON: readJson("tokenizer.json"),
    tokenizerConfig: readJson("tokenizer_config.json"),
});
let failures = 0;

const ref = readJson("reference_perplexity.json");
const heldIds = tok.encode(fs.readFileSync(path.join(dir, "heldout.txt"), "utf8"), { add_special_tokens: false });
if (heldIds.length !== ref.heldout_tokens) {
    console.error(`[tiny_next_greedy] heldout.txt: expected ${ref.heldout_tokens} tokens (HF tokenizers), got ${heldIds.length}`);
    failures++;
}

function readNpyF32(file) {
    const b = fs.readFileSync(file);
    const hl = b.readUInt16LE(8);
    const header = b.subarray(10, 10 + hl).toString("latin1");
    const shape = header.match(/'shape': \((\d+), (\d+)\)/).slice(1, 3).map(Number);
    const data = new Float32Array(b.buffer.slice(b.byteOffset + 10 + hl, b.byteOffset + b.length));
    return { rows: shape[0], cols: shape[1], data };
}

const tmp = fs.mkdtempSync(path.join(os.tmpdir(), "tiny-next-"));
const out = path.join(tmp, "logits.npy");
let total = 0, agree = 0, ties = 0;
for (const s of readJson("samples.json").mlx_q4_shipped) {
    const prompt = tok.encode(s.prompt, { add_special_tokens: false });
    const ids = prompt.concat(s.ids.slice(0, -1));
    // f32 activations: transformers' arithmetic, which this test holds sluice to (the CPU's default int8
    // activations are held to their own bounds in golden_test.cpp and activations_test.cpp).
    execFileSync(bin, ["logits", dir, "--ids", ids.join(","), "--out", out, "--cpu-activations", "f32"], { stdio: ["ignore", "ignore", "inherit"] });
    const { rows, cols, data } = readNpyF32(out);
    if (rows !== ids.length) throw new Error(`[tiny_next_greedy] logits rows ${rows}, expected ${ids.length}`);
    for (let j = 0; j < s.ids.length; j++) {
        const r = (prompt.length - 1 + j) * cols;
        let best = 0;
        for (let v = 1; v < cols; v++) if (data[r + v] > data[r + best]) best = v;
        total++;
        if (best === s.ids[j]) { agree++; continue; }
        if (data[r + best] - data[r + s.ids[j]] < 1e-3) { ties++; continue; }
        failures++;
        console.error(`[tiny_next_greedy] prompt ${JSON.stringify(s.prompt)} step ${j}: transformers chose ${s.ids[j]}, ` +
            `sluice argmax ${best} (logit gap ${(data[r + best] - data[r + s.ids[j]]).toExponential(2)})`);
    }
}
fs.rmSync(tmp, { recursive: true, force: true });
console.log(`[tiny_next_greedy] ${agree}/${total} greedy tokens agree with transformers, ${ties} near-ties; ` +
    `held-out tokens ${heldIds.length}`);
process.exit(failures ? 1 : 0);
