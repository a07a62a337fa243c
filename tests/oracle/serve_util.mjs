// serve_util.mjs — shared by the server oracle suites: a free loopback port, a `sluice serve`
// child process that is always killed when the suite exits (its stderr kept for failure reports),
// check/test bookkeeping, raw requests and SSE parsing. (Not a suite itself: ctest runs only
// *.test.mjs.)
import { spawn } from "node:child_process";
import http from "node:http";
import net from "node:net";

export function freePort() {
    return new Promise((resolve, reject) => {
        const s = net.createServer();
        s.once("error", reject);
        s.listen(0, "127.0.0.1", () => {
            const { port } = s.address();
            s.close(() => resolve(port));
        });
    });
}

// Starts `bin serve ...args --port P`. Returns {port, log, exited, kill(), ready()}: `log` grows
// with the server's stderr; ready() waits for "listening on" and throws when the server exits or
// does not start within `ms`.
export async function startServe(bin, args) {
    const port = await freePort();
    const child = spawn(bin, ["serve", ...args, "--port", String(port)], { stdio: ["ignore", "ignore", "pipe"] });
    const s = {
        port,
        log: "",
        exited: false,
        kill() {
            if (!s.exited) child.kill("SIGKILL");
        },
        async ready(ms = 30000) {
            for (const end = Date.now() + ms; Date.now() < end && !s.log.includes("listening on");) {
                if (s.exited) throw new Error(`server exited: ${s.log}`);
                await new Promise((r) => setTimeout(r, 100));
            }
            if (!s.log.includes("listening on")) throw new Error(`server did not start: ${s.log}`);
        },
    };
    child.stderr.on("data", (d) => (s.log += d.toString()));
    child.on("exit", () => (s.exited = true));
    process.on("exit", () => s.kill());
    return s;
}

// A suite's bookkeeping: check(name, ok, detail) counts and prints failures; test(name, fn) runs
// an async block and counts a throw as a failure; finish() prints "N passed, M failed" and exits
// 1 on any failure.
export function suite(label) {
    let passed = 0;
    let failed = 0;
    const check = (name, ok, detail = "") => {
        if (ok) ++passed;
        else {
            ++failed;
            console.log(`FAIL ${name}${detail ? ": " + detail : ""}`);
        }
    };
    const test = async (name, fn) => {
        try {
            await fn();
        } catch (e) {
            check(name, false, `threw ${e && e.stack ? e.stack.split("\n").slice(0, 3).join(" | ") : e}`);
        }
    };
    const finish = () => {
        console.log(`[${label}] ${passed} passed, ${failed} failed`);
        process.exit(failed ? 1 : 0);
    };
    return { check, test, finish };
}

// One HTTP request on its own connection; resolves {status, headers, body, ms}. `key`: a bearer
// token; `from`: the local address to connect from (any 127.0.0.0/8 address is this machine, so a
// suite can be several clients as the server counts them).
export function request(port, method, pathname, { body, headers = {}, key, from, timeoutMs = 60000 } = {}) {
    return new Promise((resolve, reject) => {
        const h = { ...headers };
        if (key) h.Authorization = `Bearer ${key}`;
        if (body !== undefined) {
            h["Content-Type"] ??= "application/json";
            h["Content-Length"] = Buffer.byteLength(body);
        }
        const t0 = performance.now();
        const req = http.request({ host: "127.0.0.1", port, method, path: pathname, headers: h, agent: false, localAddress: from }, (res) => {
            const chunks = [];
            res.on("data", (c) => chunks.push(c));
            res.on("end", () => resolve({ status: res.statusCode, headers: res.headers, body: Buffer.concat(chunks).toString("utf8"), ms: performance.now() - t0 }));
        });
        req.setTimeout(timeoutMs, () => req.destroy(new Error(`no reply within ${timeoutMs} ms`)));
        req.on("error", reject);
        if (body !== undefined) req.write(body);
        req.end();
    });
}

// The OpenAI error body's code, or null when the text is not one.
export function errorCode(text) {
    try {
        return JSON.parse(text).error?.code ?? null;
    } catch {
        return null;
    }
}

// The data events of an SSE body, parsed ("[DONE]" left out).
export function sseEvents(body) {
    return body.split("\n\n").filter((e) => e.startsWith("data: ") && e !== "data: [DONE]").map((e) => JSON.parse(e.slice(6)));
}

// A fetch that records every request body it sends, by path, for clients that take a fetch
// (the AI SDK's providers, LangChain's `configuration.fetch`): `lastBody(path)` is the latest one
// sent there (`lastBody(path, 2)` the one before it), so a suite can replay a client's request
// through another client.
export function fetchRecorder() {
    const sent = [];
    const fetchAndRecord = async (url, init) => {
        sent.push({ path: new URL(url).pathname, body: init?.body ? JSON.parse(init.body) : null });
        return fetch(url, init);
    };
    const lastBody = (pathname, back = 1) => sent.filter((s) => s.path === pathname).at(-back)?.body;
    return { fetch: fetchAndRecord, lastBody };
}
