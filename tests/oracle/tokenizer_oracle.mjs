// The tokenizer oracle harness shared by tokenizer.test.mjs (Qwen) and tokenizer_families.test.mjs
// (Llama 2 / Mistral, DeepSeek-V3, gpt-oss): every document is encoded and decoded by sluice's CLI and
// by @lenml/tokenizers (a port of HF tokenizers / transformers.js) on the same tokenizer.json. Checks
// per document and tokenizer:
//   ids           encode with special tokens parsed            == oracle
//   ids-nospecial encode with special tokens as text           == oracle with special tokens removed
//   decode        decode(oracle ids)                           == oracle decode
//   decode-skip   decode(oracle ids, skip special)             == oracle decode(skip_special_tokens)
//   stream        IncrementalDetokenizer over oracle ids       == oracle decode
//   roundtrip     decode(encode(x)) == NFC(x) exactly when the oracle's does
import { execFileSync } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { TokenizerLoader } from "@lenml/tokenizers";

export class TokenizerOracle {
  constructor(bin) {
    this.bin = bin;
    this.passed = 0;
    this.failed = 0;
    this.failures = [];
    this.tmp = fs.mkdtempSync(path.join(os.tmpdir(), "sluice-tok-"));
  }

  check(ok, what) {
    if (ok) this.passed++;
    else {
      this.failed++;
      if (this.failures.length < 20) this.failures.push(what);
    }
  }

  sluice(args, inputLines) {
    const file = path.join(this.tmp, "in.jsonl");
    fs.writeFileSync(file, inputLines.map((l) => JSON.stringify(l)).join("\n") + "\n");
    const out = execFileSync(this.bin, [...args, "--jsonl", file], { maxBuffer: 1 << 30, encoding: "utf8" });
    const lines = out.split("\n").filter((l) => l.length > 0).map((l) => JSON.parse(l));
    if (lines.length !== inputLines.length) throw new Error(`sluice ${args[0]}: ${lines.length} lines for ${inputLines.length} inputs`);
    return lines;
  }

  // `expectedText(oracle, ids, skip, text)`, when given, maps the oracle's decode to the text HF
  // tokenizers gives where the two knowingly differ (each caller documents its rule). Returns sluice's
  // ids with special tokens parsed, per document.
  runSuite(label, dir, tokenizerJSON, tokenizerConfig, docs, { expectedText } = {}) {
    const oracle = TokenizerLoader.fromPreTrained({ tokenizerJSON, tokenizerConfig });
    const noSpecialJSON = { ...tokenizerJSON, added_tokens: tokenizerJSON.added_tokens.filter((t) => !t.special) };
    const oracleNoSpecial = TokenizerLoader.fromPreTrained({ tokenizerJSON: noSpecialJSON, tokenizerConfig });
    const texts = docs.map((d) => d.text);
    const enc = (tok, t) => tok.encode(t, { add_special_tokens: false });
    const dec = (ids, skip) => {
      const text = ids.length === 0 ? "" :
        oracle.decode(ids, { skip_special_tokens: skip, clean_up_tokenization_spaces: false });
      return expectedText ? expectedText(oracle, ids, skip, text) : text;
    };

    const wantIds = texts.map((t) => enc(oracle, t));
    const wantIdsNoSpecial = texts.map((t) => enc(oracleNoSpecial, t));
    const gotIds = this.sluice(["tokenize", dir], texts);
    const gotIdsNoSpecial = this.sluice(["tokenize", dir, "--no-special"], texts);
    const gotDecode = this.sluice(["detokenize", dir], wantIds);
    const gotDecodeSkip = this.sluice(["detokenize", dir, "--skip-special"], wantIds);
    const gotStream = this.sluice(["detokenize", dir, "--stream"], wantIds);
    const gotRoundTrip = this.sluice(["detokenize", dir], gotIds);

    const same = (a, b) => a.length === b.length && a.every((v, k) => v === b[k]);
    docs.forEach((doc, i) => {
      const name = `[${label}] ${doc.name}`;
      this.check(same(gotIds[i], wantIds[i]), `${label} ids: ` + describeIds(doc, gotIds[i], wantIds[i]));
      this.check(same(gotIdsNoSpecial[i], wantIdsNoSpecial[i]),
        `${label} ids --no-special: ` + describeIds(doc, gotIdsNoSpecial[i], wantIdsNoSpecial[i]));
      const wantText = dec(wantIds[i], false);
      this.check(gotDecode[i] === wantText, `${name} decode: sluice ${JSON.stringify(gotDecode[i].slice(0, 80))} oracle ${JSON.stringify(wantText.slice(0, 80))}`);
      this.check(gotDecodeSkip[i] === dec(wantIds[i], true), `${name} decode --skip-special differs`);
      this.check(gotStream[i] === wantText, `${name} stream decode: ${JSON.stringify(gotStream[i].slice(0, 80))}`);
      const oracleRoundTrips = wantText === doc.text.normalize("NFC");
      const sluiceRoundTrips = gotRoundTrip[i] === doc.text.normalize("NFC");
      this.check(oracleRoundTrips === sluiceRoundTrips && gotRoundTrip[i] === wantText, `${name} round trip differs`);
    });
    return gotIds;
  }

  // Prints the failures and the counts; returns the exit status.
  finish() {
    fs.rmSync(this.tmp, { recursive: true, force: true });
    for (const f of this.failures) console.log("FAIL " + f);
    console.log(`${this.passed} passed, ${this.failed} failed`);
    return this.failed === 0 ? 0 : 1;
  }
}

function firstDiff(a, b) {
  let i = 0;
  while (i < a.length && i < b.length && a[i] === b[i]) i++;
  return i;
}

export function describeIds(doc, got, want) {
  const i = firstDiff(got, want);
  return `${doc.name}: first difference at token ${i}: sluice ${JSON.stringify(got.slice(i, i + 6))} ` +
    `oracle ${JSON.stringify(want.slice(i, i + 6))} (text ${JSON.stringify(doc.text.slice(0, 80))})`;
}
