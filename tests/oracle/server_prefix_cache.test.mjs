// server_prefix_cache.test.mjs — the engine's prefix cache in `sluice serve` (issue 21): a new
// conversation that starts with the system prompt of another, served by another pooled session,
// restores that prefix instead of computing it.
//   - `--parallel 2`: conversation A (a long system prompt + a question) streams a long reply, so
//     it holds its session; conversation B (the same system prompt, another question) is served by
//     the other session meanwhile and reports usage.prompt_tokens_details.cached_tokens > 0 — the
//     prefix A's prefill stored —, with a time to first token well below A's;
//   - B's reply is the same text as on a server without the cache (`--prefix-cache 0`);
//   - /metrics (sluice_prefix_cache_*) and /health (prefix_cache) count the hit and the tokens;
//   - a third conversation, after both, resumes where B's prompt left A's (B stored a state there).
// Prints "[server_prefix_cache] N passed, M failed"; exits 1 on failure.
import fs from "node:fs";
import http from "node:http";
import path from "node:path";
import { request, startServe, suite } from "./serve_util.mjs";

const bin = process.env.SLUICE_BIN;
const src = process.env.SLUICE_SOURCE_DIR;
if (!bin || !src) {
    console.error("[server_prefix_cache] SLUICE_BIN and SLUICE_SOURCE_DIR must be set");
    process.exit(2);
}
const modelDir = path.join(src, "models", "tiny-next");
const { check, test, finish } = suite("server_prefix_cache");
const servers = [];
const watchdog = setTimeout(() => {
    console.log("FAIL watchdog: the suite took longer than 240 s");
    for (const s of servers) s.kill();
    process.exit(1);
}, 240000);

const EOS = [8187, 8189];
const noEos = Object.fromEntries(EOS.map((id) => [String(id), -100]));
// A system prompt of about 1,500 tokens: held-out text the model was not trained on.
const system = "Answer using the following notes.\n\n" + fs.readFileSync(path.join(modelDir, "heldout.txt"), "utf8").slice(0, 6000);
const chat = (question, extra = {}) => ({
    messages: [{ role: "system", content: system }, { role: "user", content: question }],
    temperature: 0,
    logit_bias: noEos,
    chat_template_kwargs: { enable_thinking: false },
    ...extra,
});

// A streamed chat completion: resolves {ttftMs, text, usage} once it ends; `onFirst` runs when the
// first generated text arrives (the prompt has been prefilled by then).
function stream(port, body, onFirst = () => {}) {
    return new Promise((resolve, reject) => {
        const payload = JSON.stringify({ ...body, stream: true, stream_options: { include_usage: true } });
        const t0 = performance.now();
        let ttftMs = null, text = "", usage = null, buffer = "";
        const req = http.request({ host: "127.0.0.1", port, method: "POST", path: "/v1/chat/completions", agent: false,
            headers: { "Content-Type": "application/json", "Content-Length": Buffer.byteLength(payload) } }, (res) => {
            res.setEncoding("utf8");
            res.on("data", (chunk) => {
                buffer += chunk;
                let at;
                while ((at = buffer.indexOf("\n\n")) >= 0) {
                    const event = buffer.slice(0, at);
                    buffer = buffer.slice(at + 2);
                    if (!event.startsWith("data: ") || event === "data: [DONE]") continue;
                    const e = JSON.parse(event.slice(6));
                    if (e.usage) usage = e.usage;
                    const d = e.choices?.[0]?.delta ?? {};
                    const piece = (d.content ?? "") + (d.reasoning_content ?? "");
                    if (piece.length > 0 && ttftMs === null) {
                        ttftMs = performance.now() - t0;
                        onFirst();
                    }
                    text += piece;
                }
            });
            res.on("end", () => resolve({ status: res.statusCode, ttftMs, text, usage }));
        });
        req.setTimeout(120000, () => req.destroy(new Error("no reply within 120 s")));
        req.on("error", reject);
        req.write(payload);
        req.end();
    });
}

try {
    const server = await startServe(bin, [modelDir, "--parallel", "2", "--ctx-size", "4096", "--memory", "2G"]);
    servers.push(server);
    const plain = await startServe(bin, [modelDir, "--parallel", "2", "--ctx-size", "4096", "--memory", "2G", "--prefix-cache", "0"]);
    servers.push(plain);
    await server.ready();
    await plain.ready();
    const port = server.port;
    const questionB = { max_tokens: 12 };

    await test("a conversation sharing another's system prompt, in another session", async () => {
        // A holds its session while it generates; B starts once A's prompt is in (its first token).
        let startB;
        const bStarted = new Promise((r) => (startB = r));
        const a = stream(port, chat("What do the notes say first?", { max_tokens: 160 }), () => startB());
        await bStarted;
        const b = await stream(port, chat("Summarise the notes in one line.", questionB));
        const first = await a;
        check("A and B are served", first.status === 200 && b.status === 200, `${first.status} ${b.status}`);
        const cachedA = first.usage?.prompt_tokens_details?.cached_tokens;
        const cachedB = b.usage?.prompt_tokens_details?.cached_tokens;
        check("A computes its whole prompt (an empty cache)", cachedA === 0 && first.usage.prompt_tokens > 1000, JSON.stringify(first.usage));
        check("B reports the restored system prompt as cached tokens", cachedB >= 1024 && cachedB < b.usage.prompt_tokens,
            JSON.stringify(b.usage));
        check("B's time to first token is well below A's", b.ttftMs !== null && b.ttftMs < 0.5 * first.ttftMs,
            `A ${first.ttftMs?.toFixed(0)} ms, B ${b.ttftMs?.toFixed(0)} ms`);
        console.log(`  TTFT: A ${first.ttftMs.toFixed(0)} ms (${first.usage.prompt_tokens} tokens computed), B ${b.ttftMs.toFixed(0)} ms (${cachedB} of ${b.usage.prompt_tokens} restored)`);

        const cold = await stream(plain.port, chat("Summarise the notes in one line.", questionB));
        check("B's reply is the reply of a server without the prefix cache", cold.text === b.text && cold.text.length > 0,
            `${JSON.stringify(b.text)} vs ${JSON.stringify(cold.text)}`);
        check("the server without the cache computes the whole prompt", cold.usage?.prompt_tokens_details?.cached_tokens === 0,
            JSON.stringify(cold.usage));
    });

    await test("metrics and health", async () => {
        const m = (await request(port, "GET", "/metrics")).body;
        const value = (name) => Number((m.match(new RegExp(`^${name} (\\S+)$`, "m")) ?? [])[1]);
        check("metrics: a hit and the tokens it restored", value("sluice_prefix_cache_hits_total") >= 1 &&
            value("sluice_prefix_cache_hit_tokens_total") >= 1024 && value("sluice_prefix_cache_bytes") > 0 &&
            value("sluice_prefix_cache_lookups_total") >= 2 && value("sluice_prefix_cache_budget_bytes") > 0,
            m.split("\n").filter((l) => l.startsWith("sluice_prefix_cache")).join(" | "));
        const h = JSON.parse((await request(port, "GET", "/health")).body);
        const p = h.prefix_cache;
        check("health: the prefix cache's counters", p?.enabled === true && p.hits >= 1 && p.hit_tokens >= 1024 && p.bytes > 0 &&
            p.bytes <= p.budget_bytes && p.block_tokens === 64 && h.memory_plan?.prefix_cache_bytes === p.budget_bytes, JSON.stringify(p));
        const off = JSON.parse((await request(plain.port, "GET", "/health")).body).prefix_cache;
        check("health: --prefix-cache 0 turns it off", off?.enabled === false && off.lookups === 0, JSON.stringify(off));
    });

    await test("a third conversation resumes where the second left the first", async () => {
        // Both sessions are free now and share the system prompt with it: the one taken cuts its own
        // state back to a turn checkpoint (none inside the system prompt) and restores the prefix from
        // the cache — as far as B's prefill stored a state, where B's prompt left A's.
        const c = await stream(port, chat("Which word do the notes use most?", questionB));
        const cold = await stream(plain.port, chat("Which word do the notes use most?", questionB));
        const cached = c.usage?.prompt_tokens_details?.cached_tokens;
        check("third: cached at least as much as the second, within a block of the shared prefix", cached >= 1024 &&
            c.usage.prompt_tokens - cached <= 64 + 40, JSON.stringify(c.usage));
        check("third: the reply of a server without the cache", c.text === cold.text && c.text.length > 0,
            `${JSON.stringify(c.text)} vs ${JSON.stringify(cold.text)}`);
    });
} catch (e) {
    check("suite", false, `threw ${e && e.stack ? e.stack : e}`);
} finally {
    clearTimeout(watchdog);
    for (const s of servers) s.kill();
}
finish();
