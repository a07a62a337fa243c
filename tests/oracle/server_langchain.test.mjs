// server_langchain.test.mjs — `sluice serve` driven by LangChain JS (@langchain/openai's ChatOpenAI
// and its legacy OpenAI LLM, @langchain/core's tools and messages).
//
// Starts `sluice serve models/tiny-next` and checks: invoke (content, usage_metadata, finish_reason;
// greedy content equal to the openai client's for the very body LangChain sent, recorded by a fetch
// wrapper) and stream (chunks concatenated to the same message, usage on the last chunk); bindTools
// with a forced tool_choice (a named tool, "any") → tool_calls with args valid against the zod schema,
// the tool invoked on them, a ToolMessage sent back and answered with text, the streamed
// tool_call_chunks assembled into the same call; withStructuredOutput(zod) by json_schema and by
// function calling, parsed and valid; the legacy OpenAI LLM on /v1/completions; useResponsesApi. The
// tiny model's words are arbitrary: the checks are on structure, on what the grammar guarantees, and
// on equality with the openai client's greedy result. Prints "N passed, M failed"; exits 1 on failure.
import path from "node:path";
import { AIMessage, HumanMessage, ToolMessage } from "@langchain/core/messages";
import { tool } from "@langchain/core/tools";
import { ChatOpenAI, OpenAI as OpenAILLM } from "@langchain/openai";
import OpenAI from "openai";
import { z } from "zod";
import { fetchRecorder, startServe, suite } from "./serve_util.mjs";

const bin = process.env.SLUICE_BIN;
const src = process.env.SLUICE_SOURCE_DIR;
if (!bin || !src) {
    console.error("[server_langchain] SLUICE_BIN and SLUICE_SOURCE_DIR must be set");
    process.exit(2);
}
const modelDir = path.join(src, "models", "tiny-next");
const KEY = "sk-langchain-" + Math.random().toString(36).slice(2);
const EOS = [8187, 8189];
const noEos = Object.fromEntries(EOS.map((id) => [String(id), -100]));

const { check, test, finish } = suite("server_langchain");

const server = await startServe(bin, [modelDir, "--api-key", KEY, "--ctx-size", "1024", "--parallel", "2", "--keep-alive-ms", "150"]);
const watchdog = setTimeout(() => {
    console.log("FAIL watchdog: the suite took longer than 180 s");
    server.kill();
    process.exit(1);
}, 180000);

// Every request body the client sends, by path (the fetch wrapper it is given).
const { fetch: recordingFetch, lastBody } = fetchRecorder();
const hasMarkup = (text) => /<\/?tool_call>|<function=|<parameter=/.test(typeof text === "string" ? text : JSON.stringify(text ?? ""));

try {
    await server.ready();
    const base = `http://127.0.0.1:${server.port}/v1`;
    const client = new OpenAI({ baseURL: base, apiKey: KEY, maxRetries: 0, timeout: 30000 });
    const chatModel = (fields = {}) => new ChatOpenAI({ model: "tiny-next", apiKey: KEY, temperature: 0, maxTokens: 12, maxRetries: 0,
        configuration: { baseURL: base, fetch: recordingFetch }, ...fields });
    const haiku = "Write a haiku about rivers.";
    const llm = chatModel({ modelKwargs: { logit_bias: noEos } });

    let invoked = null;
    await test("invoke", async () => {
        const m = await llm.invoke(haiku);
        invoked = m;
        const body = lastBody("/v1/chat/completions");
        const c = await client.chat.completions.create(body);
        check("invoke: the content equals the openai client's for the body sent", m.content === c.choices[0].message.content && m.content.length > 0,
            `${JSON.stringify(m.content)} vs ${JSON.stringify(c.choices[0].message.content)}`);
        check("invoke: the request carried the settings", body.max_tokens === 12 && body.temperature === 0 && body.logit_bias?.["8187"] === -100,
            JSON.stringify(body));
        check("invoke: usage_metadata", m.usage_metadata?.input_tokens === c.usage.prompt_tokens && m.usage_metadata.output_tokens === 12 &&
            m.usage_metadata.total_tokens === c.usage.prompt_tokens + 12, JSON.stringify(m.usage_metadata));
        check("invoke: finish_reason and model", m.response_metadata.finish_reason === "length" && m.response_metadata.model_name === "tiny-next",
            JSON.stringify(m.response_metadata));
    });

    await test("stream", async () => {
        let acc = null;
        let chunks = 0;
        for await (const ch of await llm.stream(haiku)) {
            acc = acc ? acc.concat(ch) : ch;
            ++chunks;
        }
        check("stream: the chunks make the invoked content", acc.content === invoked.content && chunks > 2, `${JSON.stringify(acc.content)} (${chunks})`);
        check("stream: usage and finish_reason", acc.usage_metadata?.output_tokens === 12 && acc.usage_metadata.input_tokens === invoked.usage_metadata.input_tokens &&
            acc.response_metadata.finish_reason === "length", JSON.stringify([acc.usage_metadata, acc.response_metadata]));
    });

    const weatherSchema = z.object({ city: z.string().max(20), unit: z.enum(["C", "F"]) });
    const called = [];
    const weather = tool(async (input) => {
        called.push(input);
        return JSON.stringify({ temperature: 21, unit: input.unit });
    }, { name: "get_weather", description: "Weather of a city", schema: weatherSchema });
    const add = tool(async ({ a, b }) => String(a + b), { name: "add", description: "Add two integers",
        schema: z.object({ a: z.number().int().min(0).max(99), b: z.number().int().min(0).max(99) }) });

    await test("bindTools", async () => {
        const bound = chatModel({ maxTokens: 60 }).bindTools([weather, add], { tool_choice: "get_weather" });
        const question = new HumanMessage("What is the weather in Paris?");
        const m = await bound.invoke([question]);
        const body = lastBody("/v1/chat/completions");
        check("named: the request named the function", JSON.stringify(body.tool_choice) === JSON.stringify({ type: "function", function: { name: "get_weather" } }) &&
            body.tools.length === 2, JSON.stringify(body.tool_choice));
        check("named: tool_calls parsed, args valid against the zod schema", m.tool_calls.length >= 1 && m.invalid_tool_calls.length === 0 &&
            m.tool_calls.every((c) => c.name === "get_weather" && weatherSchema.safeParse(c.args).success && typeof c.id === "string"),
            JSON.stringify([m.tool_calls, m.invalid_tool_calls]));
        check("named: no markup in the content, finish tool_calls", !hasMarkup(m.content) && m.content === "" &&
            m.response_metadata.finish_reason === "tool_calls", JSON.stringify([m.content, m.response_metadata.finish_reason]));
        const c = await client.chat.completions.create(body);
        const calls = c.choices[0].message.tool_calls ?? [];
        check("named: the calls equal the openai client's for the same body", calls.length === m.tool_calls.length &&
            calls.every((k, i) => k.function.name === m.tool_calls[i].name && JSON.stringify(JSON.parse(k.function.arguments)) === JSON.stringify(m.tool_calls[i].args)),
            JSON.stringify(calls));

        // The tool run on the call, its ToolMessage sent back: a text answer.
        called.length = 0;
        const results = [];
        for (const call of m.tool_calls) results.push(await weather.invoke(call));
        check("the tool ran on the parsed args, giving ToolMessages", called.length === m.tool_calls.length &&
            results.every((r, i) => r instanceof ToolMessage && r.tool_call_id === m.tool_calls[i].id), JSON.stringify(results));
        const answer = await chatModel({ maxTokens: 8 }).bindTools([weather, add]).invoke([question, m, ...results]);
        const turn = lastBody("/v1/chat/completions");
        check("round trip: assistant tool_calls and tool messages sent", turn.messages.some((x) => x.role === "assistant" && x.tool_calls?.length === m.tool_calls.length) &&
            turn.messages.filter((x) => x.role === "tool").length === results.length, JSON.stringify(turn.messages));
        check("round trip: answered", answer instanceof AIMessage && (answer.content.length > 0 || answer.tool_calls.length > 0) &&
            !hasMarkup(answer.content), JSON.stringify([answer.content, answer.tool_calls]));

        // tool_choice "any" (OpenAI's "required"), streamed: the chunks assemble into the same kind of call.
        const any = chatModel({ maxTokens: 60 }).bindTools([add], { tool_choice: "any" });
        const whole = await any.invoke("Add 2 and 3.");
        check("any: sent as required", lastBody("/v1/chat/completions").tool_choice === "required", JSON.stringify(lastBody("/v1/chat/completions").tool_choice));
        let acc = null;
        for await (const ch of await any.stream("Add 2 and 3.")) acc = acc ? acc.concat(ch) : ch;
        check("any: streamed tool_call_chunks give the invoked calls", acc.tool_calls.length === whole.tool_calls.length && whole.tool_calls.length >= 1 &&
            acc.tool_calls.every((c, i) => c.name === "add" && JSON.stringify(c.args) === JSON.stringify(whole.tool_calls[i].args) &&
                Number.isInteger(c.args.a) && Number.isInteger(c.args.b)) && !hasMarkup(acc.content),
            JSON.stringify([acc.tool_calls, whole.tool_calls]));
    });

    await test("withStructuredOutput", async () => {
        const cat = z.object({ name: z.string().max(10), age: z.number().int().min(0).max(30), mood: z.enum(["calm", "wild"]) });
        const big = chatModel({ maxTokens: 100 });
        const byJson = await big.withStructuredOutput(cat, { name: "cat", method: "jsonSchema", includeRaw: true }).invoke("Describe a cat.");
        const body = lastBody("/v1/chat/completions");
        check("jsonSchema: sent as response_format json_schema", body.response_format?.type === "json_schema" &&
            body.response_format.json_schema?.name === "cat", JSON.stringify(body.response_format));
        check("jsonSchema: parsed, valid against the schema", cat.safeParse(byJson.parsed).success && byJson.raw.response_metadata.finish_reason === "stop",
            JSON.stringify([byJson.parsed, byJson.raw.content]));
        const c = await client.chat.completions.create(body);
        check("jsonSchema: equal to the openai client's reply", JSON.stringify(JSON.parse(c.choices[0].message.content)) === JSON.stringify(byJson.parsed),
            c.choices[0].message.content);

        const byTool = await big.withStructuredOutput(cat, { name: "cat", method: "functionCalling", includeRaw: true }).invoke("Describe a cat.");
        const toolBody = lastBody("/v1/chat/completions");
        check("functionCalling: a forced call of the schema's function", JSON.stringify(toolBody.tool_choice) ===
            JSON.stringify({ type: "function", function: { name: "cat" } }), JSON.stringify(toolBody.tool_choice));
        check("functionCalling: parsed, valid against the schema", cat.safeParse(byTool.parsed).success && !hasMarkup(byTool.raw.content),
            JSON.stringify([byTool.parsed, byTool.raw.content]));
    });

    await test("legacy completions and the Responses API", async () => {
        const legacy = new OpenAILLM({ model: "tiny-next", apiKey: KEY, temperature: 0, maxTokens: 8, maxRetries: 0,
            configuration: { baseURL: base, fetch: recordingFetch } });
        const text = await legacy.invoke("The river flows");
        const c = await client.completions.create(lastBody("/v1/completions"));
        check("OpenAI LLM: /v1/completions text equals the openai client's", text === c.choices[0].text && text.length > 0,
            `${JSON.stringify(text)} vs ${JSON.stringify(c.choices[0].text)}`);

        const responses = chatModel({ useResponsesApi: true });
        const m = await responses.invoke(haiku);
        const chat = await client.chat.completions.create({ model: "tiny-next", messages: [{ role: "user", content: haiku }], max_tokens: 12, temperature: 0 });
        const text2 = Array.isArray(m.content) ? m.content.map((p) => p.text ?? "").join("") : m.content;
        check("useResponsesApi: /v1/responses, the chat endpoint's greedy text", lastBody("/v1/responses")?.max_output_tokens === 12 &&
            text2 === chat.choices[0].message.content && m.usage_metadata?.output_tokens === chat.usage.completion_tokens,
            `${JSON.stringify(text2)} vs ${JSON.stringify(chat.choices[0].message.content)}`);
    });
} catch (e) {
    check("suite", false, String(e && e.stack));
} finally {
    clearTimeout(watchdog);
    server.kill();
}
finish();
