// server_openai.test.mjs — `sluice serve` driven by the official `openai` npm client and by raw HTTP.
//
// Starts `sluice serve models/tiny-next` on a free port (with an API key and --parallel 2) and checks:
// greedy completions against transformers' recorded greedy continuations (samples.json), streaming
// equals non-streaming, usage (incl. cached tokens on a continued conversation), stop strings, seed
// determinism, logprobs (legacy echo's prompt logprobs against `sluice logits`), cancellation when
// the client disconnects, concurrent requests, every error case (OpenAI error objects with the
// right status), raw-HTTP abuse (bad JSON, wrong types, huge and deeply nested bodies, a slow
// client), /health, /metrics, /tokenize, /detokenize and the web page.
// The server is killed at the end, also on failure. Prints "N passed, M failed"; exits 1 on failure.
import { execFileSync } from "node:child_process";
import fs from "node:fs";
import http from "node:http";
import net from "node:net";
import os from "node:os";
import path from "node:path";
import Ajv from "ajv";
import OpenAI from "openai";
import { startServe } from "./serve_util.mjs";

const bin = process.env.SLUICE_BIN;
const src = process.env.SLUICE_SOURCE_DIR;
if (!bin || !src) {
    console.error("[server_openai] SLUICE_BIN and SLUICE_SOURCE_DIR must be set");
    process.exit(2);
}
const modelDir = path.join(src, "models", "tiny-next");
const KEY = "sk-test-" + Math.random().toString(36).slice(2);
const EOS = [8187, 8189];
const noEos = Object.fromEntries(EOS.map((id) => [String(id), -100]));

let passed = 0;
let failed = 0;
function check(name, ok, detail = "") {
    if (ok) ++passed;
    else {
        ++failed;
        console.log(`FAIL ${name}${detail ? ": " + detail : ""}`);
    }
}
async function test(name, fn) {
    try {
        await fn();
    } catch (e) {
        check(name, false, `threw ${e && e.stack ? e.stack.split("\n").slice(0, 3).join(" | ") : e}`);
    }
}
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// Raw HTTP request; resolves {status, headers, body}.
function raw(port, method, pathname, { body, headers = {}, auth = true } = {}) {
    return new Promise((resolve, reject) => {
        const h = { ...headers };
        if (auth) h.Authorization = `Bearer ${KEY}`;
        if (body !== undefined) {
            h["Content-Type"] ??= "application/json";
            h["Content-Length"] = Buffer.byteLength(body);
        }
        const req = http.request({ host: "127.0.0.1", port, method, path: pathname, headers: h }, (res) => {
            const chunks = [];
            res.on("data", (c) => chunks.push(c));
            res.on("end", () => resolve({ status: res.statusCode, headers: res.headers, body: Buffer.concat(chunks).toString("utf8") }));
        });
        req.on("error", reject);
        if (body !== undefined) req.write(body);
        req.end();
    });
}
function isErrorObject(text) {
    try {
        const j = JSON.parse(text);
        return typeof j.error?.message === "string" && typeof j.error?.type === "string" && "param" in j.error && "code" in j.error;
    } catch {
        return false;
    }
}

const server = await startServe(bin, [modelDir, "--parallel", "2", "--api-key", KEY, "--ctx-size", "1024", "--keep-alive-ms", "150"]);
const port = server.port;
const watchdog = setTimeout(() => {
    console.log("FAIL watchdog: the suite took longer than 180 s");
    server.kill();
    process.exit(1);
}, 180000);

try {
    await server.ready();
    const client = new OpenAI({ baseURL: `http://127.0.0.1:${port}/v1`, apiKey: KEY, maxRetries: 0, timeout: 30000 });
    const user = (content) => [{ role: "user", content }];

    await test("models", async () => {
        const list = await client.models.list();
        check("models: one model named tiny-next", list.data.length === 1 && list.data[0].id === "tiny-next", JSON.stringify(list.data));
    });

    // Greedy text completions reproduce transformers' continuations of the shipped 4-bit weights.
    const samples = JSON.parse(fs.readFileSync(path.join(modelDir, "samples.json"), "utf8")).mlx_q4_shipped;
    await test("completions vs transformers", async () => {
        for (const s of samples.slice(0, 3)) {
            const n = 12;
            const r = await client.completions.create({ model: "tiny-next", prompt: s.prompt, max_tokens: n, temperature: 0, logit_bias: noEos });
            const want = JSON.parse((await raw(port, "POST", "/detokenize", { body: JSON.stringify({ tokens: s.ids.slice(0, n) }) })).body).content;
            check(`completions greedy = transformers for ${JSON.stringify(s.prompt)}`, r.choices[0].text === want,
                `got ${JSON.stringify(r.choices[0].text)}, want ${JSON.stringify(want)}`);
            check("completions usage", r.usage.completion_tokens === n && r.choices[0].finish_reason === "length", JSON.stringify(r.usage));
        }
        // Token-id prompts and streaming give the same text.
        const s = samples[0];
        const ids = JSON.parse((await raw(port, "POST", "/tokenize", { body: JSON.stringify({ content: s.prompt }) })).body).tokens;
        const a = await client.completions.create({ model: "tiny-next", prompt: ids, max_tokens: 6, temperature: 0 });
        const b = await client.completions.create({ model: "tiny-next", prompt: s.prompt, max_tokens: 6, temperature: 0, stream: true });
        let streamed = "";
        for await (const c of b) streamed += c.choices[0]?.text ?? "";
        check("completions: token ids = string prompt = streamed", a.choices[0].text === streamed && streamed.length > 0,
            `${JSON.stringify(a.choices[0].text)} vs ${JSON.stringify(streamed)}`);
    });

    // Chat: streaming and non-streaming agree (greedy), usage chunk, [DONE] handled by the client.
    let greedyText = "";
    await test("chat stream vs whole", async () => {
        const whole = await client.chat.completions.create({ model: "tiny-next", messages: user("Write a function."), max_tokens: 16, temperature: 0, logit_bias: noEos });
        greedyText = whole.choices[0].message.content;
        check("chat: content", typeof greedyText === "string" && greedyText.length > 0, JSON.stringify(whole));
        check("chat: finish length", whole.choices[0].finish_reason === "length");
        check("chat: usage", whole.usage.completion_tokens === 16 && whole.usage.prompt_tokens > 0 &&
            whole.usage.total_tokens === whole.usage.prompt_tokens + 16 && typeof whole.usage.prompt_tokens_details?.cached_tokens === "number",
            JSON.stringify(whole.usage));
        const stream = await client.chat.completions.create({ model: "tiny-next", messages: user("Write a function."), max_tokens: 16, temperature: 0,
            logit_bias: noEos, stream: true, stream_options: { include_usage: true } });
        let text = "", ids = new Set(), roleFirst = false, finish = null, usage = null, n = 0;
        for await (const c of stream) {
            ids.add(c.id);
            if (n++ === 0) roleFirst = c.choices[0]?.delta?.role === "assistant";
            if (c.choices.length) {
                text += c.choices[0].delta.content ?? "";
                if (c.choices[0].finish_reason) finish = c.choices[0].finish_reason;
            }
            if (c.usage) usage = c.usage;
        }
        check("stream: equals non-streaming", text === greedyText, `${JSON.stringify(text)} vs ${JSON.stringify(greedyText)}`);
        check("stream: one id, role first, finish length", ids.size === 1 && roleFirst && finish === "length");
        check("stream: usage chunk", usage && usage.completion_tokens === 16, JSON.stringify(usage));
    });

    await test("stop strings", async () => {
        // A stop string taken from the middle of the greedy reply cuts it exactly there.
        const cut = Math.max(1, Math.floor(greedyText.length / 2));
        const stop = greedyText.slice(cut, cut + 3);
        const at = greedyText.indexOf(stop);
        const r = await client.chat.completions.create({ model: "tiny-next", messages: user("Write a function."), max_tokens: 16, temperature: 0, logit_bias: noEos, stop: [stop, "never-appears"] });
        check("stop: text ends before the stop string", r.choices[0].message.content === greedyText.slice(0, at),
            `stop ${JSON.stringify(stop)}: ${JSON.stringify(r.choices[0].message.content)}`);
        check("stop: finish_reason stop", r.choices[0].finish_reason === "stop");
    });

    await test("seed determinism", async () => {
        const ask = (seed) => client.chat.completions.create({ model: "tiny-next", messages: user("Tell me a story."), max_tokens: 12, temperature: 1.0, seed, logit_bias: noEos })
            .then((r) => r.choices[0].message.content);
        const a = await ask(1234), b = await ask(1234);
        const others = await Promise.all([ask(1), ask(2), ask(3)]);
        check("seed: same seed, same text", a === b, `${JSON.stringify(a)} vs ${JSON.stringify(b)}`);
        check("seed: different seeds differ", new Set([a, ...others]).size > 1, JSON.stringify([a, ...others]));
    });

    await test("logprobs", async () => {
        const r = await client.chat.completions.create({ model: "tiny-next", messages: user("Hi"), max_tokens: 5, temperature: 0, logit_bias: noEos, logprobs: true, top_logprobs: 3 });
        const lp = r.choices[0].logprobs?.content ?? [];
        check("logprobs: one entry per token", lp.length === 5, JSON.stringify(r.choices[0].logprobs));
        check("logprobs: top 3, greedy token is the most likely",
            lp.every((e) => e.top_logprobs.length === 3 && e.logprob <= 0 && e.top_logprobs[0].token === e.token &&
                Math.abs(e.top_logprobs[0].logprob - e.logprob) < 1e-4), JSON.stringify(lp[0]));
        check("logprobs: tokens spell the content",  // by their bytes: a split character's `token` strings are U+FFFD
            Buffer.from(lp.flatMap((e) => e.bytes)).toString("utf8") === r.choices[0].message.content);
    });

    await test("multi-turn prefix reuse", async () => {
        const first = user("What is a prime number?");
        const r1 = await client.chat.completions.create({ model: "tiny-next", messages: first, max_tokens: 10, temperature: 0, logit_bias: noEos });
        const second = [...first, { role: "assistant", content: r1.choices[0].message.content }, { role: "user", content: "And 7?" }];
        const r2 = await client.chat.completions.create({ model: "tiny-next", messages: second, max_tokens: 4, temperature: 0, logit_bias: noEos });
        const cached = r2.usage.prompt_tokens_details.cached_tokens;
        check("multi-turn: the continued conversation reuses its earlier turn", cached >= r1.usage.prompt_tokens,
            `cached ${cached} of ${r2.usage.prompt_tokens}; first prompt ${r1.usage.prompt_tokens}`);
    });

    await test("per-request kv_bits", async () => {
        // A conversation may keep its own KV cache type (a sluice extension, as SwiftLM's kv_bits):
        // served, its continuation reuses its earlier turn in a session of the same type, and a type
        // that does not exist is a 400 naming the field.
        const first = user("Name three colours.");
        const r1 = await client.chat.completions.create({ model: "tiny-next", messages: first, max_tokens: 8, temperature: 0, logit_bias: noEos, kv_bits: 4 });
        check("kv_bits: a q4 conversation is served", typeof r1.choices[0].message.content === "string" && r1.usage.completion_tokens === 8,
            JSON.stringify(r1.usage));
        const second = [...first, { role: "assistant", content: r1.choices[0].message.content }, { role: "user", content: "And two more?" }];
        const r2 = await client.chat.completions.create({ model: "tiny-next", messages: second, max_tokens: 4, temperature: 0, logit_bias: noEos, kv_bits: 4 });
        const cached = r2.usage.prompt_tokens_details.cached_tokens;
        check("kv_bits: its continuation reuses the q4 session", cached >= r1.usage.prompt_tokens,
            `cached ${cached}; first prompt ${r1.usage.prompt_tokens}`);
        const plain = await client.chat.completions.create({ model: "tiny-next", messages: first, max_tokens: 8, temperature: 0, logit_bias: noEos });
        check("kv_bits: the server's own type still serves", plain.usage.completion_tokens === 8);
        let status = 0, param = "";
        try {
            await client.chat.completions.create({ model: "tiny-next", messages: first, max_tokens: 2, kv_bits: 5 });
        } catch (e) {
            status = e.status;
            param = e.error?.param ?? e.param;
        }
        check("kv_bits: 5 is a 400 naming kv_bits", status === 400 && param === "kv_bits", `${status} ${param}`);
    });

    await test("legacy echo and logprobs", async () => {
        // text_offset indexes the returned text, which starts with the prompt when echo is on (and
        // logprobs then cover the prompt's tokens too: "echo: the prompt's logprobs" below).
        const prompt = "The river flows";
        const r = await client.completions.create({ model: "tiny-next", prompt, max_tokens: 5, temperature: 0, echo: true, logprobs: 2, logit_bias: noEos });
        const c = r.choices[0], lp = c.logprobs;
        check("echo: the text starts with the prompt", c.text.startsWith(prompt), JSON.stringify(c.text));
        check("echo: offsets index the returned text", lp.text_offset[0] === 0 && lp.text_offset.at(-5) === prompt.length &&
            lp.tokens.every((t, i) => c.text.slice(lp.text_offset[i], lp.text_offset[i] + t.length) === t), JSON.stringify(lp));
        let text = "";
        const offsets = [];
        for await (const chunk of await client.completions.create({ model: "tiny-next", prompt, max_tokens: 5, temperature: 0, echo: true, logprobs: 2,
            logit_bias: noEos, stream: true })) {
            const ch = chunk.choices[0];
            if (!ch) continue;
            text += ch.text;
            if (ch.logprobs) offsets.push(...ch.logprobs.text_offset);
        }
        check("echo stream: the same text and offsets", text === c.text && JSON.stringify(offsets) === JSON.stringify(lp.text_offset),
            `${JSON.stringify(offsets)} vs ${JSON.stringify(lp.text_offset)}`);
    });

    await test("echo: the prompt's logprobs", async () => {
        // OpenAI's (and vLLM's) scoring request: echo with logprobs and max_tokens 0 returns the prompt's
        // tokens with the model's logprob of each given the ones before (the first: null).
        const prompt = "The river flows past the old mill, under the stone bridge and out into the grey sea. ".repeat(3);
        const ids = JSON.parse((await raw(port, "POST", "/tokenize", { body: JSON.stringify({ content: prompt }) })).body).tokens;
        const r = await client.completions.create({ model: "tiny-next", prompt, max_tokens: 0, echo: true, logprobs: 2 });
        const c = r.choices[0], lp = c.logprobs;
        check("scoring: the text is the prompt, one entry per prompt token", c.text === prompt && lp.tokens.length === ids.length &&
            lp.tokens.join("") === prompt && r.usage.prompt_tokens === ids.length && r.usage.completion_tokens === 0 &&
            r.usage.prompt_tokens_details.cached_tokens === 0, JSON.stringify([c.text.length, lp.tokens.length, ids.length, r.usage]));
        check("scoring: the first token has none", lp.token_logprobs[0] === null && lp.top_logprobs[0] === null && lp.text_offset[0] === 0,
            JSON.stringify([lp.token_logprobs[0], lp.top_logprobs[0]]));
        check("scoring: offsets index the prompt, top_logprobs hold 2", lp.tokens.every((t, i) => prompt.slice(lp.text_offset[i], lp.text_offset[i] + t.length) === t) &&
            lp.top_logprobs.slice(1).every((t, i) => Object.keys(t).length >= 1 && Object.keys(t).length <= 2 &&
                Math.max(...Object.values(t)) >= lp.token_logprobs[i + 1] - 1e-6), JSON.stringify(lp.top_logprobs.slice(0, 3)));
        // The same numbers from `sluice logits` (the same forwards: chunks of 64 over the prompt but its
        // last token), reduced here.
        const tmp = fs.mkdtempSync(path.join(os.tmpdir(), "sluice-echo-"));
        const out = path.join(tmp, "logits.npy");
        execFileSync(bin, ["logits", modelDir, "--ids", ids.slice(0, -1).join(","), "--out", out, "--chunk", "64"], { stdio: ["ignore", "ignore", "pipe"] });
        const b = fs.readFileSync(out);
        const hl = b.readUInt16LE(8);
        const cols = Number(b.subarray(10, 10 + hl).toString("latin1").match(/'shape': \((\d+), (\d+)\)/)[2]);
        const data = new Float32Array(b.buffer.slice(b.byteOffset + 10 + hl, b.byteOffset + b.length));
        fs.rmSync(tmp, { recursive: true, force: true });
        let worst = 0;
        for (let p = 0; p + 1 < ids.length; p++) {
            const row = data.subarray(p * cols, (p + 1) * cols);
            let max = -Infinity, sum = 0;
            for (const v of row) max = Math.max(max, v);
            for (const v of row) sum += Math.exp(v - max);
            worst = Math.max(worst, Math.abs(row[ids[p + 1]] - max - Math.log(sum) - lp.token_logprobs[p + 1]));
        }
        check("scoring: each logprob equals sluice logits' log-softmax", worst < 1e-4 && ids.length > 64, `largest difference ${worst} over ${ids.length} tokens`);

        // A greedy continuation, then scored as part of a prompt: the decode path's logprobs for the
        // same tokens, close (other kernels: the prefill's int8 activations).
        const g = await client.completions.create({ model: "tiny-next", prompt, max_tokens: 6, temperature: 0, logit_bias: noEos, echo: true, logprobs: 1 });
        const glp = g.choices[0].logprobs;
        const generated = glp.token_logprobs.slice(ids.length);
        check("echo + generation: prompt entries equal the scoring request's", JSON.stringify(glp.token_logprobs.slice(0, ids.length)) ===
            JSON.stringify(lp.token_logprobs) && generated.length === 6 && g.choices[0].text === prompt + glp.tokens.slice(ids.length).join(""),
            JSON.stringify(glp.token_logprobs.slice(ids.length - 2)));
        const s = await client.completions.create({ model: "tiny-next", prompt: g.choices[0].text, max_tokens: 0, echo: true, logprobs: 1 });
        const scored = s.choices[0].logprobs.token_logprobs.slice(-6);
        check("the generated tokens, scored as a prompt: the logprobs generation gave", s.choices[0].logprobs.tokens.slice(-6).join("") ===
            glp.tokens.slice(-6).join("") && scored.every((v, i) => Math.abs(v - generated[i]) < 0.1), `${JSON.stringify(scored)} vs ${JSON.stringify(generated)}`);

        // Streamed: the echoed prompt's chunk carries its logprobs.
        const chunks = [];
        for await (const chunk of await client.completions.create({ model: "tiny-next", prompt, max_tokens: 2, temperature: 0, echo: true, logprobs: 2, stream: true }))
            if (chunk.choices[0]) chunks.push(chunk.choices[0]);
        check("scoring stream: the first chunk is the prompt with its logprobs", chunks[0].text === prompt &&
            JSON.stringify(chunks[0].logprobs.token_logprobs) === JSON.stringify(lp.token_logprobs) &&
            chunks[1].logprobs.text_offset[0] === prompt.length, JSON.stringify(chunks[0].logprobs?.token_logprobs?.slice(0, 3)));
    });

    await test("n choices", async () => {
        // n > 1: the choices one after another; with a seed, choice i uses seed + i (reproducible).
        const ask = () => client.chat.completions.create({ model: "tiny-next", messages: user("Tell me a story."), max_tokens: 8, temperature: 1.0,
            seed: 77, n: 3, logit_bias: noEos });
        const r = await ask();
        check("n: three choices, indexed", r.choices.length === 3 && r.choices.every((c, i) => c.index === i && c.message.content.length > 0),
            JSON.stringify(r.choices));
        check("n: usage sums the choices' tokens", r.usage.completion_tokens === 24 && r.usage.total_tokens === r.usage.prompt_tokens + 24,
            JSON.stringify(r.usage));
        check("n: the choices differ", new Set(r.choices.map((c) => c.message.content)).size > 1, JSON.stringify(r.choices.map((c) => c.message.content)));
        const again = await ask();
        check("n: reproducible with a seed", JSON.stringify(again.choices.map((c) => c.message.content)) === JSON.stringify(r.choices.map((c) => c.message.content)));
        const single = await client.chat.completions.create({ model: "tiny-next", messages: user("Tell me a story."), max_tokens: 8, temperature: 1.0,
            seed: 78, logit_bias: noEos });
        check("n: choice 1 is what seed + 1 gives alone", single.choices[0].message.content === r.choices[1].message.content,
            `${JSON.stringify(single.choices[0].message.content)} vs ${JSON.stringify(r.choices[1].message.content)}`);
        const texts = ["", ""];
        let finishes = 0, usage = null;
        const stream = await client.chat.completions.create({ model: "tiny-next", messages: user("Tell me a story."), max_tokens: 8, temperature: 1.0,
            seed: 77, n: 2, logit_bias: noEos, stream: true, stream_options: { include_usage: true } });
        for await (const chunk of stream) {
            if (chunk.usage) usage = chunk.usage;
            for (const c of chunk.choices) {
                texts[c.index] += c.delta.content ?? "";
                if (c.finish_reason) ++finishes;
            }
        }
        check("n: streamed choices equal the whole ones", texts[0] === r.choices[0].message.content && texts[1] === r.choices[1].message.content &&
            finishes === 2 && usage?.completion_tokens === 16, JSON.stringify({ texts, finishes, usage }));
    });

    await test("cancel on disconnect", async () => {
        const metric = async (name) => {
            const m = (await raw(port, "GET", "/metrics")).body;
            return Number(m.match(new RegExp(`^${name} (\\S+)$`, "m"))[1]);
        };
        const before = await metric("sluice_generated_tokens_total");
        const stream = await client.chat.completions.create({ model: "tiny-next", messages: user("Count forever."), max_tokens: 900, temperature: 0, logit_bias: noEos, stream: true });
        let n = 0;
        for await (const c of stream) {
            if (c.choices[0]?.delta?.content && ++n >= 3) break;  // breaking out aborts the request
        }
        let active = 1;
        for (let i = 0; i < 50 && active > 0; ++i) {
            await sleep(100);
            active = JSON.parse((await raw(port, "GET", "/health")).body).slots.active;
        }
        const generated = (await metric("sluice_generated_tokens_total")) - before;
        check("cancel: the session is released", active === 0);
        check("cancel: generation stopped early", generated < 900, `generated ${generated}`);
    });

    await test("cancel on disconnect (non-streaming)", async () => {
        const metric = async (name) => Number((await raw(port, "GET", "/metrics")).body.match(new RegExp(`^${name} (\\S+)$`, "m"))[1]);
        const before = await metric("sluice_generated_tokens_total");
        // The client hangs up 300 ms into a ~3 s generation.
        const timedOut = await new Promise((resolve) => {
            const body = JSON.stringify({ messages: user("Count forever."), max_tokens: 900, temperature: 0, logit_bias: noEos });
            const req = http.request({ host: "127.0.0.1", port, method: "POST", path: "/v1/chat/completions",
                headers: { Authorization: `Bearer ${KEY}`, "Content-Type": "application/json", "Content-Length": Buffer.byteLength(body) } });
            req.on("error", () => resolve(true));
            req.on("response", (res) => res.on("data", () => {}));
            req.end(body);
            setTimeout(() => { req.destroy(); resolve(true); }, 300);
        });
        let active = 1;
        for (let i = 0; i < 50 && active > 0; ++i) {
            await sleep(100);
            active = JSON.parse((await raw(port, "GET", "/health")).body).slots.active;
        }
        const generated = (await metric("sluice_generated_tokens_total")) - before;
        check("cancel (whole): the client gave up", timedOut);
        check("cancel (whole): the session is released", active === 0);
        check("cancel (whole): generation stopped early", generated < 900, `generated ${generated}`);
    });

    await test("concurrency", async () => {
        const prompts = ["One", "Two", "Three", "Four", "Five"];
        const seq = [];
        for (const p of prompts) seq.push((await client.chat.completions.create({ model: "tiny-next", messages: user(p), max_tokens: 8, temperature: 0, logit_bias: noEos })).choices[0].message.content);
        const par = await Promise.all(prompts.map((p, i) => i % 2
            ? client.chat.completions.create({ model: "tiny-next", messages: user(p), max_tokens: 8, temperature: 0, logit_bias: noEos }).then((r) => r.choices[0].message.content)
            : client.chat.completions.create({ model: "tiny-next", messages: user(p), max_tokens: 8, temperature: 0, logit_bias: noEos, stream: true })
                .then(async (s) => { let t = ""; for await (const c of s) t += c.choices[0]?.delta?.content ?? ""; return t; })));
        check("concurrency: 5 requests on 2 sessions give the sequential results", JSON.stringify(par) === JSON.stringify(seq),
            `${JSON.stringify(par)} vs ${JSON.stringify(seq)}`);
    });

    await test("tools", async () => {
        const tools = [{ type: "function", function: { name: "get_weather", description: "Weather of a city",
            parameters: { type: "object", properties: { city: { type: "string" } }, required: ["city"] } } }];
        const ask = (extra) => client.chat.completions.create({ model: "tiny-next", messages: user("Weather in Paris?"), max_tokens: 12, temperature: 0, logit_bias: noEos, ...extra });
        const plain = await ask({});
        const none = await ask({ tools, tool_choice: "none" });
        const auto = await ask({ tools });
        check("tools: the template shows tools unless tool_choice is none",
            none.usage.prompt_tokens === plain.usage.prompt_tokens && auto.usage.prompt_tokens > plain.usage.prompt_tokens + 20,
            `${plain.usage.prompt_tokens} ${none.usage.prompt_tokens} ${auto.usage.prompt_tokens}`);
        // A named tool_choice is enforced by a grammar (see "tool_choice enforced" below); cut by
        // max_tokens here before the call closed, the unfinished call is dropped — never returned as
        // markup in the content — and the reply ends "length".
        const named = await ask({ tools, tool_choice: { type: "function", function: { name: "get_weather" } } });
        const m = named.choices[0].message;
        check("tools: named tool_choice forces the call",
            (m.tool_calls?.[0]?.function?.name === "get_weather" && named.choices[0].finish_reason === "tool_calls") ||
            (!m.tool_calls && !(m.content ?? "").includes("<tool_call>") && named.choices[0].finish_reason === "length"),
            JSON.stringify(named.choices[0]));
        check("tools: forced prefix is part of the prompt", named.usage.prompt_tokens > auto.usage.prompt_tokens);
    });

    await test("json_object", async () => {
        // Grammar-constrained decoding: whatever the model wants, the reply is a JSON object or a
        // prefix of one; biasing the tokens of "{}" makes it a complete object at once, and then
        // end-of-sequence is the only choice.
        const close = JSON.parse((await raw(port, "POST", "/tokenize", { body: JSON.stringify({ content: "{}" }) })).body).tokens;
        const closed = await client.chat.completions.create({ model: "tiny-next", messages: user("Give me JSON."), max_tokens: 20, temperature: 0,
            response_format: { type: "json_object" }, logit_bias: Object.fromEntries(close.map((id) => [String(id), 50])) });
        check("json_object: closes and stops", closed.choices[0].message.content === "{}" && closed.choices[0].finish_reason === "stop",
            JSON.stringify(closed.choices[0]));
        for (const seed of [1, 2, 3]) {
            const r = await client.chat.completions.create({ model: "tiny-next", messages: user("Describe a cat as JSON."), max_tokens: 60,
                temperature: 0.9, seed, response_format: { type: "json_object" } });
            const text = r.choices[0].message.content;
            let ok = text.trimStart().startsWith("{") && !/[\u0000-\u0008]/.test(text);
            if (r.choices[0].finish_reason === "stop") {
                try { ok &&= typeof JSON.parse(text) === "object"; } catch { ok = false; }
            }
            check(`json_object: seed ${seed} gives JSON`, ok, JSON.stringify(r.choices[0]));
        }
    });

    // json_schema: constrained decoding; every finished reply parses and validates (ajv).
    const ajv = new Ajv({ strict: true, allErrors: true });
    const movie = {
        type: "object",
        properties: {
            title: { type: "string", minLength: 1, maxLength: 24 },
            year: { type: "integer", minimum: 1900, maximum: 2030 },
            genre: { enum: ["drama", "comedy", "horror"] },
            cast: { type: "array", items: { $ref: "#/$defs/actor" }, minItems: 1, maxItems: 2 },
            rating: { anyOf: [{ type: "number", minimum: 0, exclusiveMaximum: 10 }, { type: "null" }] },
            sequel: { type: "boolean" },
        },
        required: ["title", "year", "genre", "cast", "rating"],
        additionalProperties: false,
        $defs: { actor: { type: "object", properties: { name: { type: "string", maxLength: 16 }, lead: { type: "boolean" } },
            required: ["name", "lead"], additionalProperties: false } },
    };
    const validMovie = ajv.compile(movie);
    await test("json_schema", async () => {
        for (const seed of [1, 2, 3, 4]) {
            const stream = seed % 2 === 0;
            const req = { model: "tiny-next", messages: user("Describe a movie as JSON."), max_tokens: 500, temperature: 0.9, seed,
                response_format: { type: "json_schema", json_schema: { name: "movie", schema: movie, strict: true } } };
            let text = "", finish = null;
            if (stream) {
                for await (const c of await client.chat.completions.create({ ...req, stream: true })) {
                    text += c.choices[0]?.delta?.content ?? "";
                    finish = c.choices[0]?.finish_reason ?? finish;
                }
            } else {
                const r = await client.chat.completions.create(req);
                text = r.choices[0].message.content;
                finish = r.choices[0].finish_reason;
            }
            let value = null;
            try { value = JSON.parse(text); } catch {}
            check(`json_schema: seed ${seed} (${stream ? "stream" : "whole"}) ends with stop`, finish === "stop", `${finish}: ${text}`);
            check(`json_schema: seed ${seed} parses and validates`, value !== null && validMovie(value),
                `${text} ${JSON.stringify(validMovie.errors)}`);
        }
        // Even with end-of-sequence banned the reply is one value and then stops: the grammar
        // leaves no other token.
        const r = await client.chat.completions.create({ model: "tiny-next", messages: user("A number."), max_tokens: 50, temperature: 0,
            logit_bias: noEos, response_format: { type: "json_schema", json_schema: { name: "n", schema: { enum: ["yes", "no", 3] } } } });
        check("json_schema: enum", ['"yes"', '"no"', "3"].includes(r.choices[0].message.content) && r.choices[0].finish_reason === "stop",
            JSON.stringify(r.choices[0]));
    });

    await test("tool_choice enforced", async () => {
        const tools = [
            { type: "function", function: { name: "get_weather", description: "Weather of a city", strict: true,
                parameters: { type: "object", properties: { city: { type: "string", maxLength: 20 }, unit: { enum: ["C", "F"] } },
                    required: ["city", "unit"], additionalProperties: false } } },
            { type: "function", function: { name: "add", description: "Add two integers",
                parameters: { type: "object", properties: { a: { type: "integer", minimum: 0 }, b: { type: "integer", minimum: -5, maximum: 5 } }, required: ["a", "b"] } } },
        ];
        const validArgs = Object.fromEntries(tools.map((t) => [t.function.name, ajv.compile(t.function.parameters)]));
        const callsValid = (calls) => Array.isArray(calls) && calls.length > 0 && calls.every((c) => {
            try { return c.type === "function" && typeof c.id === "string" && validArgs[c.function.name](JSON.parse(c.function.arguments)); } catch { return false; }
        });
        const ask = (extra) => client.chat.completions.create({ model: "tiny-next", messages: user("What is the weather in Paris?"),
            max_tokens: 120, temperature: 0.8, tools, ...extra });
        for (const seed of [1, 2, 3]) {
            const r = await ask({ seed, tool_choice: "required", parallel_tool_calls: false });
            const m = r.choices[0].message;
            check(`tools required: seed ${seed} gives one valid call`, r.choices[0].finish_reason === "tool_calls" && m.tool_calls?.length === 1 &&
                callsValid(m.tool_calls) && m.content === null, JSON.stringify(r.choices[0]));
        }
        const named = await ask({ seed: 7, tool_choice: { type: "function", function: { name: "add" } }, parallel_tool_calls: false });
        check("tools named: calls exactly that function with valid arguments", named.choices[0].finish_reason === "tool_calls" &&
            named.choices[0].message.tool_calls.every((c) => c.function.name === "add") && callsValid(named.choices[0].message.tool_calls),
            JSON.stringify(named.choices[0]));
        // Parallel calls: with end-of-sequence banned the grammar's only way on is another call.
        const par = await ask({ seed: 3, temperature: 0, tool_choice: { type: "function", function: { name: "get_weather" } }, logit_bias: noEos, max_tokens: 200 });
        const calls = par.choices[0].message.tool_calls ?? [];
        check("tools parallel: several calls in one reply", calls.length >= 2 && callsValid(calls) &&
            new Set(calls.map((c) => c.id)).size === calls.length, JSON.stringify(par.choices[0]));
        const single = await ask({ seed: 3, temperature: 0, tool_choice: "required", parallel_tool_calls: false, logit_bias: noEos });
        check("tools parallel_tool_calls false: one call, then end-of-sequence is the only token",
            single.choices[0].message.tool_calls?.length === 1 && single.choices[0].finish_reason === "tool_calls", JSON.stringify(single.choices[0]));
        // Streaming: tool_calls deltas with index/id/name/arguments, finish_reason tool_calls.
        const stream = await ask({ seed: 5, tool_choice: "required", parallel_tool_calls: false, stream: true });
        const acc = [];
        let finish = null;
        for await (const c of stream) {
            for (const d of c.choices[0]?.delta?.tool_calls ?? []) {
                acc[d.index] ??= { id: d.id, type: d.type, function: { name: "", arguments: "" } };
                acc[d.index].function.name += d.function?.name ?? "";
                acc[d.index].function.arguments += d.function?.arguments ?? "";
            }
            finish = c.choices[0]?.finish_reason ?? finish;
        }
        check("tools stream: tool_calls deltas and finish_reason", finish === "tool_calls" && callsValid(acc), JSON.stringify(acc));
        // none: no tool calls; the tools are not shown to the model.
        const none = await ask({ seed: 1, tool_choice: "none", max_tokens: 8 });
        check("tools none: plain content", !none.choices[0].message.tool_calls && none.choices[0].finish_reason !== "tool_calls");
    });

    await test("queue and keep-alive", async () => {
        // Two long streams hold both sessions; a third request queues and receives SSE comments
        // (every 150 ms here) until a session frees up, then completes normally.
        const long = () => client.chat.completions.create({ model: "tiny-next", messages: user("Go on."), max_tokens: 400, temperature: 0, logit_bias: noEos, stream: true });
        const holders = [await long(), await long()];
        const drains = holders.map(async (s) => { let n = 0; for await (const c of s) n += c.choices[0]?.delta?.content ? 1 : 0; return n; });
        await sleep(50);
        const third = raw(port, "POST", "/v1/chat/completions", { body: JSON.stringify({ messages: user("Hi"), max_tokens: 3, stream: true }) });
        let maxQueued = 0;
        for (let i = 0; i < 10; ++i) {
            await sleep(30);
            maxQueued = Math.max(maxQueued, JSON.parse((await raw(port, "GET", "/health")).body).slots.queued);
        }
        const r = await third;
        await Promise.all(drains);
        check("queue: the third request waited", maxQueued >= 1, `max queued ${maxQueued}`);
        check("keep-alive: comment lines while queued", r.body.includes("\n: keep-alive\n\n") || r.body.startsWith(": keep-alive"), r.body.slice(0, 300));
        check("keep-alive: stream completes", r.status === 200 && r.body.endsWith("data: [DONE]\n\n") && r.headers["content-type"].startsWith("text/event-stream"));
    });

    // Error cases through the client: status, type and the field named.
    const expectError = async (name, status, promise, { param, code, messageHas } = {}) => {
        try {
            await promise;
            check(name, false, "no error");
        } catch (e) {
            const ok = e instanceof OpenAI.APIError && e.status === status && (param === undefined || e.param === param) &&
                (code === undefined || e.code === code) && (messageHas === undefined || messageHas.every((s) => String(e.message).includes(s)));
            check(name, ok, `status ${e.status} param ${e.param} code ${e.code}: ${e.message}`);
        }
    };
    const base = { model: "tiny-next", messages: user("Hi"), max_tokens: 2 };
    await expectError("error: n > 16", 400, client.chat.completions.create({ ...base, n: 17 }), { param: "n" });
    await expectError("error: n > 1 on legacy completions", 400, client.completions.create({ model: "tiny-next", prompt: "Hi", max_tokens: 2, n: 2 }), { param: "n" });
    // Another model name is served by this model (as llama-server does; --strict-model-name makes it a
    // 404: server_compat.test.mjs).
    const other = await client.chat.completions.create({ ...base, model: "gpt-5" });
    check("another model name is served", other.model === "tiny-next" && other.choices.length === 1, JSON.stringify(other.model));
    await expectError("error: bad key", 401, new OpenAI({ baseURL: `http://127.0.0.1:${port}/v1`, apiKey: "wrong", maxRetries: 0 }).models.list());
    await expectError("error: image part", 400, client.chat.completions.create({ ...base, messages: [{ role: "user", content: [{ type: "image_url", image_url: { url: "http://x" } }] }] }),
        { messageHas: ["image_url"] });
    await expectError("error: temperature type", 400, client.chat.completions.create({ ...base, temperature: "hot" }), { param: "temperature" });
    await expectError("error: top_p range", 400, client.chat.completions.create({ ...base, top_p: 2 }), { param: "top_p" });
    await expectError("error: bad role", 400, client.chat.completions.create({ ...base, messages: [{ role: "wizard", content: "x" }] }), { param: "messages[0].role" });
    await expectError("error: missing messages", 400, client.chat.completions.create({ model: "tiny-next" }), { param: "messages" });
    await expectError("error: logit_bias key", 400, client.chat.completions.create({ ...base, logit_bias: { "99999999": 1 } }), { param: "logit_bias" });
    await expectError("error: stop type", 400, client.chat.completions.create({ ...base, stop: [1] }), { param: "stop[0]" });
    await expectError("error: top_logprobs without logprobs", 400, client.chat.completions.create({ ...base, top_logprobs: 2 }), { param: "top_logprobs" });
    await expectError("error: response_format type", 400, client.chat.completions.create({ ...base, response_format: { type: "yaml" } }), { param: "response_format.type" });
    await expectError("error: json_schema without name", 400, client.chat.completions.create({ ...base, response_format: { type: "json_schema", json_schema: { schema: {} } } }),
        { param: "response_format.json_schema.name" });
    await expectError("error: json_schema pattern", 400, client.chat.completions.create({ ...base, response_format: { type: "json_schema",
        json_schema: { name: "x", schema: { type: "object", properties: { id: { type: "string", pattern: "^(?=[a-z])\\w+$" } } } } } }),
        { param: "response_format.json_schema.schema", code: "unsupported_schema", messageHas: ["'pattern'", "#/properties/id"] });
    await expectError("error: json_schema multipleOf", 400, client.chat.completions.create({ ...base, response_format: { type: "json_schema",
        json_schema: { name: "x", schema: { type: "integer", multipleOf: 0.3 } } } }), { code: "unsupported_schema", messageHas: ["'multipleOf'"] });
    await expectError("error: json_schema unsatisfiable", 400, client.chat.completions.create({ ...base, response_format: { type: "json_schema",
        json_schema: { name: "x", schema: { type: "string", minLength: 4, maxLength: 2 } } } }), { code: "invalid_schema", messageHas: ["minLength"] });
    await expectError("error: tool parameters unsupported", 400, client.chat.completions.create({ ...base, tool_choice: "required",
        tools: [{ type: "function", function: { name: "f", parameters: { type: "object", properties: { n: { type: "number", multipleOf: 0.5 } } } } }] }),
        { param: "tools[0].function.parameters", messageHas: ["'multipleOf'"] });
    await expectError("error: json_schema with forced tool call", 400, client.chat.completions.create({ ...base, tool_choice: "required",
        tools: [{ type: "function", function: { name: "f" } }], response_format: { type: "json_object" } }), { param: "response_format" });
    await expectError("error: tool_choice without tools", 400, client.chat.completions.create({ ...base, tool_choice: "required" }), { param: "tool_choice" });
    await expectError("error: context too long", 400, client.chat.completions.create({ ...base, messages: user("hello ".repeat(1500)) }),
        { code: "context_length_exceeded", messageHas: ["1024"] });
    await expectError("error: completions prompt type", 400, client.completions.create({ model: "tiny-next", prompt: { a: 1 } }), { param: "prompt" });

    // Raw HTTP abuse: every answer is an OpenAI error object and the server keeps serving.
    await test("raw http", async () => {
        const cases = [
            ["bad JSON", "POST", "/v1/chat/completions", "{\"messages\": [", 400],
            ["non-object body", "POST", "/v1/chat/completions", "[1,2]", 400],
            ["messages wrong type", "POST", "/v1/chat/completions", JSON.stringify({ messages: "hi" }), 400],
            ["message wrong type", "POST", "/v1/chat/completions", JSON.stringify({ messages: [42] }), 400],
            ["content wrong type", "POST", "/v1/chat/completions", JSON.stringify({ messages: [{ role: "user", content: 5 }] }), 400],
            ["max_tokens negative", "POST", "/v1/chat/completions", JSON.stringify({ messages: user("x"), max_tokens: -1 }), 400],
            ["max_tokens float", "POST", "/v1/chat/completions", JSON.stringify({ messages: user("x"), max_tokens: 1.5 }), 400],
            ["deep nesting", "POST", "/v1/chat/completions", "[".repeat(200000), 400],
            ["invalid UTF-8 JSON", "POST", "/v1/chat/completions", "{\"messages\": \"\xff\"}", 400],
            ["detokenize bad ids", "POST", "/detokenize", JSON.stringify({ tokens: [-1] }), 400],
            ["tokenize missing", "POST", "/tokenize", "{}", 400],
            ["unknown route", "GET", "/v1/nothing", undefined, 404],
            ["huge body", "POST", "/v1/chat/completions", "x".repeat(9 << 20), 413],
        ];
        for (const [name, method, p, body, status] of cases) {
            const r = await raw(port, method, p, { body });
            check(`raw: ${name} → ${status}`, r.status === status && isErrorObject(r.body), `${r.status} ${r.body.slice(0, 200)}`);
        }
        const noKey = await raw(port, "POST", "/v1/chat/completions", { body: JSON.stringify({ messages: user("x") }), auth: false });
        check("raw: missing key → 401", noKey.status === 401 && isErrorObject(noKey.body), `${noKey.status}`);
    });

    await test("fuzz", async () => {
        // Random values of every type in every field (and random messages): each answer is a 200
        // or an OpenAI error object, and the server stays up. Deterministic (seeded LCG).
        let state = 12345;
        const rand = (n) => ((state = (state * 1103515245 + 12345) % 2147483648) % n);
        const values = [null, true, false, 0, -1, 1, 2, 0.5, 1.5, -0.0, 1e308, -1e308, 4294967296, "", "x", "auto", "none", "required",
            [], [1], ["a"], [null], {}, { a: 1 }, { type: "text", text: "t" }, { type: "function", function: { name: "f" } }, "\u0000", "é🌍"];
        const fields = ["model", "temperature", "top_p", "top_k", "min_p", "repetition_penalty", "presence_penalty", "frequency_penalty",
            "logit_bias", "seed", "stop", "n", "logprobs", "top_logprobs", "stream", "stream_options", "tools", "tool_choice",
            "response_format", "chat_template_kwargs", "max_completion_tokens", "messages"];
        const bad = [];
        for (let i = 0; i < 250; ++i) {
            const body = { messages: user("Hi"), max_tokens: 1 };
            for (let k = rand(3) + 1; k > 0; --k) {
                const f = fields[rand(fields.length)];
                body[f] = f === "messages" && rand(2)
                    ? [{ role: ["user", "system", "assistant", "tool", "developer", 7][rand(6)], content: values[rand(values.length)],
                        tool_calls: rand(3) ? undefined : values[rand(values.length)] }]
                    : values[rand(values.length)];
            }
            if (body.max_completion_tokens !== undefined && body.max_completion_tokens !== null) body.max_completion_tokens = 1;
            const r = await raw(port, "POST", rand(4) ? "/v1/chat/completions" : "/v1/completions", { body: JSON.stringify({ prompt: "a", ...body }) });
            const ok = r.status === 200 ? (body.stream === true ? r.body.endsWith("data: [DONE]\n\n") : JSON.parse(r.body).choices?.length === 1)
                : [400, 404].includes(r.status) && isErrorObject(r.body);
            if (!ok) bad.push(`${r.status} ${JSON.stringify(body).slice(0, 200)} → ${r.body.slice(0, 200)}`);
        }
        check("fuzz: every answer is a result or an error object", bad.length === 0, bad.slice(0, 3).join("\n"));
        check("fuzz: server alive", JSON.parse((await raw(port, "GET", "/health")).body).status === "ok");
    });

    await test("slow client", async () => {
        // A client that sends half a request and stalls must not block others.
        const sock = net.connect(port, "127.0.0.1");
        await new Promise((r) => sock.once("connect", r));
        sock.write("POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n{\"messa");
        const t0 = Date.now();
        const r = await client.chat.completions.create({ model: "tiny-next", messages: user("Hi"), max_tokens: 2 });
        check("slow client: others are served", r.choices.length === 1 && Date.now() - t0 < 10000);
        sock.destroy();
    });

    await test("health, metrics, tokenize, web", async () => {
        const h = JSON.parse((await raw(port, "GET", "/health", { auth: false })).body);
        check("health", h.status === "ok" && h.model === "tiny-next" && h.memory_plan.dense_bytes > 0 && h.memory_plan.kv_type === "f32" && h.memory_plan.kv_bytes_per_token === 2048 && typeof h.expert_cache.hit_rate === "number" && h.slots.total === 2,
            JSON.stringify(h).slice(0, 300));
        const m = (await raw(port, "GET", "/metrics")).body;
        const val = (n) => Number((m.match(new RegExp(`^${n} (\\S+)$`, "m")) ?? [])[1]);
        check("metrics", val("sluice_requests_total") > 10 && val("sluice_generated_tokens_total") > 50 && val("sluice_queue_depth") === 0 &&
            Number.isFinite(val("sluice_expert_cache_hits_total")) && Number.isFinite(val("sluice_decode_tokens_per_second")), m.slice(0, 300));
        const text = "def hello():\n    return 'héllo 🌍'";
        const t = JSON.parse((await raw(port, "POST", "/tokenize", { body: JSON.stringify({ content: text }) })).body);
        const d = JSON.parse((await raw(port, "POST", "/detokenize", { body: JSON.stringify({ tokens: t.tokens }) })).body);
        check("tokenize round trip", t.tokens.length > 5 && d.content === text, JSON.stringify(d));
        const page = await raw(port, "GET", "/", { auth: false });
        check("web page", page.status === 200 && page.headers["content-type"].startsWith("text/html") && page.body.includes("<title>sluice</title>"));
        check("web page: a Content-Security-Policy keeps it to this server", /default-src 'self'; script-src 'self'/.test(page.headers["content-security-policy"] ?? ""),
            page.headers["content-security-policy"]);
        // Every embedded file is served without the key, with its type; no other path escapes the key.
        for (const [file, type] of [["/js/app.js", "text/javascript"], ["/style.css", "text/css"], ["/vendor/katex/fonts/KaTeX_Main-Regular.woff2", "font/woff2"],
            ["/vendor/manifest.json", "application/json"]]) {
            const r = await raw(port, "GET", file, { auth: false });
            check(`web page: ${file} needs no key`, r.status === 200 && r.headers["content-type"].startsWith(type), `${r.status} ${r.headers["content-type"]}`);
        }
        check("web page: a path that is no embedded file needs the key", (await raw(port, "GET", "/nope.js", { auth: false })).status === 401);
        check("web page: ... and is then 404", (await raw(port, "GET", "/nope.js")).status === 404);
    });
} catch (e) {
    check("suite", false, String(e && e.stack));
} finally {
    clearTimeout(watchdog);
    server.kill();
}
if (failed) console.log(server.log.split("\n").filter((l) => !l.includes("-> 200")).slice(-20).join("\n"));
console.log(`[server_openai] ${passed} passed, ${failed} failed`);
process.exit(failed ? 1 : 0);
