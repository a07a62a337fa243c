// server_web.test.mjs — the built-in chat page of `sluice serve` in a real browser (Debian's chromium,
// driven by playwright-core), at a desktop width (1280×800) and a phone width (390×844):
// - the page loads with no request outside the server and no script error, shows the model and
//   live stats from /health;
// - a greedy reply streamed into the page equals the API's reply for the same request, and shows
//   its stats (tokens, tok/s, time to first token);
// - settings (system prompt, every sampling field, thinking, KV bits, speculation) survive a reload
//   and are what the request carries;
// - rendering, on an imported conversation: tables, links, blockquotes, rules, math in four
//   delimiters (KaTeX), highlighted code with a Copy button that copies, indented code keeping its
//   indentation, reasoning collapsed; HTML in a reply (imported, and streamed) is inert: no element
//   or handler from it exists and nothing it carries runs;
// - conversations: rename, search, export (one and all), import (and a bad file refused with a
//   message), delete; messages: regenerate, edit and resend, branch;
// - the resources drawer: the memory plan, the slot table, and the charts fed by /health (whose
//   expert-cache counters are rewritten in flight to a streaming plan's, as tiny-next streams no
//   experts), and the per-reply expert-cache hits;
// - Stop ends a long reply (the UI is ready again, the server frees the session, the partial reply
//   is kept); the sidebar collapses on the desktop (remembered) and is hidden on the phone, where it
//   opens over a full-width chat.
// Screenshots: ./artifacts/server_web_desktop.png and ./artifacts/server_web_phone.png. Skipped
// (exit 0 with a note) when /usr/bin/chromium is missing. Prints "N passed, M failed"; exits 1 on
// failure. The server and browser are always closed.
import fs from "node:fs";
import path from "node:path";
import { startServe } from "./serve_util.mjs";

const bin = process.env.SLUICE_BIN;
const src = process.env.SLUICE_SOURCE_DIR;
if (!bin || !src) {
    console.error("[server_web] SLUICE_BIN and SLUICE_SOURCE_DIR must be set");
    process.exit(2);
}
const chromiumPath = "/usr/bin/chromium";
if (!fs.existsSync(chromiumPath)) {
    console.log("[server_web] skipped: /usr/bin/chromium is not installed (scripts/install-deps.sh installs it)");
    process.exit(0);
}
const { chromium } = await import("playwright-core");

let passed = 0;
let failed = 0;
function check(name, ok, detail = "") {
    if (ok) ++passed;
    else {
        ++failed;
        console.log(`FAIL ${name}${detail ? ": " + detail : ""}`);
    }
}
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
// With a draft model (the default model drafting for itself): greedy replies are the same text,
// and the stats line shows how many drafts were kept.
const model = path.join(src, "models", "tiny-next");
const server = await startServe(bin, [model, "--ctx-size", "1024", "--draft", model]);
const port = server.port;
let browser = null;
const watchdog = setTimeout(() => {
    console.log("FAIL watchdog: the suite took longer than 120 s");
    server.kill();
    process.exit(1);
}, 120000);

// A reply exercising the renderer; `xss` is HTML a model could write, which must stay text.
const kMarkdown = [
    "# Heading",
    "",
    "| name | value |",
    "|------|------:|",
    "| alpha | 1 |",
    "| beta | 2 |",
    "",
    "See [the docs](https://example.com/docs).",
    "",
    "> a quoted line",
    "",
    "---",
    "",
    "Inline $E = mc^2$ and \\(a+b\\); prices $5 and $10 stay text.",
    "",
    "$$\\sum_{i=1}^n i = \\frac{n(n+1)}{2}$$",
    "",
    "\\[",
    "\\int_0^1 x\\,dx",
    "\\]",
    "",
    "```python",
    "def add(a, b):",
    "    return a + b  # < & >",
    "```",
    "",
    "Indented code:",
    "",
    "    for i in range(3):",
    "        print(i)",
].join("\n");
const kXss = '<img src=x onerror="window.__xss=1"> <script>window.__xss=2</script> [click](javascript:window.__xss=3) ' +
    '<a href="javascript:window.__xss=4">raw</a> <svg onload="window.__xss=5"></svg> <iframe src="javascript:window.__xss=6"></iframe>';
const kFixture = {
    format: "sluice.conversations",
    version: 1,
    conversations: [{
        title: "Rendering fixture",
        messages: [
            { role: "user", content: "Show me markdown." },
            { role: "assistant", content: kMarkdown, reasoning: "Tables first, then math." },
            { role: "user", content: "And some HTML? <b>bold</b>" },
            { role: "assistant", content: kXss },
        ],
    }],
};

// The DOM of a rendered reply, summarised in the page.
const renderedFacts = (page, index) => page.evaluate((i) => {
    const msg = document.querySelectorAll(".msg.assistant")[i];
    const body = msg.querySelector(".body");
    const det = msg.querySelector("details.reasoning");
    const indented = [...body.querySelectorAll(".code-block")].find((b) => b.querySelector(".lang").textContent === "text");
    return {
        th: [...body.querySelectorAll("table th")].map((e) => e.textContent),
        td: [...body.querySelectorAll("table td")].map((e) => e.textContent),
        link: body.querySelector('a[href="https://example.com/docs"]')?.getAttribute("target"),
        quote: body.querySelector("blockquote")?.textContent.trim(),
        hr: body.querySelectorAll("hr").length,
        katex: body.querySelectorAll(".katex").length,
        display: body.querySelectorAll(".katex-display").length,
        prices: body.textContent.includes("prices $5 and $10 stay text"),
        mathml: body.querySelector("annotation")?.textContent,
        pyLang: body.querySelector(".code-block .lang")?.textContent,
        keyword: body.querySelector(".code-block code .hljs-keyword")?.textContent,
        pyText: body.querySelector(".code-block code")?.textContent,
        copies: body.querySelectorAll(".code-block .code-head button.copy").length,
        indented: indented?.querySelector("code").textContent,
        reasoningOpen: det ? det.open : null,
        reasoning: det?.querySelector("div").textContent,
    };
}, index);

// What a reply made of `kXss` left in the DOM.
const xssFacts = (page, index) => page.evaluate((i) => {
    const body = document.querySelectorAll(".msg.assistant .body")[i];
    const handlers = [...document.querySelectorAll("*")].filter((e) => [...e.attributes].some((a) => a.name.startsWith("on")));
    return {
        elements: body.querySelectorAll("img, script, svg, iframe").length,
        handlers: handlers.length,
        jsLinks: [...document.querySelectorAll("a[href]")].filter((a) => /^\s*javascript:/i.test(a.getAttribute("href"))).length,
        text: body.textContent,
        xss: window.__xss,
    };
}, index);

const stored = (page) => page.evaluate(() => JSON.parse(localStorage.getItem("sluice.convs")));
const current = (page) => page.evaluate(() => {
    const id = localStorage.getItem("sluice.current");
    return JSON.parse(localStorage.getItem("sluice.convs")).find((c) => c.id === id);
});
const box = (page, sel) => page.locator(sel).boundingBox();
const idle = (page) => page.waitForSelector("#send:not([hidden])", { timeout: 30000 });

// Sends `text` and waits for the reply; returns the request's JSON body.
async function send(page, text) {
    const req = page.waitForRequest((r) => r.url().endsWith("/v1/chat/completions") && r.method() === "POST");
    await page.fill("#input", text);
    await page.press("#input", "Enter");
    const body = JSON.parse((await req).postData());
    await idle(page);
    return body;
}

async function importJson(page, name, value) {
    await page.setInputFiles("#import-file", { name, mimeType: "application/json", buffer: Buffer.from(typeof value === "string" ? value : JSON.stringify(value)) });
}

async function openPanel(page, id) {
    if (await page.isHidden("#" + id)) await page.click(`#${id}-toggle`);
    await page.waitForSelector(`#${id}:not([hidden])`);
}
async function closePanel(page, id) {
    if (await page.isVisible("#" + id)) await page.click(`#${id} .close`);
}

try {
    await server.ready();
    const base = `http://127.0.0.1:${port}`;
    browser = await chromium.launch({
        executablePath: chromiumPath,
        args: ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
            "--disable-component-update", "--disable-sync"],
    });
    const offsite = [];
    const pageErrors = [];
    const refused = [];  // responses >= 400: a file the page names that the server lacks, a bad request
    const watch = (context) => {
        context.on("request", (r) => {
            if (!r.url().startsWith(base) && !r.url().startsWith("blob:" + base)) offsite.push(r.url());
        });
        context.on("response", (r) => {
            if (r.status() >= 400) refused.push(`${r.status()} ${r.url()}`);
        });
        context.on("page", (p) => p.on("pageerror", (e) => pageErrors.push(String(e))));
    };
    const artifacts = path.join(process.cwd(), "artifacts");
    fs.mkdirSync(artifacts, { recursive: true });

    // ================================ desktop ================================
    const desktop = await browser.newContext({ viewport: { width: 1280, height: 800 }, acceptDownloads: true });
    await desktop.grantPermissions(["clipboard-read", "clipboard-write"], { origin: base });
    watch(desktop);
    const page = await desktop.newPage();
    await page.goto(base + "/");
    await page.waitForFunction(() => document.getElementById("model").textContent.includes("tiny-next"), null, { timeout: 10000 });
    check("page: model name from /health", true);
    await page.waitForFunction(() => document.getElementById("stats").textContent.includes("tok/s"), null, { timeout: 10000 });
    check("page: live stats", (await page.textContent("#stats")).includes("busy"));
    check("desktop: the sidebar is shown beside the chat", (await page.isVisible("#sidebar")) && (await box(page, "#main")).x >= 200);

    // A greedy reply streamed into the page equals the API's reply to the same request, with its stats.
    await openPanel(page, "settings");
    await page.fill("#set-temperature", "0");
    await page.fill("#set-max_tokens", "24");
    await closePanel(page, "settings");
    const greedyBody = await send(page, "Write hello world in Python.");
    const reply = (await current(page)).messages[1];
    const api = await (await fetch(base + "/v1/chat/completions", {
        method: "POST",
        headers: { "Content-Type": "application/json" },
        body: JSON.stringify({ messages: [{ role: "user", content: "Write hello world in Python." }], temperature: 0, max_tokens: 24,
            chat_template_kwargs: { enable_thinking: true } }),
    })).json();
    check("page: the request is the one the API is asked", greedyBody.temperature === 0 && greedyBody.max_tokens === 24 && greedyBody.stream === true &&
        greedyBody.chat_template_kwargs?.enable_thinking === true && greedyBody.messages.length === 1, JSON.stringify(greedyBody));
    check("page: streamed reply equals the API's", reply.role === "assistant" && reply.content === api.choices[0].message.content && !reply.error,
        `${JSON.stringify(reply)} vs ${JSON.stringify(api.choices[0].message)}`);
    const statsLine = await page.textContent(".msg.assistant .stats");
    check("stats: tokens, tok/s, time to first token and prompt shown", new RegExp(`^${api.usage.completion_tokens} tokens · [\\d.]+ tok/s · TTFT [\\d.]+ m?s · prompt ${api.usage.prompt_tokens}`).test(statsLine),
        `${statsLine} (API usage ${JSON.stringify(api.usage)})`);
    check("stats: speculative drafts counted", /\d+\/\d+ drafts kept/.test(statsLine), statsLine);
    check("stats: kept with the message", reply.stats?.completion_tokens === api.usage.completion_tokens && reply.stats.ttft_ms > 0, JSON.stringify(reply.stats));
    await page.waitForFunction(() => /speculative \d+% of drafts kept/.test(document.getElementById("stats").textContent), null, { timeout: 10000 })
        .catch(() => {});
    check("page: the stats show the share of drafts kept", /speculative \d+% of drafts kept/.test(await page.textContent("#stats")), await page.textContent("#stats"));
    const shown = await page.locator(".msg.assistant .body").last().textContent();
    check("page: reply rendered", shown.trim().length > 0 && reply.content.replace(/\s/g, "").includes(shown.replace(/\s/g, "").slice(0, 5)),
        JSON.stringify(shown));

    // Settings: every field survives a reload and is what the next request carries.
    await openPanel(page, "settings");
    check("settings: the server's defaults are shown as placeholders", (await page.getAttribute("#set-top_p", "placeholder")).startsWith("server:"));
    check("settings: speculation offered (the server has a draft)", await page.isVisible("#set-speculative"));
    const values = { "#set-top_p": "0.9", "#set-top_k": "40", "#set-min_p": "0.05", "#set-repetition_penalty": "1.1", "#set-presence_penalty": "0.5",
        "#set-frequency_penalty": "0.25", "#set-seed": "7", "#set-stop": "END\\n\nSTOP", "#set-system": "You are terse." };
    for (const [sel, v] of Object.entries(values)) await page.fill(sel, v);
    await page.uncheck("#set-enable_thinking");
    await page.selectOption("#set-kv_bits", "4");
    await page.selectOption("#set-speculative", "false");
    await page.reload();
    await page.waitForSelector(".msg.assistant", { timeout: 10000 });
    await openPanel(page, "settings");
    const after = {};
    for (const sel of Object.keys(values)) after[sel] = await page.inputValue(sel);
    check("settings: survive a reload", Object.entries(values).every(([k, v]) => after[k] === v) && !(await page.isChecked("#set-enable_thinking")) &&
        (await page.inputValue("#set-kv_bits")) === "4" && (await page.inputValue("#set-speculative")) === "false" && (await page.inputValue("#set-temperature")) === "0",
        JSON.stringify(after));
    check("kv: the setting keeps its own key", (await page.evaluate(() => localStorage.getItem("sluice.kv"))) === "4");
    await closePanel(page, "settings");
    const sent = await send(page, "Say hi.");
    check("settings: the request carries every field", sent.top_p === 0.9 && sent.top_k === 40 && sent.min_p === 0.05 && sent.repetition_penalty === 1.1 &&
        sent.presence_penalty === 0.5 && sent.frequency_penalty === 0.25 && sent.seed === 7 && sent.max_tokens === 24 && sent.temperature === 0 &&
        JSON.stringify(sent.stop) === JSON.stringify(["END\n", "STOP"]) && sent.chat_template_kwargs?.enable_thinking === false && sent.speculative === false,
        JSON.stringify(sent));
    check("settings: the system prompt goes first", sent.messages[0]?.role === "system" && sent.messages[0].content === "You are terse." && sent.messages.length === 4,
        JSON.stringify(sent.messages));
    check("kv: the request carries kv_bits 4", sent.kv_bits === 4, JSON.stringify(sent));
    const kvReply = (await current(page)).messages[3];
    check("kv: the q4 chat is served", kvReply.role === "assistant" && !kvReply.error && kvReply.content.length > 0, JSON.stringify(kvReply));
    // Back to defaults (greedy, short) and the one-exchange conversation the checks below expect.
    await openPanel(page, "settings");
    await page.click("#settings-reset");
    check("settings: reset", (await page.inputValue("#set-system")) === "" && (await page.inputValue("#set-kv_bits")) === "" && (await page.isChecked("#set-enable_thinking")));
    await page.fill("#set-temperature", "0");
    await page.fill("#set-max_tokens", "24");
    await closePanel(page, "settings");
    await page.evaluate(() => {
        const id = localStorage.getItem("sluice.current");
        const c = JSON.parse(localStorage.getItem("sluice.convs"));
        c.find((x) => x.id === id).messages.length = 2;
        localStorage.setItem("sluice.convs", JSON.stringify(c));
    });
    await page.reload();
    await page.waitForSelector(".msg.assistant", { timeout: 10000 });
    check("page: conversation restored", (await page.locator(".conv").count()) === 1 && (await page.locator(".msg").count()) === 2);

    // From here /health reports a streaming plan: its expert-cache counters grow by 900 hits, 100
    // misses and 200 MB read per request (the drawer's charts and the per-reply hits read them).
    let healthCalls = 0;
    await page.route("**/health", async (route) => {
        const res = await route.fetch();
        const h = await res.json();
        ++healthCalls;
        Object.assign(h.memory_plan, { streaming: true, cache_slots: 64, cache_bytes: 64e6, slot_bytes: 1e6 });
        // ... squeezed by memory pressure to half its size (the server's real field names).
        Object.assign(h.memory_pressure, { adaptive: true, source: "PSI trigger", ceiling_bytes: 64e6, floor_bytes: 8e6,
            budget_bytes: 32e6, cache_bytes: 32e6, bytes_returned: 32e6, pressure_events: 3, available_bytes: 5e8 });
        Object.assign(h.expert_cache, { hits: 900 * healthCalls, misses: 100 * healthCalls, hit_rate: 0.9, bytes_read: 2e8 * healthCalls, reads: 10 * healthCalls, read_gb_s: 1.5 });
        await route.fulfill({ response: res, json: h });
    });

    // Rendering, on an imported conversation (which also tests import).
    await importJson(page, "fixture.json", kFixture);
    await page.waitForSelector("#notice:not([hidden])");
    check("import: reported", (await page.textContent("#notice")).includes("Imported 1 conversation"), await page.textContent("#notice"));
    check("import: the imported conversation is shown", (await page.textContent(".conv.active .title")) === "Rendering fixture" && (await page.locator(".msg").count()) === 4);
    const r = await renderedFacts(page, 0);
    check("markdown: table", JSON.stringify(r.th) === '["name","value"]' && JSON.stringify(r.td) === '["alpha","1","beta","2"]', JSON.stringify(r));
    check("markdown: link opens elsewhere", r.link === "_blank", JSON.stringify(r));
    check("markdown: blockquote and rule", r.quote === "a quoted line" && r.hr === 1, JSON.stringify(r));
    check("math: $, \\(, $$ and \\[ typeset by KaTeX, two as display", r.katex === 4 && r.display === 2, JSON.stringify(r));
    check("math: prices are not math", r.prices, JSON.stringify(r));
    check("math: MathML kept for screen readers", r.mathml === "E = mc^2", JSON.stringify(r));
    check("code: highlighted, language named", r.pyLang === "python" && r.keyword === "def" && r.pyText === "def add(a, b):\n    return a + b  # < & >\n", JSON.stringify(r));
    check("code: a Copy button on each block", r.copies === 2, JSON.stringify(r));
    check("code: indented code keeps its indentation", r.indented === "for i in range(3):\n    print(i)\n", JSON.stringify(r.indented));
    check("reasoning: shown collapsed", r.reasoningOpen === false && r.reasoning === "Tables first, then math.", JSON.stringify(r));
    await page.click(".msg.assistant .code-block button.copy");
    await page.waitForFunction(() => document.querySelector(".msg.assistant .code-block button.copy").textContent !== "Copy", null, { timeout: 3000 });
    const clip = await page.evaluate(() => navigator.clipboard.readText());
    check("code: Copy copies the code", clip === "def add(a, b):\n    return a + b  # < & >\n" && (await page.textContent(".msg.assistant .code-block button.copy")) === "Copied", JSON.stringify(clip));
    const x = await xssFacts(page, 1);
    check("xss: HTML in a reply creates no element", x.elements === 0, JSON.stringify(x));
    check("xss: no event handler, no javascript: link, nothing ran", x.handlers === 0 && x.jsLinks === 0 && x.xss === undefined, JSON.stringify(x));
    check("xss: the HTML is shown as text", x.text.includes('<img src=x onerror="window.__xss=1">') && x.text.includes("<script>"), JSON.stringify(x));
    check("user messages are text", (await page.locator(".msg.user .body").last().textContent()) === "And some HTML? <b>bold</b>" &&
        (await page.locator(".msg.user .body b").count()) === 0);

    // The same HTML streamed (with reasoning) by a server: rendered as it arrives, inert.
    await page.route("**/v1/chat/completions", (route) => {
        const chunk = (delta, extra = {}) => `data: ${JSON.stringify({ object: "chat.completion.chunk", choices: [{ index: 0, delta, finish_reason: null }], ...extra })}\n\n`;
        route.fulfill({
            status: 200,
            headers: { "Content-Type": "text/event-stream" },
            body: chunk({ role: "assistant", content: "" }) + chunk({ reasoning_content: "Thinking about <b>tags</b>." }) +
                chunk({ content: kXss.slice(0, 40) }) + chunk({ content: kXss.slice(40) }) +
                `data: ${JSON.stringify({ choices: [], usage: { prompt_tokens: 9, completion_tokens: 30, total_tokens: 39 } })}\n\n` + "data: [DONE]\n\n",
        });
    });
    await send(page, "Stream some HTML.");
    await page.unroute("**/v1/chat/completions");
    const sx = await xssFacts(page, 2);
    check("xss (streamed): no element, no handler, nothing ran", sx.elements === 0 && sx.handlers === 0 && sx.jsLinks === 0 && sx.xss === undefined, JSON.stringify(sx));
    check("reasoning (streamed): collapsible, as text", (await page.locator(".msg.assistant").nth(2).locator("details.reasoning div").textContent()) === "Thinking about <b>tags</b>." &&
        !(await page.locator(".msg.assistant").nth(2).locator("details.reasoning").evaluate((d) => d.open)));

    // A bad file is refused with a message, and nothing is added.
    const before = (await stored(page)).length;
    await importJson(page, "broken.json", "{ not json");
    await page.waitForSelector("#notice.error:not([hidden])");
    check("import: a file that is not JSON is refused with a message", (await page.textContent("#notice")).includes("not a JSON file"), await page.textContent("#notice"));
    await importJson(page, "wrong.json", { conversations: [{ title: "x", messages: [{ role: "robot", content: "hi" }] }] });
    await page.waitForFunction(() => document.getElementById("notice").textContent.includes("robot"));
    check("import: a bad message is named", (await page.textContent("#notice")).includes("conversation 1, message 1: role must be"), await page.textContent("#notice"));
    check("import: nothing added by bad files", (await stored(page)).length === before && (await page.locator(".conv").count()) === before);

    // Rename, search, export, import of the export, delete.
    await page.click(".conv.active button[data-act=rename]");
    await page.fill(".conv.active .rename-input", "Renamed fixture");
    await page.press(".conv.active .rename-input", "Enter");
    check("rename: shown", (await page.textContent(".conv.active .title")) === "Renamed fixture");
    check("rename: stored", (await current(page)).title === "Renamed fixture");
    await page.fill("#search", "quoted line");
    check("search: by content", (await page.locator(".conv").count()) === 1 && (await page.textContent(".conv .title")) === "Renamed fixture");
    await page.fill("#search", "write hello");
    check("search: by title", (await page.locator(".conv").count()) === 1 && (await page.textContent(".conv .title")).startsWith("Write hello"));
    await page.fill("#search", "no such words anywhere");
    check("search: nothing found", (await page.locator(".conv").count()) === 0 && (await page.isVisible("#convs .empty")));
    await page.fill("#search", "");
    const oneDl = page.waitForEvent("download");
    await page.click(".conv.active button[data-act=export]");
    const one = await oneDl;
    const oneJson = JSON.parse(fs.readFileSync(await one.path(), "utf8"));
    check("export: one conversation", one.suggestedFilename() === "sluice-renamed-fixture.json" && oneJson.format === "sluice.conversations" &&
        oneJson.conversations.length === 1 && oneJson.conversations[0].messages[1].content === kMarkdown, one.suggestedFilename());
    const allDl = page.waitForEvent("download");
    await page.click("#export-all");
    const allJson = JSON.parse(fs.readFileSync(await (await allDl).path(), "utf8"));
    check("export: all conversations", allJson.conversations.length === (await stored(page)).length && allJson.conversations.length === 2, String(allJson.conversations.length));
    await importJson(page, "sluice-renamed-fixture.json", fs.readFileSync(await one.path(), "utf8"));
    await page.waitForFunction(() => document.getElementById("notice").textContent.includes("Imported 1"));
    const reimported = await current(page);
    check("import: an export comes back whole, as a new conversation", (await stored(page)).length === 3 && reimported.title === "Renamed fixture" &&
        reimported.id !== oneJson.conversations[0].id && JSON.stringify(reimported.messages) === JSON.stringify(oneJson.conversations[0].messages));
    await page.click(".conv.active button[data-act=delete]");
    check("delete: asks first", (await page.locator(".conv").count()) === 3 && (await page.textContent(".conv.active button[data-act=delete]")) === "Delete?");
    await page.click(".conv.active button[data-act=delete]");
    check("delete: removed", (await page.locator(".conv").count()) === 2 && (await stored(page)).length === 2);

    // Regenerate, edit and resend, branch, on the greedy conversation.
    await page.click(".conv:has-text('Write hello')");
    await page.waitForFunction(() => document.querySelectorAll(".msg").length === 2);
    // (the page has polled the rewritten /health: its status line shows the expert cache)
    await page.waitForFunction(() => document.getElementById("stats").textContent.includes("expert cache 90.0% hits"), null, { timeout: 5000 });
    const regen = page.waitForRequest((q) => q.url().endsWith("/v1/chat/completions"));
    await page.click(".msg.assistant button[data-act=regen]");
    const regenBody = JSON.parse((await regen).postData());
    await idle(page);
    const afterRegen = await current(page);
    check("regenerate: asks again without the old reply", regenBody.messages.length === 1 && regenBody.messages[0].role === "user", JSON.stringify(regenBody.messages));
    check("regenerate: the reply is replaced (greedy: the same text)", afterRegen.messages.length === 2 && afterRegen.messages[1].content === api.choices[0].message.content);
    check("stats: expert-cache hits of the reply, from /health", /experts 90% hits \(\d+\/\d+\)/.test(await page.textContent(".msg.assistant .stats")), await page.textContent(".msg.assistant .stats"));
    await page.click(".msg.user button[data-act=edit]");
    await page.fill(".msg.user .edit-box textarea", "Count to three.");
    const edited = page.waitForRequest((q) => q.url().endsWith("/v1/chat/completions"));
    await page.click(".msg.user .edit-box button[data-act=edit-send]");
    const editedBody = JSON.parse((await edited).postData());
    await idle(page);
    const afterEdit = await current(page);
    check("edit: resends the new text", editedBody.messages.length === 1 && editedBody.messages[0].content === "Count to three.", JSON.stringify(editedBody.messages));
    check("edit: the conversation is the new exchange", afterEdit.messages.length === 2 && afterEdit.messages[0].content === "Count to three." &&
        afterEdit.messages[1].content.length > 0 && !afterEdit.messages[1].error, JSON.stringify(afterEdit.messages).slice(0, 300));
    const sourceId = afterEdit.id;
    await page.click(".msg.assistant button[data-act=branch]");
    const branched = await current(page);
    check("branch: a new conversation with the messages up to the reply", branched.id !== sourceId && branched.title.includes("Count to three") &&
        JSON.stringify(branched.messages) === JSON.stringify(afterEdit.messages) && (await page.locator(".conv").count()) === 3);
    check("branch: the original is kept", (await stored(page)).some((c) => c.id === sourceId));

    // The resources drawer: the plan, the slots, the charts from /health.
    await openPanel(page, "resources");
    await page.waitForFunction(() => document.querySelectorAll("#chart-hits polyline").length > 0 && document.querySelectorAll("#slots tr").length >= 2, null, { timeout: 8000 })
        .catch(() => {});
    const res = await page.evaluate(() => ({
        segments: document.querySelectorAll("#plan-bar span").length,
        legend: document.getElementById("plan-legend").textContent,
        plan: document.getElementById("plan-text").textContent,
        cache: document.getElementById("cache-text").textContent,
        pressure: document.getElementById("pressure-text").textContent,
        hits: document.querySelector("#chart-hits polyline")?.getAttribute("points").split(" ").length ?? 0,
        hitsNow: document.querySelector("#chart-hits").parentElement.querySelector(".now").textContent,
        disk: document.querySelector("#chart-disk").parentElement.querySelector(".now").textContent,
        tokens: document.querySelectorAll("#chart-tokens polyline").length,
        slots: [...document.querySelectorAll("#slots td")].map((t) => t.textContent),
    }));
    // The legend's weights are the plan's dense core (the server's own figure, not a number kept here).
    const dense = /dense (\d+\.\d MB)/.exec(res.plan)?.[1];
    check("resources: the memory plan", res.segments === 4 && dense !== undefined && res.legend.includes(`weights: ${dense}`) && res.legend.includes("expert cache (64 slots)") && res.plan.startsWith("memory plan:"), JSON.stringify(res));
    check("resources: expert-cache hit rate over time", res.hits >= 2 && res.hitsNow === "90%" && res.cache.startsWith("90.0% hits since start"), JSON.stringify(res));
    check("resources: the cache under memory pressure", res.pressure.includes("between 8.0 MB and 64.0 MB") && res.pressure.includes("budget now 32.0 MB") &&
        res.pressure.includes("3 pressure events") && res.pressure.includes("32.0 MB handed back"), JSON.stringify(res));
    check("resources: disk GB/s over time", /^0\.\d\d GB\/s/.test(res.disk), JSON.stringify(res));
    check("resources: tokens/s chart and slots", res.tokens >= 1 && res.slots[0] === "0" && res.slots[1] === "idle", JSON.stringify(res));
    check("desktop: a drawer narrows the chat instead of covering it", (await box(page, "#main")).width < 700 && await page.isVisible("#send"));
    await closePanel(page, "resources");
    await page.unroute("**/health");

    // Stop a long reply: the stream ends, the UI is ready again, the server frees the session,
    // and the partial reply is kept. End-of-sequence is banned in the request (rewritten on the
    // way out) so the reply cannot end by itself first.
    await page.route("**/v1/chat/completions", (route) => {
        const body = JSON.parse(route.request().postData());
        route.continue({ postData: JSON.stringify({ ...body, max_tokens: 900, logit_bias: { 8187: -100, 8189: -100 } }) });
    });
    await page.fill("#input", "Count to one thousand.");
    await page.press("#input", "Enter");
    await page.waitForSelector("#stop:not([hidden])", { timeout: 5000 });
    await page.waitForFunction(() => (document.querySelectorAll(".msg.assistant .body")[1]?.textContent ?? "").length > 20, null, { timeout: 20000 });
    await page.click("#stop");
    await idle(page);
    check("stop: the UI is ready again", await page.isHidden("#stop"));
    const frozen = await page.locator(".msg.assistant .body").last().textContent();
    await sleep(500);
    check("stop: the reply no longer grows", (await page.locator(".msg.assistant .body").last().textContent()) === frozen);
    let health = null;
    for (let i = 0; i < 30; ++i) {
        health = await (await fetch(base + "/health")).json();
        if (health.slots.active === 0) break;
        await sleep(100);
    }
    check("stop: the server released the session", health.slots.active === 0, JSON.stringify(health.slots));
    const afterStop = await current(page);
    const partial = afterStop.messages[3];
    check("stop: the partial reply is kept without an error", afterStop.messages.length === 4 && partial.content.length > 0 && !partial.error && partial.stats?.stopped === 1,
        JSON.stringify(partial).slice(0, 200));
    check("stop: the reply says it was stopped", (await page.locator(".msg.assistant .stats").last().textContent()).startsWith("stopped after"));
    await page.unroute("**/v1/chat/completions");
    await page.reload();
    await page.waitForSelector(".msg.assistant", { timeout: 10000 });
    check("stop: the conversation survives a reload", (await page.locator(".msg").count()) === 4);

    // The sidebar collapses on the desktop, and stays so across a reload.
    const wide = (await box(page, "#main")).width;
    await page.click("#sidebar-close");
    check("desktop: the sidebar collapses, the chat widens", (await page.isHidden("#sidebar")) && (await box(page, "#main")).width > wide + 200);
    await page.reload();
    await page.waitForSelector(".msg.assistant", { timeout: 10000 });
    check("desktop: the collapse is remembered", await page.isHidden("#sidebar"));
    await page.click("#sidebar-toggle");
    check("desktop: the sidebar comes back", await page.isVisible("#sidebar"));
    await page.click(".conv:has-text('Renamed fixture')");
    await page.waitForSelector(".katex-display");
    await page.evaluate(() => (document.getElementById("log").scrollTop = 0));
    await page.screenshot({ path: path.join(artifacts, "server_web_desktop.png") });

    // ================================ phone ================================
    const phoneCtx = await browser.newContext({ viewport: { width: 390, height: 844 }, hasTouch: true });
    watch(phoneCtx);
    const phone = await phoneCtx.newPage();
    await phone.goto(base + "/");
    await phone.waitForFunction(() => document.getElementById("model").textContent.includes("tiny-next"), null, { timeout: 10000 });
    check("phone: the sidebar is hidden", await phone.isHidden("#sidebar"));
    const main = await box(phone, "#main");
    const log = await box(phone, "#log");
    check("phone: the chat takes the full width", main.x === 0 && main.width === 390 && log.width === 390, JSON.stringify({ main, log }));
    await phone.click("#sidebar-toggle");
    await phone.waitForSelector("#sidebar", { state: "visible" });
    await phone.waitForTimeout(250);  // the slide-in
    const side = await box(phone, "#sidebar");
    check("phone: the sidebar opens over the chat", side.x === 0 && side.width < 390 && (await phone.isVisible("#backdrop")) && (await box(phone, "#main")).width === 390,
        JSON.stringify(side));
    await importJson(phone, "fixture.json", kFixture);
    await phone.waitForSelector(".katex-display");
    check("phone: the import is reported in the open sidebar", (await phone.isVisible("#notice")) && (await phone.isVisible(".conv.active")));
    await phone.click(".conv.active .title");
    check("phone: choosing a conversation closes the sidebar", await phone.waitForSelector("#sidebar", { state: "hidden", timeout: 2000 }).then(() => true, () => false));
    const p = await renderedFacts(phone, 0);
    check("phone: rendered like the desktop", p.katex === 4 && p.copies === 2 && p.td.length === 4 && p.hr === 1, JSON.stringify(p));
    const px = await xssFacts(phone, 1);
    check("phone: HTML inert", px.elements === 0 && px.handlers === 0 && px.xss === undefined, JSON.stringify(px));
    check("phone: nothing is wider than the screen", await phone.evaluate(() => document.documentElement.scrollWidth <= 390 && document.getElementById("log").scrollWidth <= 390));
    await phone.click("#sidebar-toggle");
    await phone.waitForSelector("#sidebar", { state: "visible" });
    await phone.click("#backdrop", { position: { x: 370, y: 400 } });
    await phone.waitForSelector("#sidebar", { state: "hidden" });
    check("phone: the backdrop closes the sidebar", await phone.isHidden("#backdrop"));
    await phone.click("#settings-toggle");
    check("phone: settings take the screen", (await box(phone, "#settings")).width === 390);
    await phone.fill("#set-temperature", "0");
    await phone.fill("#set-max_tokens", "16");
    await phone.click("#settings .close");
    await phone.click("#sidebar-toggle");
    await phone.click("#new");
    await phone.waitForSelector("#sidebar", { state: "hidden" });
    const phoneBody = await send(phone, "Hello from a phone.");
    check("phone: a reply streams, with its stats", phoneBody.max_tokens === 16 && /^\d+ tokens · /.test(await phone.textContent(".msg.assistant .stats")),
        await phone.textContent(".msg.assistant .stats"));
    await phone.screenshot({ path: path.join(artifacts, "server_web_phone.png") });
    for (const f of ["server_web_desktop.png", "server_web_phone.png"]) {
        check(`screenshot saved: ${f}`, fs.statSync(path.join(artifacts, f)).size > 1000);
        console.log(`[server_web] screenshot: ${path.join(artifacts, f)}`);
    }
    check("page: no off-site requests", offsite.length === 0, offsite.join(", "));
    check("page: every request answered", refused.length === 0, refused.join(", "));
    check("page: no script errors", pageErrors.length === 0, pageErrors.join(" | "));
} catch (e) {
    check("suite", false, String(e && e.stack));
} finally {
    clearTimeout(watchdog);
    if (browser) await browser.close().catch(() => {});
    server.kill();
}
console.log(`[server_web] ${passed} passed, ${failed} failed`);
process.exit(failed ? 1 : 0);
