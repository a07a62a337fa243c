// server_compat.test.mjs — the routes other ecosystems' clients call, driven by those clients.
//
// Starts `sluice serve models/tiny-next` (with an API key) and checks Anthropic's Messages API through
// the official `@anthropic-ai/sdk` client — a Message whose text is the OpenAI endpoint's greedy text,
// the same streamed as named events (the SDK's own stream accumulator rebuilds it), system prompts,
// stop_sequences, max_tokens, forced tool_use with tool_result turns, thinking blocks, errors in
// Anthropic's shape, the x-api-key header — and Ollama's API through the
// official `ollama` npm client — /api/tags, /api/ps, /api/show, /api/version, /api/chat and
// /api/generate, whole and streamed, greedy text equal to the OpenAI endpoint's for the same
// messages, options mapped (num_predict, stop), format "json" / a JSON schema constraining the
// reply, errors as {"error"} — plus llama.cpp's /props and /slots, OpenAI's models.retrieve
// (/v1/models/{id}), a request naming another model served by this one (as llama-server does), and
// a second server with --strict-model-name answering such a request with 404.
// Prints "N passed, M failed"; exits 1 on failure.
import path from "node:path";
import Anthropic from "@anthropic-ai/sdk";
import { Ollama } from "ollama";
import OpenAI from "openai";
import { startServe, suite } from "./serve_util.mjs";

const bin = process.env.SLUICE_BIN;
const src = process.env.SLUICE_SOURCE_DIR;
if (!bin || !src) {
    console.error("[server_compat] SLUICE_BIN and SLUICE_SOURCE_DIR must be set");
    process.exit(2);
}
const modelDir = path.join(src, "models", "tiny-next");
const KEY = "sk-compat-" + Math.random().toString(36).slice(2);
const EOS = [8187, 8189];
const noEos = Object.fromEntries(EOS.map((id) => [String(id), -100]));

const { check, test, finish } = suite("server_compat");

const server = await startServe(bin, [modelDir, "--api-key", KEY, "--ctx-size", "1024", "--parallel", "2"]);
let strict = null;
const watchdog = setTimeout(() => {
    console.log("FAIL watchdog: the suite took longer than 120 s");
    server.kill();
    if (strict) strict.kill();
    process.exit(1);
}, 120000);

try {
    await server.ready();
    const base = `http://127.0.0.1:${server.port}`;
    const auth = { Authorization: `Bearer ${KEY}` };
    const ollama = new Ollama({ host: base, headers: auth });
    const openai = new OpenAI({ baseURL: `${base}/v1`, apiKey: KEY, maxRetries: 0, timeout: 30000 });
    const messages = [{ role: "user", content: "Write a haiku about rivers." }];

    await test("ollama: list, ps, show, version", async () => {
        const list = await ollama.list();
        check("ollama list: the served model, tagged", list.models.length === 1 && list.models[0].name === "tiny-next:latest" &&
            list.models[0].details.family === "qwen3_next", JSON.stringify(list));
        const ps = await ollama.ps();
        check("ollama ps: loaded", ps.models.length === 1 && ps.models[0].size > 0, JSON.stringify(ps));
        const show = await ollama.show({ model: "tiny-next" });
        check("ollama show: template and details", show.template.includes("<|im_start|>") && show.details.format === "sluice" &&
            show.model_info["general.architecture"] === "qwen3_next" && show.capabilities.includes("completion"),
            JSON.stringify(show).slice(0, 300));
        const v = await ollama.version();
        check("ollama version", typeof v.version === "string" && /^\d+\.\d+\.\d+$/.test(v.version), JSON.stringify(v));
    });

    // The greedy reply through Ollama's chat equals the OpenAI endpoint's for the same messages.
    const api = await openai.chat.completions.create({ model: "tiny-next", messages, max_tokens: 12, temperature: 0, logit_bias: noEos });
    const apiText = api.choices[0].message.content;

    await test("ollama chat", async () => {
        const r = await ollama.chat({ model: "tiny-next", messages, stream: false, options: { temperature: 0, num_predict: 12 } });
        // Ollama's options carry no logit bias: compare up to where the OpenAI reply (EOS banned) and
        // this one (EOS allowed) can differ, i.e. the whole text unless this one stopped first.
        const same = r.done_reason === "length" ? r.message.content === apiText : apiText.startsWith(r.message.content);
        check("ollama chat: greedy text equals the OpenAI endpoint's", same, `${JSON.stringify(r.message.content)} vs ${JSON.stringify(apiText)}`);
        check("ollama chat: counts and durations", r.done === true && r.prompt_eval_count > 0 && r.eval_count > 0 &&
            r.eval_count <= 12 && r.total_duration > 0 && r.message.role === "assistant", JSON.stringify(r));
        let text = "", last = null, parts = 0;
        for await (const part of await ollama.chat({ model: "tiny-next", messages, stream: true, options: { temperature: 0, num_predict: 12 } })) {
            text += part.message.content;
            last = part;
            ++parts;
        }
        check("ollama chat stream: the same text in pieces", text === r.message.content && parts > 2, `${parts} parts: ${JSON.stringify(text)}`);
        check("ollama chat stream: a final done object with counts", last && last.done === true && last.eval_count === r.eval_count &&
            typeof last.done_reason === "string", JSON.stringify(last));
    });

    await test("ollama generate", async () => {
        const r = await ollama.generate({ model: "tiny-next:latest", prompt: "Write a haiku about rivers.", stream: false, options: { temperature: 0, num_predict: 12 } });
        const same = r.done_reason === "length" ? r.response === apiText : apiText.startsWith(r.response);
        check("ollama generate: the prompt as a user turn, greedy text as chat's", same, `${JSON.stringify(r.response)} vs ${JSON.stringify(apiText)}`);
        let text = "";
        for await (const part of await ollama.generate({ model: "tiny-next", prompt: "Write a haiku about rivers.", stream: true, options: { temperature: 0, num_predict: 12 } }))
            text += part.response;
        check("ollama generate stream", text === r.response, `${JSON.stringify(text)} vs ${JSON.stringify(r.response)}`);
    });

    await test("ollama options and format", async () => {
        const stopped = await ollama.chat({ model: "tiny-next", messages, stream: false, options: { temperature: 0, num_predict: 12, stop: [apiText.slice(2, 4)] } });
        check("ollama stop: cut before the stop string", !stopped.message.content.includes(apiText.slice(2, 4)) && stopped.done_reason === "stop",
            JSON.stringify(stopped.message.content));
        const j = await ollama.chat({ model: "tiny-next", messages: [{ role: "user", content: "Give me a JSON object." }], format: "json", stream: false,
            options: { temperature: 0, num_predict: 64 } });
        let obj = null;
        try { obj = JSON.parse(j.message.content); } catch { /* checked below */ }
        // The tiny model may repeat keys until num_predict: then the reply is a cut JSON object.
        const jsonOk = j.done_reason === "length" ? /^\s*\{\s*"/.test(j.message.content)
            : obj !== null && typeof obj === "object" && !Array.isArray(obj);
        check("ollama format json: the reply is a JSON object", jsonOk, `${j.done_reason}: ${JSON.stringify(j.message.content)}`);
        const schema = { type: "object", properties: { river: { type: "string", maxLength: 12 }, long: { type: "boolean" } }, required: ["river", "long"], additionalProperties: false };
        const s = await ollama.chat({ model: "tiny-next", messages: [{ role: "user", content: "Name a river." }], format: schema, stream: false,
            options: { temperature: 0, num_predict: 64 } });
        let so = null;
        try { so = JSON.parse(s.message.content); } catch { /* checked below */ }
        check("ollama format schema: the reply matches it", so && typeof so.river === "string" && typeof so.long === "boolean" &&
            Object.keys(so).length === 2, JSON.stringify(s.message.content));
    });

    await test("ollama errors", async () => {
        let err = null;
        try {
            await ollama.chat({ model: "tiny-next", messages: [{ role: "user", content: "x", images: ["aGVsbG8="] }], stream: false });
        } catch (e) { err = e; }
        check("ollama: images are refused with a 400 naming them", err && err.status_code === 400 && /images/.test(err.error), String(err && err.error));
        const raw = await fetch(`${base}/api/chat`, { method: "POST", headers: { ...auth, "Content-Type": "application/json" }, body: "{" });
        const body = await raw.json();
        check("ollama: bad JSON is {error} with 400", raw.status === 400 && typeof body.error === "string", JSON.stringify(body));
        const noKey = await fetch(`${base}/api/tags`);
        check("ollama: the API key is required", noKey.status === 401);
    });

    await test("anthropic messages", async () => {
        const claude = new Anthropic({ baseURL: base, apiKey: KEY, maxRetries: 0, timeout: 30000 });
        // Anthropic's default is no thinking: the OpenAI reply to compare with has it off too.
        const plain = await openai.chat.completions.create({ model: "tiny-next", messages, max_tokens: 12, temperature: 0, logit_bias: noEos,
            chat_template_kwargs: { enable_thinking: false } });
        const apiPlain = plain.choices[0].message.content;
        const m = await claude.messages.create({ model: "claude-sonnet-4-5", max_tokens: 12, temperature: 0, messages });
        const text = m.content.filter((b) => b.type === "text").map((b) => b.text).join("");
        const same = m.stop_reason === "max_tokens" ? text === apiPlain : apiPlain.startsWith(text);
        check("anthropic: greedy text equals the OpenAI endpoint's", same, `${JSON.stringify(text)} vs ${JSON.stringify(apiPlain)}`);
        check("anthropic: a Message with usage", m.type === "message" && m.role === "assistant" && m.id.startsWith("msg_") &&
            m.usage.output_tokens > 0 && m.usage.input_tokens + m.usage.cache_read_input_tokens > 0, JSON.stringify(m));
        const stream = claude.messages.stream({ model: "claude-sonnet-4-5", max_tokens: 12, temperature: 0, messages });
        const events = [];
        stream.on("streamEvent", (e) => events.push(e.type));
        const final = await stream.finalMessage();
        const streamed = final.content.filter((b) => b.type === "text").map((b) => b.text).join("");
        check("anthropic stream: the same text", streamed === text && final.stop_reason === m.stop_reason, `${JSON.stringify(streamed)} ${final.stop_reason}`);
        check("anthropic stream: event order", events[0] === "message_start" && events.includes("content_block_start") &&
            events.includes("content_block_delta") && events.at(-2) === "message_delta" && events.at(-1) === "message_stop", events.join(","));
        const sys = await claude.messages.create({ model: "x", max_tokens: 6, temperature: 0, system: "You are terse.", messages });
        check("anthropic: a system prompt is part of the prompt", sys.usage.input_tokens + sys.usage.cache_read_input_tokens >
            m.usage.input_tokens + m.usage.cache_read_input_tokens, JSON.stringify([sys.usage, m.usage]));
        const stop = apiPlain.slice(2, 4);
        const stopped = await claude.messages.create({ model: "x", max_tokens: 12, temperature: 0, messages, stop_sequences: [stop] });
        check("anthropic: stop_sequences", stopped.stop_reason === "stop_sequence" && stopped.stop_sequence === stop, JSON.stringify(stopped));

        const tools = [{ name: "get_weather", description: "Weather of a city", input_schema: { type: "object", properties: { city: { type: "string", maxLength: 10 } }, required: ["city"] } }];
        const forced = await claude.messages.create({ model: "x", max_tokens: 64, temperature: 0, messages: [{ role: "user", content: "Weather in Paris?" }],
            tools, tool_choice: { type: "tool", name: "get_weather" } });
        const use = forced.content.find((b) => b.type === "tool_use");
        check("anthropic: a forced tool_use block", forced.stop_reason === "tool_use" && use && use.name === "get_weather" &&
            typeof use.input.city === "string" && use.id.startsWith("toolu_"), JSON.stringify(forced));
        const followUp = await claude.messages.create({ model: "x", max_tokens: 6, temperature: 0, tools, messages: [
            { role: "user", content: "Weather in Paris?" },
            { role: "assistant", content: forced.content },
            { role: "user", content: [{ type: "tool_result", tool_use_id: use?.id ?? "x", content: "Sunny, 21 C" }] }] });
        check("anthropic: a tool_result turn is answered", followUp.type === "message" && followUp.usage.output_tokens > 0, JSON.stringify(followUp));
        const think = await claude.messages.create({ model: "x", max_tokens: 16, temperature: 0, messages, thinking: { type: "enabled", budget_tokens: 1024 } });
        check("anthropic: thinking enabled opens a thinking block", think.content[0]?.type === "thinking" || think.content[0]?.type === "text",
            JSON.stringify(think.content));

        let err = null;
        try { await claude.messages.create({ model: "x", messages }); } catch (e) { err = e; }
        check("anthropic: max_tokens is required", err && err.status === 400 && err.error?.type === "error" &&
            err.error?.error?.type === "invalid_request_error" && /max_tokens/.test(err.error?.error?.message), JSON.stringify(err?.error));
        err = null;
        try {
            await claude.messages.create({ model: "x", max_tokens: 4, messages: [{ role: "user", content: [{ type: "image", source: { type: "base64", media_type: "image/png", data: "aGk=" } }] }] });
        } catch (e) { err = e; }
        check("anthropic: images are refused naming the block", err && err.status === 400 && /image/.test(err.error?.error?.message), JSON.stringify(err?.error));
        const bad = new Anthropic({ baseURL: base, apiKey: "wrong", maxRetries: 0 });
        err = null;
        try { await bad.messages.create({ model: "x", max_tokens: 2, messages }); } catch (e) { err = e; }
        check("anthropic: a wrong x-api-key is 401", err && err.status === 401, String(err));
    });

    await test("status polls are not logged", async () => {
        for (let i = 0; i < 3; ++i) await fetch(`${base}/health`);
        await fetch(`${base}/metrics`, { headers: auth });
        await fetch(`${base}/v1/models`, { headers: auth });
        await new Promise((r) => setTimeout(r, 100));
        check("a successful /health or /metrics poll writes no log line", !server.log.includes("GET /health") &&
            !server.log.includes("GET /metrics"), server.log.slice(-300));
        check("other requests are logged", server.log.includes("GET /v1/models -> 200"), server.log.slice(-300));
    });

    await test("llama.cpp props and slots", async () => {
        const props = await (await fetch(`${base}/props`, { headers: auth })).json();
        check("props: context, slots and template", props.default_generation_settings.n_ctx === 1024 && props.total_slots === 2 &&
            props.chat_template.includes("<|im_start|>") && props.build_info.startsWith("sluice"), JSON.stringify(props).slice(0, 300));
        const slots = await (await fetch(`${base}/slots`, { headers: auth })).json();
        check("slots: one entry per session", Array.isArray(slots) && slots.length === 2 && slots.every((s) => s.n_ctx === 1024 &&
            typeof s.is_processing === "boolean"), JSON.stringify(slots));
    });

    await test("openai models.retrieve and model names", async () => {
        const m = await openai.models.retrieve("tiny-next");
        check("models.retrieve: the served model", m.id === "tiny-next" && m.object === "model", JSON.stringify(m));
        let status = 0;
        try { await openai.models.retrieve("gpt-4o-mini"); } catch (e) { status = e.status; }
        check("models.retrieve: another id is 404", status === 404, String(status));
        const r = await openai.chat.completions.create({ model: "gpt-4o-mini", messages, max_tokens: 12, temperature: 0, logit_bias: noEos });
        check("another model name is served by this one", r.choices[0].message.content === apiText && r.model === "tiny-next",
            `${r.model}: ${JSON.stringify(r.choices[0].message.content)}`);
    });

    await test("--strict-model-name", async () => {
        strict = await startServe(bin, [modelDir, "--ctx-size", "256", "--strict-model-name"]);
        await strict.ready();
        const c = new OpenAI({ baseURL: `http://127.0.0.1:${strict.port}/v1`, apiKey: "none", maxRetries: 0, timeout: 30000 });
        let err = null;
        try { await c.chat.completions.create({ model: "gpt-4o-mini", messages, max_tokens: 2 }); } catch (e) { err = e; }
        check("strict: another name is 404 model_not_found", err && err.status === 404 && err.code === "model_not_found", String(err));
        const ok = await c.chat.completions.create({ model: "tiny-next", messages, max_tokens: 2 });
        check("strict: the served name is served", ok.choices.length === 1);
        const o = new Ollama({ host: `http://127.0.0.1:${strict.port}` });
        let oerr = null;
        try { await o.chat({ model: "llama3", messages, stream: false }); } catch (e) { oerr = e; }
        check("strict: an unknown Ollama model is 404", oerr && oerr.status_code === 404, String(oerr && oerr.error));
        const tagged = await o.chat({ model: "tiny-next:latest", messages, stream: false, options: { num_predict: 2 } });
        check("strict: the served name with :latest is served", tagged.done === true);
    });
} catch (e) {
    check("suite", false, String(e && e.stack));
} finally {
    clearTimeout(watchdog);
    server.kill();
    if (strict) strict.kill();
}
finish();
