// server_web.test.mjs — the built-in chat page of `sluice serve` in a real browser (Debian's chromium,
// driven by playwright-core): the page loads with no network beyond the server, shows the model and
// live stats from /health, streams a reply that equals the API's greedy reply for the same request,
// renders markdown safely (code blocks, bold, HTML escaped), and keeps the conversation across a
// reload (localStorage), stops a long reply with the Stop button (the UI is ready again, the
// server frees the session) and saves a screenshot to ./artifacts/server_web.png. Skipped (exit 0 with a note) when /usr/bin/chromium is missing.
// Prints "N passed, M failed"; exits 1 on failure. The server and browser are always closed.
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
    console.log("FAIL watchdog: the suite took longer than 90 s");
    server.kill();
    process.exit(1);
}, 90000);

try {
    await server.ready();
    const base = `http://127.0.0.1:${port}`;
    browser = await chromium.launch({
        executablePath: chromiumPath,
        args: ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
            "--disable-component-update", "--disable-sync"],
    });
    const page = await browser.newPage();
    const offsite = [];
    page.on("request", (r) => {
        if (!r.url().startsWith(base)) offsite.push(r.url());
    });
    const pageErrors = [];
    page.on("pageerror", (e) => pageErrors.push(String(e)));
    await page.goto(base + "/");
    await page.waitForFunction(() => document.getElementById("model").textContent.includes("tiny-next"), null, { timeout: 10000 });
    check("page: model name from /health", true);
    await page.waitForFunction(() => document.getElementById("stats").textContent.includes("tok/s"), null, { timeout: 10000 });
    check("page: live stats", (await page.textContent("#stats")).includes("busy"));

    // A greedy reply streamed into the page equals the API's reply to the same request.
    await page.fill("#temp", "0");
    await page.fill("#max", "24");
    await page.fill("#input", "Write hello world in Python.");
    await page.press("#input", "Enter");
    await page.waitForSelector("#stop:not([hidden])", { timeout: 5000 }).catch(() => {});
    await page.waitForSelector("#send:not([hidden])", { timeout: 30000 });
    const saved = await page.evaluate(() => JSON.parse(localStorage.getItem("sluice.convs")));
    const reply = saved[0].messages[1];
    const api = await (await fetch(base + "/v1/chat/completions", {
        method: "POST",
        headers: { "Content-Type": "application/json" },
        body: JSON.stringify({ messages: [{ role: "user", content: "Write hello world in Python." }], temperature: 0, max_tokens: 24,
            chat_template_kwargs: { enable_thinking: true } }),
    })).json();
    check("page: streamed reply equals the API's", reply.role === "assistant" && reply.content === api.choices[0].message.content && !reply.error,
        `${JSON.stringify(reply)} vs ${JSON.stringify(api.choices[0].message)}`);
    await page.waitForFunction(() => /speculative \d+% of drafts kept/.test(document.getElementById("stats").textContent), null, { timeout: 10000 })
        .catch(() => {});
    check("page: the stats show the share of drafts kept", /speculative \d+% of drafts kept/.test(await page.textContent("#stats")), await page.textContent("#stats"));
    const shown = await page.locator(".msg.assistant .body").last().textContent();
    check("page: reply rendered", shown.trim().length > 0 && reply.content.replace(/\s/g, "").includes(shown.replace(/\s/g, "").slice(0, 5)),
        JSON.stringify(shown));

    // The KV setting: remembered across a reload, sent as the request's kv_bits, and served.
    await page.selectOption("#kv", "4");
    await page.reload();
    await page.waitForSelector(".msg.assistant", { timeout: 10000 });
    check("kv: the setting survives a reload", (await page.inputValue("#kv")) === "4");
    const sent = page.waitForRequest((r) => r.url().endsWith("/v1/chat/completions") && r.method() === "POST");
    await page.fill("#input", "Say hi.");
    await page.press("#input", "Enter");
    const kvBody = JSON.parse((await sent).postData());
    await page.waitForSelector("#send:not([hidden])", { timeout: 30000 });
    const afterKv = await page.evaluate(() => JSON.parse(localStorage.getItem("sluice.convs")));
    const kvReply = afterKv[0].messages[afterKv[0].messages.length - 1];
    check("kv: the request carries kv_bits 4", kvBody.kv_bits === 4, JSON.stringify(kvBody));
    check("kv: the q4 chat is served", kvReply.role === "assistant" && !kvReply.error && kvReply.content.length > 0, JSON.stringify(kvReply));
    await page.selectOption("#kv", "");
    await page.evaluate(() => {  // back to the one-exchange conversation the checks below expect
        const c = JSON.parse(localStorage.getItem("sluice.convs"));
        c[0].messages = c[0].messages.slice(0, 2);
        localStorage.setItem("sluice.convs", JSON.stringify(c));
    });
    await page.reload();
    await page.waitForSelector(".msg.assistant", { timeout: 10000 });

    // Markdown subset, HTML escaped.
    const html = await page.evaluate(() => markdown("# T\n```py\nx = 1 < 2\n```\n**bold** and `code`\n- a\n- b\n<img src=x onerror=alert(1)>"));
    check("markdown: code block", html.includes('<pre><code data-lang="py">x = 1 &lt; 2</code></pre>'), html);
    check("markdown: inline", html.includes("<strong>bold</strong>") && html.includes("<code>code</code>") && html.includes("<ul><li>a</li><li>b</li></ul>") &&
        html.includes("<h1>T</h1>"), html);
    check("markdown: HTML escaped", !html.includes("<img") && html.includes("&lt;img"), html);

    // The conversation survives a reload.
    await page.reload();
    await page.waitForSelector(".msg.assistant", { timeout: 10000 });
    check("page: conversation restored", (await page.locator(".conv").count()) === 1 && (await page.locator(".msg").count()) === 2);

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
    await page.waitForSelector("#send:not([hidden])", { timeout: 5000 });
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
    const afterStop = await page.evaluate(() => JSON.parse(localStorage.getItem("sluice.convs")));
    const partial = afterStop[0].messages[3];
    check("stop: the partial reply is kept without an error", afterStop[0].messages.length === 4 && partial.content.length > 0 && !partial.error,
        JSON.stringify(partial).slice(0, 200));
    await page.unroute("**/v1/chat/completions");
    await page.reload();
    await page.waitForSelector(".msg.assistant", { timeout: 10000 });
    check("stop: the conversation survives a reload", (await page.locator(".msg").count()) === 4);
    const artifacts = path.join(process.cwd(), "artifacts");
    fs.mkdirSync(artifacts, { recursive: true });
    await page.screenshot({ path: path.join(artifacts, "server_web.png"), fullPage: true });
    check("screenshot saved", fs.statSync(path.join(artifacts, "server_web.png")).size > 1000);
    console.log(`[server_web] screenshot: ${path.join(artifacts, "server_web.png")}`);
    check("page: no off-site requests", offsite.length === 0, offsite.join(", "));
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
