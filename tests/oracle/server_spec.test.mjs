// server_spec.test.mjs — speculative decoding in `sluice serve` (issue 17): `--draft MODEL` pairs
// every pooled session with a draft-model session, and a request's "speculative" field (true,
// false, or {"tokens": 1..16 | "auto"}) overrides the server's --spec-tokens. The default model
// drafts for itself here (the same tokenizer, so every proposal can be kept), which makes the
// checks exact rather than statistical:
//   - greedy output with speculation is the same text as without, for k = 1, 4, 8 and auto, on
//     completions, streamed chat and a JSON-schema-constrained chat (the grammar masks drafter and
//     target alike), and with two sessions generating at once;
//   - usage reports the proposals in OpenAI's predicted-output fields
//     (completion_tokens_details.accepted/rejected_prediction_tokens), absent without speculation;
//   - /metrics and /health count exactly what the responses reported;
//   - a bad "speculative" value is a 400 naming the field; asking a server without --draft is a
//     400 unsupported_value, and false there is a normal request;
//   - `--spec mtp`: the model's own trained head drafts, greedy text is the same with and without,
//     also for two streams at once; a model without a head is refused at start by name.
// Prints "[server_spec] N passed, M failed"; exits 1 on failure.
import path from "node:path";
import { errorCode, request, sseEvents, startServe, suite } from "./serve_util.mjs";

const bin = process.env.SLUICE_BIN;
const src = process.env.SLUICE_SOURCE_DIR;
if (!bin || !src) {
    console.error("[server_spec] SLUICE_BIN and SLUICE_SOURCE_DIR must be set");
    process.exit(2);
}
const modelDir = path.join(src, "models", "tiny-next");
const { check, test, finish } = suite("server_spec");
const servers = [];
const watchdog = setTimeout(() => {
    console.log("FAIL watchdog: the suite took longer than 240 s");
    for (const s of servers) s.kill();
    process.exit(1);
}, 240000);

const post = (port, p, body) => request(port, "POST", p, { body: JSON.stringify(body) });
const details = (usage) => usage?.completion_tokens_details;
let accepted = 0;
let drafted = 0;
function count(usage) {
    const d = details(usage);
    if (d) {
        accepted += d.accepted_prediction_tokens;
        drafted += d.accepted_prediction_tokens + d.rejected_prediction_tokens;
    }
}

try {
    const server = await startServe(bin, [modelDir, "--draft", modelDir, "--parallel", "2", "--ctx-size", "1024", "--spec-tokens", "4"]);
    servers.push(server);
    await server.ready();
    const port = server.port;

    await test("greedy completions are exact", async () => {
        for (const prompt of ["Once upon a time", "def main(", "The"]) {
            const base = { prompt, max_tokens: 48, temperature: 0 };
            const plain = await post(port, "/v1/completions", { ...base, speculative: false });
            const want = JSON.parse(plain.body);
            check(`"${prompt}" speculative:false: 200 without prediction details`, plain.status === 200 && details(want.usage) === undefined, plain.body.slice(0, 200));
            for (const spec of [{ tokens: 1 }, { tokens: 4 }, { tokens: 8 }, { tokens: "auto" }, true, undefined]) {
                const r = await post(port, "/v1/completions", spec === undefined ? base : { ...base, speculative: spec });
                const got = JSON.parse(r.body);
                count(got.usage);
                const name = `"${prompt}" speculative:${JSON.stringify(spec) ?? "(server default)"}`;
                check(`${name}: the same text`, r.status === 200 && got.choices[0].text === want.choices[0].text,
                    `${JSON.stringify(got.choices?.[0]?.text)} vs ${JSON.stringify(want.choices[0].text)}`);
                if (spec !== undefined && spec.tokens !== "auto") {
                    const d = details(got.usage);
                    check(`${name}: proposals reported and kept (the model drafts for itself)`,
                        d !== undefined && d.accepted_prediction_tokens > 0 && d.rejected_prediction_tokens === 0 && d.accepted_prediction_tokens < 48,
                        JSON.stringify(got.usage));
                }
            }
        }
    });

    await test("streamed chat", async () => {
        const base = { messages: [{ role: "user", content: "Tell me a story." }], max_tokens: 40, temperature: 0, stream: true, stream_options: { include_usage: true } };
        const text = (body) => sseEvents(body).map((e) => e.choices?.[0]?.delta?.content ?? e.choices?.[0]?.delta?.reasoning_content ?? "").join("");
        const plain = await post(port, "/v1/chat/completions", { ...base, speculative: false });
        const spec = await post(port, "/v1/chat/completions", { ...base, speculative: { tokens: 6 } });
        const usage = sseEvents(spec.body).find((e) => e.usage)?.usage;
        count(usage);
        check("stream: the same text with speculation", plain.status === 200 && spec.status === 200 && text(spec.body) === text(plain.body) && text(plain.body).length > 0,
            `${JSON.stringify(text(spec.body))} vs ${JSON.stringify(text(plain.body))}`);
        check("stream: the usage chunk carries the prediction details", details(usage)?.accepted_prediction_tokens > 0, JSON.stringify(usage));
    });

    await test("a grammar masks drafter and target alike", async () => {
        const schema = { type: "object", properties: { name: { type: "string" }, age: { type: "integer" } }, required: ["name", "age"] };
        const base = { messages: [{ role: "user", content: "A person as JSON." }], max_tokens: 60, temperature: 0,
            response_format: { type: "json_schema", json_schema: { name: "p", schema } }, chat_template_kwargs: { enable_thinking: false } };
        const plain = JSON.parse((await post(port, "/v1/chat/completions", { ...base, speculative: false })).body);
        const spec = JSON.parse((await post(port, "/v1/chat/completions", { ...base, speculative: { tokens: 4 } })).body);
        count(spec.usage);
        const a = plain.choices?.[0]?.message?.content;
        const b = spec.choices?.[0]?.message?.content;
        let valid = false;
        try {
            const v = JSON.parse(b);
            valid = typeof v.name === "string" && Number.isInteger(v.age);
        } catch {}
        check("json_schema: the same reply, valid against the schema", a === b && valid, `${JSON.stringify(b)} vs ${JSON.stringify(a)}`);
        check("json_schema: proposals were verified", details(spec.usage)?.accepted_prediction_tokens > 0, JSON.stringify(spec.usage));
    });

    await test("two sessions speculating at once", async () => {
        const prompts = ["Once upon a time", "def main(", "In the beginning", "import numpy"];
        const body = (prompt, speculative) => ({ prompt, max_tokens: 32, temperature: 0, speculative });
        const want = [];
        for (const p of prompts) want.push(JSON.parse((await post(port, "/v1/completions", body(p, false))).body).choices[0].text);
        const got = await Promise.all(prompts.map((p) => post(port, "/v1/completions", body(p, { tokens: 4 }))));
        const parsed = got.map((r) => JSON.parse(r.body));
        parsed.forEach((g) => count(g.usage));
        check("concurrent: every reply is its sequential greedy text", parsed.every((g, i) => g.choices?.[0]?.text === want[i]),
            parsed.map((g, i) => `${JSON.stringify(g.choices?.[0]?.text)} vs ${JSON.stringify(want[i])}`).join(" | "));
    });

    await test("bad values", async () => {
        const cases = [
            [{ tokens: 0 }, "speculative.tokens", "invalid_value"],
            [{ tokens: 17 }, "speculative.tokens", "invalid_value"],
            [{ tokens: 2.5 }, "speculative.tokens", "invalid_type"],
            [{ tokens: "many" }, "speculative.tokens", "invalid_type"],
            [{ draft: "x" }, "speculative.draft", "unknown_parameter"],
            ["yes", "speculative", "invalid_type"],
            [3, "speculative", "invalid_type"],
        ];
        for (const [spec, param, code] of cases) {
            const r = await post(port, "/v1/completions", { prompt: "a", max_tokens: 2, speculative: spec });
            let p = null;
            try {
                p = JSON.parse(r.body).error.param;
            } catch {}
            check(`speculative ${JSON.stringify(spec)}: 400 ${code} naming ${param}`, r.status === 400 && errorCode(r.body) === code && p === param, `${r.status} ${r.body.slice(0, 200)}`);
        }
    });

    await test("metrics count what the responses reported", async () => {
        const m = (await request(port, "GET", "/metrics")).body;
        const value = (name) => Number((m.match(new RegExp(`^${name} (\\S+)$`, "m")) ?? [])[1]);
        check("sluice_speculative_draft_tokens_total", value("sluice_speculative_draft_tokens_total") === drafted, `${value("sluice_speculative_draft_tokens_total")} vs ${drafted}`);
        check("sluice_speculative_accepted_tokens_total", value("sluice_speculative_accepted_tokens_total") === accepted, `${value("sluice_speculative_accepted_tokens_total")} vs ${accepted}`);
        const health = JSON.parse((await request(port, "GET", "/health")).body);
        const s = Object.values(health).find((v) => v && typeof v === "object" && v.speculative)?.speculative;
        check("/health: speculative totals and acceptance rate", s?.draft_tokens_total === drafted && s?.accepted_tokens_total === accepted && s?.acceptance_rate === 1,
            JSON.stringify(s));
    });
    server.kill();

    await test("a server without a draft model", async () => {
        const plain = await startServe(bin, [modelDir, "--ctx-size", "512"]);
        servers.push(plain);
        await plain.ready();
        const asked = await post(plain.port, "/v1/completions", { prompt: "a", max_tokens: 4, speculative: true });
        check("speculative:true: 400 unsupported_value", asked.status === 400 && errorCode(asked.body) === "unsupported_value" && asked.body.includes("--draft"),
            `${asked.status} ${asked.body.slice(0, 200)}`);
        const off = await post(plain.port, "/v1/completions", { prompt: "a", max_tokens: 4, speculative: false });
        check("speculative:false: a normal reply", off.status === 200 && details(JSON.parse(off.body).usage) === undefined, `${off.status} ${off.body.slice(0, 200)}`);
        const m = (await request(plain.port, "GET", "/metrics")).body;
        check("  its counters stay at 0", /^sluice_speculative_draft_tokens_total 0$/m.test(m));
        plain.kill();
    });

    await test("the model's own MTP head (--spec mtp)", async () => {
        const mtp = await startServe(bin, [modelDir, "--spec", "mtp", "--spec-tokens", "3", "--parallel", "2", "--ctx-size", "1024"]);
        servers.push(mtp);
        await mtp.ready();
        let kept = 0;
        for (const prompt of ["def quicksort(xs):", "import os\n"]) {
            const base = { prompt, max_tokens: 64, temperature: 0 };
            const plain = JSON.parse((await post(mtp.port, "/v1/completions", { ...base, speculative: false })).body);
            for (const spec of [true, { tokens: 1 }, { tokens: "auto" }]) {
                const r = await post(mtp.port, "/v1/completions", { ...base, speculative: spec });
                const got = JSON.parse(r.body);
                check(`"${prompt.trim()}" ${JSON.stringify(spec)}: the same text as without`, r.status === 200 && got.choices[0].text === plain.choices[0].text,
                    `${r.status} ${r.body.slice(0, 200)}`);
                kept += details(got.usage)?.accepted_prediction_tokens ?? 0;
            }
        }
        check("the head's proposals are kept", kept > 20, `kept ${kept}`);
        // Two streams at once, each drafting with its own session's head.
        const pair = await Promise.all(["def f(x):", "class A:"].map((prompt) =>
            post(mtp.port, "/v1/completions", { prompt, max_tokens: 32, temperature: 0, speculative: { tokens: 2 } })));
        for (const [i, prompt] of ["def f(x):", "class A:"].entries()) {
            const alone = JSON.parse((await post(mtp.port, "/v1/completions", { prompt, max_tokens: 32, temperature: 0, speculative: false })).body);
            check(`concurrent "${prompt}": the same text as alone`, JSON.parse(pair[i].body).choices[0].text === alone.choices[0].text);
        }
        mtp.kill();
    });
    await test("--spec mtp on a model without a head", async () => {
        const golden = path.join(src, "tests", "data", "goldens", "qwen3_next_hf_bf16");
        const r = await new Promise((resolve) => {
            import("node:child_process").then(({ spawn }) => {
                const p = spawn(bin, ["serve", golden, "--spec", "mtp", "--port", String(40000 + Math.floor(Math.random() * 20000))], { stdio: ["ignore", "pipe", "pipe"] });
                let err = "";
                p.stderr.on("data", (d) => { err += d; });
                p.on("exit", (code) => resolve({ code, err }));
                setTimeout(() => p.kill(), 20000);
            });
        });
        check("refused at start, naming the missing head", r.code !== 0 && r.err.includes("multi-token-prediction head"), `${r.code} ${r.err.slice(0, 300)}`);
    });
} catch (e) {
    check("suite", false, `threw ${e && e.stack ? e.stack : e}`);
} finally {
    clearTimeout(watchdog);
    for (const s of servers) s.kill();
}
finish();
