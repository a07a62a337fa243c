// pull.test.mjs — `sluice pull` against a mock Hugging Face Hub on loopback (mock_hub.mjs).
//
// Two repositories, re-sharded at startup into a temp folder so that layers straddle shards:
//   sluice-test/tiny-moe-bf16 (private): tests/data/goldens/qwen3_moe_hf_bf16 in 3 shards — quantized
//     to 4 bits as the bytes arrive;
//   sluice-test/tiny-next: models/tiny-next (MLX 4-bit, with its tokenizer) in 2 shards — copied verbatim.
// Every successful pull must be byte-identical, file by file, to `sluice pack` of the same folder.
// Cases: faults on the data (dropped connection, 429, 503, a 200 HTML error page, a stall, a
// corrupted byte caught by SHA-256), the token kept from the CDN host, `kill -9` mid-download then a
// resume that fetches only the rest, a persistent HTML answer that must leave no HTML in any file,
// 401 without HF_TOKEN, 404 for an unknown repository or revision, and `sluice generate` on the result.
// Lifetime: one temp folder, removed at the end; the mock servers live in this process.
import { execFile, spawn, spawnSync } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { reshard, startMockHub } from "./mock_hub.mjs";

const bin = process.env.SLUICE_BIN;
const src = process.env.SLUICE_SOURCE_DIR;
if (!bin || !src) {
    console.error("[pull] SLUICE_BIN and SLUICE_SOURCE_DIR must be set");
    process.exit(2);
}
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), "sluice-pull-"));
let failures = 0;
const fail = (msg) => {
    console.error(`[pull] FAIL: ${msg}`);
    failures++;
};

// The repositories.
const moeDir = path.join(tmp, "repo-moe");
fs.mkdirSync(moeDir);
const golden = path.join(src, "tests/data/goldens/qwen3_moe_hf_bf16");
fs.copyFileSync(path.join(golden, "config.json"), path.join(moeDir, "config.json"));
reshard(path.join(golden, "model.safetensors"), moeDir, 3);
const nextDir = path.join(tmp, "repo-next");
fs.mkdirSync(nextDir);
const tiny = path.join(src, "models/tiny-next");
for (const f of ["config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json", "README.md"])
    fs.copyFileSync(path.join(tiny, f), path.join(nextDir, f));
reshard(path.join(tiny, "model.safetensors"), nextDir, 2);

const hub = await startMockHub({
    "sluice-test/tiny-moe-bf16": { dir: moeDir, private: true, sha: "1".repeat(40) },
    "sluice-test/tiny-next": { dir: nextDir, sha: "2".repeat(40) },
});
// Hermetic: no token saved by `hf auth login` on this machine, no default models folder.
const baseEnv = { ...process.env, HF_ENDPOINT: hub.endpoint, HF_TOKEN: "", HF_HOME: path.join(tmp, "hf-home"), HF_TOKEN_PATH: "",
    SLUICE_MODELS: path.join(tmp, "models-folder") };
const fastFlags = ["--stall-timeout", "1", "--retry-wait", "0.05"];

function run(args, env = {}) {
    return new Promise((resolve) => {
        execFile(bin, args, { env: { ...baseEnv, ...env }, maxBuffer: 1 << 26 }, (err, stdout, stderr) =>
            resolve({ code: err ? err.code ?? 1 : 0, stdout, stderr }));
    });
}

function listFiles(dir, rel = "") {
    const out = [];
    for (const e of fs.readdirSync(path.join(dir, rel), { withFileTypes: true })) {
        if (e.name.startsWith(".")) continue;  // progress records and staging differ by design
        const r = path.join(rel, e.name);
        if (e.isDirectory()) out.push(...listFiles(dir, r));
        else out.push(r);
    }
    return out.sort();
}

function sameTree(a, b, what) {
    const fa = listFiles(a), fb = listFiles(b);
    if (JSON.stringify(fa) !== JSON.stringify(fb)) return fail(`${what}: files differ: ${fa} vs ${fb}`);
    for (const f of fa)
        if (!fs.readFileSync(path.join(a, f)).equals(fs.readFileSync(path.join(b, f))))
            return fail(`${what}: ${f} differs from sluice pack's`);
    console.log(`[pull] ${what}: ${fa.length} files byte-identical to sluice pack`);
}

// sluice pack of the same folders: the reference.
const packMoe = path.join(tmp, "pack-moe");
const packNext = path.join(tmp, "pack-next");
for (const [from, to] of [[moeDir, packMoe], [nextDir, packNext]]) {
    const r = await run(["pack", from, to]);
    if (r.code !== 0) throw new Error(`sluice pack ${from} failed: ${r.stderr}`);
}

// 1. Faults on the data of the private bf16 repository; the token must reach the Hub, not the CDN.
// One connection, so that the faults meet the requests in a known order (the other cases run the
// default four shards at once).
{
    hub.state.faults = ["drop", "429", "503", "html200", "stall", "corrupt"];
    const out = path.join(tmp, "pull-moe");
    const t0 = Date.now();
    let r = await run(["pull", "sluice-test/tiny-moe-bf16", "--to", out, "--connections", "1", ...fastFlags],
        { HF_TOKEN: hub.token });
    const log = r.stderr;
    if (process.env.PULL_TEST_VERBOSE) console.log(log);
    // The corrupted byte passes every HTTP check and is caught by the SHA-256 of its shard.
    if (r.code === 0) fail("a corrupted byte was not caught by the SHA-256 check");
    else if (!/SHA-256 mismatch/.test(r.stderr)) fail(`expected a SHA-256 mismatch, got: ${r.stderr}`);
    r = await run(["pull", "sluice-test/tiny-moe-bf16", "--to", out, ...fastFlags], { HF_TOKEN: hub.token });
    if (r.code !== 0) fail(`pull after faults failed: ${r.stderr}`);
    else {
        sameTree(out, packMoe, "bf16 → 4-bit pull with faults");
        const v = spawnSync(bin, ["verify", out], { encoding: "utf8" });
        if (v.status !== 0 || !/OK/.test(v.stdout)) fail(`sluice verify on the pull: ${v.stdout}${v.stderr}`);
        if (fs.existsSync(path.join(out, ".source"))) fail("the staging folder .source was left behind");
        const again = await run(["pull", "sluice-test/tiny-moe-bf16", "--to", out], { HF_TOKEN: hub.token });
        if (again.code !== 0 || !/already a complete pull/.test(again.stderr)) fail(`re-run of a finished pull: ${again.stderr}`);
    }
    for (const want of [/HTTP 429/, /HTTP 503/, /HTTP 200 to a range request/, /stalled/, /Recv failure|Transferred a partial file|end of file|ended early/i])
        if (!want.test(log)) fail(`no retry line matching ${want} in:\n${log}`);
    if (hub.state.faults.length) fail(`faults not consumed: ${hub.state.faults}`);
    if (hub.state.cdnAuthSeen) fail(`the token was sent to the CDN host ${hub.state.cdnAuthSeen} time(s)`);
    if (![...hub.state.cdnHostsSeen].every((h) => h.startsWith("cdn-lfs.localhost:")))
        fail(`CDN requests went to ${[...hub.state.cdnHostsSeen]}`);
    console.log(`[pull] fault run: ${((Date.now() - t0) / 1000).toFixed(1)} s`);
}

// 1b. Faults while three shards stream at once: whatever request meets them, the result is the same.
{
    hub.state.faults = ["drop", "503", "drop", "stall", "429"];
    const out = path.join(tmp, "pull-moe-parallel");
    const r = await run(["pull", "sluice-test/tiny-moe-bf16", "--to", out, ...fastFlags], { HF_TOKEN: hub.token });
    if (r.code !== 0) fail(`parallel pull with faults failed: ${r.stderr}`);
    else sameTree(out, packMoe, "bf16 → 4-bit pull, 3 connections, with faults");
    if (hub.state.faults.length) fail(`faults not consumed: ${hub.state.faults}`);
}

// 2. MLX source (verbatim copy) through the redirect; then generate from it.
{
    const out = path.join(tmp, "pull-next");
    const r = await run(["pull", "sluice-test/tiny-next", "--to", out, "--include", "*.md"]);
    if (r.code !== 0) fail(`MLX pull failed: ${r.stderr}`);
    else {
        // README.md came only through --include; without it the tree equals the pack's.
        if (!fs.existsSync(path.join(out, "README.md"))) fail("--include *.md did not fetch README.md");
        fs.rmSync(path.join(out, "README.md"));
        const manifest = JSON.parse(fs.readFileSync(path.join(out, "manifest.json"), "utf8"));
        if (!JSON.stringify(manifest).includes("README.md")) fail("README.md missing from the manifest");
        const pm = path.join(packNext, "manifest.json");
        fs.copyFileSync(pm, path.join(out, "manifest.json"));  // compare the rest byte for byte
        sameTree(out, packNext, "MLX verbatim pull");
        const gen = (dir) => spawnSync(bin, ["generate", dir, "-p", "Once upon a time", "-n", "12", "--temperature", "0",
            "--threads", "2", "--memory", "1G", "--quiet-stats"], { encoding: "utf8" });
        const a = gen(out), b = gen(tiny);
        if (a.status !== 0) fail(`generate on the pulled model failed: ${a.stderr}`);
        else if (a.stdout !== b.stdout) fail(`generate differs: pulled '${a.stdout}' vs source '${b.stdout}'`);
        else console.log(`[pull] generate on the pulled model: ${JSON.stringify(a.stdout.trim())}`);
    }
}

// 3. kill -9 in the middle of the download, then resume.
{
    const out = path.join(tmp, "pull-kill");
    hub.state.throttle = 50_000;  // ~4.5 s a shard: the 2 s checkpoint lands inside one
    const record = path.join(out, ".pull-progress.json");
    const child = spawn(bin, ["pull", "sluice-test/tiny-moe-bf16", "--to", out], {
        env: { ...baseEnv, HF_TOKEN: hub.token }, stdio: "ignore",
    });
    const exited = new Promise((r) => child.on("exit", r));
    // Kill once the record holds a cursor inside a shard (not only at a shard's end).
    const deadline = Date.now() + 20000;
    let cursor = 0, midShard = false;
    while (Date.now() < deadline && !midShard) {
        await new Promise((r) => setTimeout(r, 20));
        try {
            const shards = JSON.parse(fs.readFileSync(record, "utf8")).shards;
            cursor = shards.reduce((s, x) => s + x.cursor, 0);
            midShard = shards.some((x) => x.cursor > 0 && x.cursor < x.size);
        } catch { /* not written yet, or being replaced */ }
    }
    child.kill("SIGKILL");
    await exited;
    hub.state.throttle = 0;
    const total = JSON.parse(fs.readFileSync(record, "utf8")).shards.reduce((s, x) => s + x.size, 0);
    if (!midShard) fail("the pull never recorded a cursor inside a shard before the kill");
    if (fs.existsSync(path.join(out, "manifest.json"))) fail("a killed pull left a manifest");
    const served = hub.state.dataBytesServed;
    const r = await run(["pull", "sluice-test/tiny-moe-bf16", "--to", out, ...fastFlags], { HF_TOKEN: hub.token });
    if (process.env.PULL_TEST_VERBOSE) console.log(r.stderr);
    const refetched = hub.state.dataBytesServed - served;
    if (r.code !== 0) fail(`resume after kill -9 failed: ${r.stderr}`);
    else {
        if (!/resuming/.test(r.stderr)) fail(`the second run did not resume: ${r.stderr}`);
        if (refetched >= total) fail(`the resume fetched ${refetched} bytes of ${total}: it started over`);
        sameTree(out, packMoe, `kill -9 at ${cursor} of ${total} bytes, resumed (${refetched} fetched again)`);
    }
}

// 4. A persistent HTML answer to every data request: the pull fails and no HTML lands in any file.
{
    const out = path.join(tmp, "pull-html");
    hub.state.html200Always = true;
    const r = await run(["pull", "sluice-test/tiny-next", "--to", out, "--retries", "2", ...fastFlags]);
    hub.state.html200Always = false;
    if (r.code === 0) fail("a pull answered only with HTML pages succeeded");
    if (!/HTTP 200 to a range request.*Too many requests/s.test(r.stderr)) fail(`unclear error for HTML answers: ${r.stderr}`);
    if (fs.existsSync(path.join(out, "manifest.json"))) fail("manifest written after HTML answers");
    const walk = (d) => fs.readdirSync(d, { withFileTypes: true }).flatMap((e) =>
        e.isDirectory() ? walk(path.join(d, e.name)) : [path.join(d, e.name)]);
    for (const f of walk(out))
        if (fs.readFileSync(f).includes("<html")) fail(`HTML written into ${f}`);
    // The same for a small file: an HTML page served as config.json.
    hub.state.htmlFor.add("config.json");
    const c = await run(["pull", "sluice-test/tiny-next", "--to", path.join(tmp, "pull-html2")]);
    hub.state.htmlFor.clear();
    if (c.code === 0 || !/config.json.*HTML page/.test(c.stderr)) fail(`HTML config.json not rejected: ${c.stderr}`);
}

// 5. Errors users meet: a private repository without a token, unknown repository or revision.
{
    let r = await run(["pull", "sluice-test/tiny-moe-bf16", "--to", path.join(tmp, "x1"), "--retries", "1"]);
    if (r.code === 0 || !/HF_TOKEN/.test(r.stderr)) fail(`401 without a token: ${r.stderr}`);
    r = await run(["pull", "sluice-test/nope", "--to", path.join(tmp, "x2")]);
    if (r.code === 0 || !/404.*not found/.test(r.stderr)) fail(`unknown repository: ${r.stderr}`);
    r = await run(["pull", "sluice-test/tiny-next", "--revision", "v9", "--to", path.join(tmp, "x3")]);
    if (r.code === 0 || !/404/.test(r.stderr)) fail(`unknown revision: ${r.stderr}`);
    r = await run(["pull", "sluice-test/tiny-next", "--to", path.join(tmp, "x4"), "--exclude", "config.json"]);
    if (r.code === 0 || !/exclude/.test(r.stderr)) fail(`--exclude config.json accepted: ${r.stderr}`);
}

hub.close();
fs.rmSync(tmp, { recursive: true, force: true });
if (failures) {
    console.error(`[pull] ${failures} failure(s)`);
    process.exit(1);
}
console.log("[pull] all checks passed");
