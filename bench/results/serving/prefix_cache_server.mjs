// prefix_cache_server.mjs — time to first token of two chat conversations that share a long system
// prompt, through `sluice serve` (issue 21's target: the second ≤ 10% of the first).
//
//   node bench/results/serving/prefix_cache_server.mjs SLUICE_BIN MODEL_DIR [--parallel N] [--reps R]
//        [--system-chars C] [--prefix-cache SIZE] [--json FILE]
//
// Each rep takes another slice of the model's held-out text as the system prompt (so the first
// conversation of every rep computes it cold), then streams conversation A (that system prompt + a
// question) and conversation B (the same system prompt + another question) one after the other, and
// records each one's time to first token (request sent → first generated text) and the usage's
// cached_tokens. With --parallel 1, B is served by the session that just served A: its own state can be
// cut back only to a turn checkpoint (none inside the system prompt), so what B reuses comes from the
// engine's prefix cache.
import fs from "node:fs";
import http from "node:http";
import path from "node:path";
import { startServe } from "../../../tests/oracle/serve_util.mjs";

const [bin, modelDir, ...rest] = process.argv.slice(2);
const opt = (name, fallback) => {
    const i = rest.indexOf(name);
    return i >= 0 ? rest[i + 1] : fallback;
};
const parallel = opt("--parallel", "1");
const reps = Number(opt("--reps", "5"));
const systemChars = Number(opt("--system-chars", "8000"));
const jsonPath = opt("--json", "");
const serveArgs = [modelDir, "--parallel", parallel, "--ctx-size", "4096"];
if (opt("--prefix-cache", null) !== null) serveArgs.push("--prefix-cache", opt("--prefix-cache"));

const heldout = fs.readFileSync(path.join(modelDir, "heldout.txt"), "utf8");
const noEos = { 8187: -100, 8189: -100 };

function stream(port, body) {
    return new Promise((resolve, reject) => {
        const payload = JSON.stringify({ ...body, stream: true, stream_options: { include_usage: true } });
        const t0 = performance.now();
        let ttft = null, usage = null, buffer = "";
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
                    if (ttft === null && ((d.content ?? "") + (d.reasoning_content ?? "")).length > 0) ttft = performance.now() - t0;
                }
            });
            res.on("end", () => resolve({ ttft, usage }));
        });
        req.on("error", reject);
        req.write(payload);
        req.end();
    });
}

const server = await startServe(bin, serveArgs);
process.on("exit", () => server.kill());
await server.ready();
const rows = [];
for (let r = 0; r < reps; ++r) {
    const system = "Answer using these notes.\n\n" + heldout.slice(r * systemChars, (r + 1) * systemChars);
    const ask = (q) => stream(server.port, {
        messages: [{ role: "system", content: system }, { role: "user", content: q }],
        max_tokens: 4, temperature: 0, logit_bias: noEos, chat_template_kwargs: { enable_thinking: false },
    });
    const a = await ask("What do the notes say first?");
    const b = await ask("Summarise the notes in one line, naming the main subject and the place.");
    const row = {
        prompt_tokens: [a.usage.prompt_tokens, b.usage.prompt_tokens],
        cached_tokens: [a.usage.prompt_tokens_details.cached_tokens, b.usage.prompt_tokens_details.cached_tokens],
        ttft_ms: [a.ttft, b.ttft],
    };
    rows.push(row);
    console.error(`rep ${r + 1}: A ${a.ttft.toFixed(0)} ms (${row.prompt_tokens[0]} tokens, ${row.cached_tokens[0]} cached), ` +
        `B ${b.ttft.toFixed(0)} ms (${row.prompt_tokens[1]} tokens, ${row.cached_tokens[1]} cached) → ${(100 * b.ttft / a.ttft).toFixed(1)}%`);
}
const mean = (xs) => xs.reduce((s, x) => s + x, 0) / xs.length;
const sd = (xs) => Math.sqrt(xs.reduce((s, x) => s + (x - mean(xs)) ** 2, 0) / Math.max(1, xs.length - 1));
const a = rows.map((x) => x.ttft_ms[0]), b = rows.map((x) => x.ttft_ms[1]);
const health = await (await fetch(`http://127.0.0.1:${server.port}/health`)).json();
const out = {
    model: modelDir, parallel: Number(parallel), reps, system_chars: systemChars,
    first_ttft_ms: { mean: mean(a), sd: sd(a) }, second_ttft_ms: { mean: mean(b), sd: sd(b) },
    second_over_first: mean(b) / mean(a), prefix_cache: health.prefix_cache, rows,
};
console.log(`first ${mean(a).toFixed(0)} ± ${sd(a).toFixed(0)} ms, second ${mean(b).toFixed(0)} ± ${sd(b).toFixed(0)} ms → ${(100 * mean(b) / mean(a)).toFixed(1)}% of the first`);
if (jsonPath) fs.writeFileSync(jsonPath, JSON.stringify(out, null, 2) + "\n");
server.kill();
process.exit(0);
