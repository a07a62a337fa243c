// server_aisdk.test.mjs — `sluice serve` driven by the Vercel AI SDK (`ai`), through both of its
// OpenAI providers: @ai-sdk/openai-compatible (chat completions, what apps point at a local server)
// and @ai-sdk/openai (the Responses API by default, .chat() for chat completions).
//
// Starts `sluice serve models/tiny-next` and checks what these clients do with it: generateText and
// streamText (text, usage, finish reason; greedy text equal to the openai client's for the very body
// the SDK sent, recorded by a fetch wrapper); a forced tool call (toolChoice required and a named
// tool) parsed and run by the SDK's own loop, its input valid against the zod schema, no markup in
// the text, the tool result sent back in a second step (assistant tool_calls + tool message) and
// answered with text; tool calls in streamText's parts; structured output with a zod schema
// (generateObject, generateText's Output.object, streamObject's partial objects) valid against the
// schema; the same through the Responses API. The tiny model's words are arbitrary: the checks are on
// structure, on what the grammar guarantees, and on equality with the openai client's greedy result.
// Prints "N passed, M failed"; exits 1 on failure.
import path from "node:path";
import { createOpenAI } from "@ai-sdk/openai";
import { createOpenAICompatible } from "@ai-sdk/openai-compatible";
import { generateObject, generateText, Output, stepCountIs, streamObject, streamText, tool } from "ai";
import OpenAI from "openai";
import { z } from "zod";
import { fetchRecorder, startServe, suite } from "./serve_util.mjs";

const bin = process.env.SLUICE_BIN;
const src = process.env.SLUICE_SOURCE_DIR;
if (!bin || !src) {
    console.error("[server_aisdk] SLUICE_BIN and SLUICE_SOURCE_DIR must be set");
    process.exit(2);
}
const modelDir = path.join(src, "models", "tiny-next");
const KEY = "sk-aisdk-" + Math.random().toString(36).slice(2);
const EOS = [8187, 8189];
const noEos = Object.fromEntries(EOS.map((id) => [String(id), -100]));

const { check, test, finish } = suite("server_aisdk");

const server = await startServe(bin, [modelDir, "--api-key", KEY, "--ctx-size", "1024", "--parallel", "2", "--keep-alive-ms", "150"]);
const watchdog = setTimeout(() => {
    console.log("FAIL watchdog: the suite took longer than 180 s");
    server.kill();
    process.exit(1);
}, 180000);

// Every request body the client sends, by path (the fetch wrapper it is given).
const { fetch: recordingFetch, lastBody } = fetchRecorder();
const hasMarkup = (text) => /<\/?tool_call>|<function=|<parameter=/.test(text ?? "");

try {
    await server.ready();
    const base = `http://127.0.0.1:${server.port}/v1`;
    const client = new OpenAI({ baseURL: base, apiKey: KEY, maxRetries: 0, timeout: 30000 });
    const compatible = createOpenAICompatible({ name: "sluice", baseURL: base, apiKey: KEY, includeUsage: true,
        supportsStructuredOutputs: true, fetch: recordingFetch });
    const model = compatible.chatModel("tiny-next");
    const openai = createOpenAI({ baseURL: base, apiKey: KEY, fetch: recordingFetch });
    // logit_bias through the provider's options (sent as a body field): no end of sequence, so a
    // greedy reply uses all its tokens.
    const sluiceOptions = { sluice: { logit_bias: noEos } };
    const haiku = "Write a haiku about rivers.";

    let plain = null;
    await test("generateText", async () => {
        const r = await generateText({ model, prompt: haiku, maxOutputTokens: 12, temperature: 0, providerOptions: sluiceOptions });
        plain = r;
        const body = lastBody("/v1/chat/completions");
        const c = await client.chat.completions.create(body);
        check("generateText: the text equals the openai client's for the body sent", r.text === c.choices[0].message.content && r.text.length > 0,
            `${JSON.stringify(r.text)} vs ${JSON.stringify(c.choices[0].message.content)}`);
        check("generateText: the request carried the settings", body.max_tokens === 12 && body.temperature === 0 &&
            body.logit_bias?.["8187"] === -100 && body.messages.at(-1).role === "user", JSON.stringify(body));
        check("generateText: finish reason length", r.finishReason === "length", r.finishReason);
        check("generateText: usage", r.usage.inputTokens === c.usage.prompt_tokens && r.usage.outputTokens === 12 &&
            r.usage.totalTokens === r.usage.inputTokens + 12, JSON.stringify(r.usage));
        check("generateText: response metadata", r.response.id.startsWith("chatcmpl-") && r.response.modelId === "tiny-next",
            JSON.stringify(r.response.id));
    });

    await test("streamText", async () => {
        const s = streamText({ model, prompt: haiku, maxOutputTokens: 12, temperature: 0, providerOptions: sluiceOptions });
        let text = "";
        let deltas = 0;
        for await (const d of s.textStream) {
            text += d;
            ++deltas;
        }
        const usage = await s.usage;
        check("streamText: the same text as generateText, in pieces", text === plain.text && deltas > 1, `${JSON.stringify(text)} (${deltas})`);
        check("streamText: finish reason and usage (stream_options.include_usage)", (await s.finishReason) === "length" &&
            usage.outputTokens === 12 && usage.inputTokens === plain.usage.inputTokens, JSON.stringify(usage));
        check("streamText: the request streamed with usage", lastBody("/v1/chat/completions")?.stream === true &&
            lastBody("/v1/chat/completions")?.stream_options?.include_usage === true, JSON.stringify(lastBody("/v1/chat/completions")));
    });

    const weatherInput = z.object({ city: z.string().max(20), unit: z.enum(["C", "F"]) });
    const ran = [];
    const weather = tool({ description: "Weather of a city", inputSchema: weatherInput,
        execute: async (input) => {
            ran.push(input);
            return { temperature: 21, unit: input.unit };
        } });
    const add = tool({ description: "Add two integers", inputSchema: z.object({ a: z.number().int().min(0).max(99), b: z.number().int().min(0).max(99) }),
        execute: async ({ a, b }) => a + b });

    await test("tools: forced, run by the SDK's loop", async () => {
        ran.length = 0;
        // Step 1 must call a tool (toolChoice required); step 2 may not (prepareStep), so it answers in text
        // with the tool result in its prompt.
        const r = await generateText({ model, prompt: "What is the weather in Paris?", tools: { weather, add }, toolChoice: "required",
            maxOutputTokens: 60, temperature: 0, stopWhen: stepCountIs(2),
            prepareStep: ({ stepNumber }) => (stepNumber === 1 ? { toolChoice: "none", maxOutputTokens: 8 } : undefined) });
        const [first, second] = r.steps;
        const call = first?.toolCalls[0];
        check("required: step 1 ends with tool calls, each parsed", first?.finishReason === "tool-calls" && first.toolCalls.length >= 1 &&
            first.toolCalls.every((c) => ["weather", "add"].includes(c.toolName) && !c.invalid), JSON.stringify(first?.toolCalls));
        check("required: the SDK ran the tool with the parsed input", first.toolCalls.filter((c) => c.toolName === "weather").length === ran.length &&
            ran.every((i) => weatherInput.safeParse(i).success) && first.toolResults.length === first.toolCalls.length,
            JSON.stringify({ ran, results: first?.toolResults }));
        check("required: no markup in the text", first.text === "" && !hasMarkup(r.text), JSON.stringify(first.text));
        const body = lastBody("/v1/chat/completions");
        check("step 2: the tool result went back as a tool message after the assistant's tool_calls",
            body.messages.some((m) => m.role === "assistant" && m.tool_calls?.[0]?.id === call?.toolCallId) &&
            body.messages.some((m) => m.role === "tool" && m.tool_call_id === call?.toolCallId) && body.tool_choice === "none",
            JSON.stringify(body.messages));
        check("step 2: a text answer", second?.finishReason !== "tool-calls" && second.toolCalls.length === 0 && !hasMarkup(second.text) &&
            r.steps.length === 2, JSON.stringify(second && { finish: second.finishReason, text: second.text }));

        // The first step's body replayed through the openai client: the same calls.
        const stepOne = lastBody("/v1/chat/completions", 2);
        const c = await client.chat.completions.create(stepOne);
        const calls = c.choices[0].message.tool_calls ?? [];
        check("required: the calls equal the openai client's for the same body", calls.length === first.toolCalls.length &&
            calls.every((k, i) => k.function.name === first.toolCalls[i].toolName &&
                JSON.stringify(JSON.parse(k.function.arguments)) === JSON.stringify(first.toolCalls[i].input)),
            `${JSON.stringify(calls)} vs ${JSON.stringify(first.toolCalls)}`);
    });

    await test("tools: a named tool, streamed", async () => {
        ran.length = 0;
        const s = streamText({ model, prompt: "Add 2 and 3.", tools: { weather, add }, toolChoice: { type: "tool", toolName: "add" },
            maxOutputTokens: 40, temperature: 0, stopWhen: stepCountIs(1) });
        const parts = [];
        for await (const p of s.fullStream) parts.push(p);
        const types = parts.map((p) => p.type);
        const calls = parts.filter((p) => p.type === "tool-call");
        const results = parts.filter((p) => p.type === "tool-result");
        check("named: only that tool is called, parsed", calls.length >= 1 && calls.every((c) => c.toolName === "add" && Number.isInteger(c.input.a) &&
            Number.isInteger(c.input.b)), JSON.stringify(calls));
        check("named: the loop ran it", results.length === calls.length && results.every((p, i) => p.output === calls[i].input.a + calls[i].input.b),
            JSON.stringify(results));
        check("named: no text, no markup", parts.filter((p) => p.type === "text-delta").every((p) => !hasMarkup(p.text)) &&
            (await s.text) === "" && (await s.finishReason) === "tool-calls", `${types.join(",")} ${JSON.stringify(await s.text)}`);
        check("named: the request named the function", JSON.stringify(lastBody("/v1/chat/completions").tool_choice) ===
            JSON.stringify({ type: "function", function: { name: "add" } }), JSON.stringify(lastBody("/v1/chat/completions").tool_choice));
    });

    // Structured output: response_format json_schema from zod. Bounded strings keep the tiny model's
    // value short; an unbounded one may run to the token limit.
    const cat = z.object({ name: z.string().max(10), age: z.number().int().min(0).max(30), mood: z.enum(["calm", "wild"]),
        email: z.email().max(24), tags: z.array(z.string().max(6)).max(2) });
    await test("structured output", async () => {
        const o = await generateObject({ model, prompt: "Describe a cat.", schema: cat, maxOutputTokens: 120, temperature: 0 });
        const body = lastBody("/v1/chat/completions");
        check("generateObject: response_format json_schema from zod", body.response_format?.type === "json_schema" &&
            body.response_format.json_schema.schema?.properties?.email?.format === "email", JSON.stringify(body.response_format));
        check("generateObject: the object is valid against the schema", cat.safeParse(o.object).success && o.finishReason === "stop",
            JSON.stringify([o.object, o.finishReason]));
        const c = await client.chat.completions.create(body);
        check("generateObject: equal to the openai client's reply", JSON.stringify(JSON.parse(c.choices[0].message.content)) === JSON.stringify(o.object),
            c.choices[0].message.content);

        const t = await generateText({ model, prompt: "Describe a cat.", output: Output.object({ schema: cat }), maxOutputTokens: 120, temperature: 0 });
        check("generateText with Output.object: the same object", JSON.stringify(t.output) === JSON.stringify(o.object), JSON.stringify(t.output));

        const so = streamObject({ model, prompt: "Describe a cat.", schema: cat, maxOutputTokens: 120, temperature: 0 });
        const partials = [];
        for await (const p of so.partialObjectStream) partials.push(p);
        check("streamObject: partial objects, then the same object", partials.length > 3 && JSON.stringify(await so.object) === JSON.stringify(o.object) &&
            typeof partials[0] === "object", `${partials.length} ${JSON.stringify(await so.object)}`);
    });

    await test("the Responses API (@ai-sdk/openai)", async () => {
        const r = await generateText({ model: openai("tiny-next"), prompt: haiku, maxOutputTokens: 12, temperature: 0, providerOptions: { openai: { } } });
        const body = lastBody("/v1/responses");
        check("responses: the SDK spoke /v1/responses", body?.max_output_tokens === 12 && Array.isArray(body.input), JSON.stringify(body));
        // Without the logit bias the greedy reply may end early; compare with the chat endpoint's.
        const c = await client.chat.completions.create({ model: "tiny-next", messages: [{ role: "user", content: haiku }], max_tokens: 12, temperature: 0 });
        check("responses: the chat endpoint's greedy text", r.text === c.choices[0].message.content,
            `${JSON.stringify(r.text)} vs ${JSON.stringify(c.choices[0].message.content)}`);
        check("responses: usage and finish", r.usage.inputTokens === c.usage.prompt_tokens && r.usage.outputTokens === c.usage.completion_tokens &&
            r.finishReason === (c.choices[0].finish_reason === "length" ? "length" : "stop"), JSON.stringify([r.usage, r.finishReason]));

        ran.length = 0;
        const t = await generateText({ model: openai("tiny-next"), prompt: "Weather in Paris?", tools: { weather }, toolChoice: "required",
            maxOutputTokens: 60, temperature: 0, stopWhen: stepCountIs(1) });
        check("responses: a forced call run by the loop", t.toolCalls.length >= 1 && t.toolCalls.every((k) => k.toolName === "weather" && !k.invalid) &&
            ran.length === t.toolCalls.length && ran.every((i) => weatherInput.safeParse(i).success) && !hasMarkup(t.text),
            JSON.stringify([t.toolCalls, t.text]));

        const o = await generateObject({ model: openai("tiny-next"), prompt: "Describe a cat.", schema: cat, maxOutputTokens: 120, temperature: 0 });
        check("responses: generateObject valid against the schema", cat.safeParse(o.object).success && lastBody("/v1/responses").text?.format?.type === "json_schema",
            JSON.stringify(o.object));

        const chat = await generateText({ model: openai.chat("tiny-next"), prompt: haiku, maxOutputTokens: 12, temperature: 0 });
        check("openai.chat(): the same text", chat.text === c.choices[0].message.content, JSON.stringify(chat.text));
    });
} catch (e) {
    check("suite", false, String(e && e.stack));
} finally {
    clearTimeout(watchdog);
    server.kill();
}
finish();
