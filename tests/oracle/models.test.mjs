// models.test.mjs — models by name (issue 23): a MODEL argument that is not a path is a Hugging
// Face id ORG/NAME[@REV], found in sluice's models folder ($SLUICE_MODELS) or the Hugging Face
// cache ($HF_HOME/hub), pulled with --pull; `list`, `show`, `rm`; `pull` into the models folder;
// the token `hf auth login` saved. Everything lives in one temp folder: a fake HF cache laid out
// as huggingface_hub writes it (blobs named by hash, snapshots of symlinks, refs holding the
// commit) and the mock Hub of pull.test.mjs.
import { execFile } from "node:child_process";
import crypto from "node:crypto";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { reshard, startMockHub } from "./mock_hub.mjs";
import { suite } from "./serve_util.mjs";

const bin = process.env.SLUICE_BIN;
const src = process.env.SLUICE_SOURCE_DIR;
if (!bin || !src) {
    console.error("[models] SLUICE_BIN and SLUICE_SOURCE_DIR must be set");
    process.exit(2);
}
const { check, test, finish } = suite("models");
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), "sluice-models-"));
const tiny = path.join(src, "models", "tiny-next");
const hfHome = path.join(tmp, "hf");
const modelsDir = path.join(tmp, "models");
const env = { ...process.env, SLUICE_MODELS: modelsDir, HF_HOME: hfHome, HF_TOKEN: "", HF_HUB_CACHE: "", HF_TOKEN_PATH: "" };
const run = (args, extra = {}) => new Promise((resolve) => {
    execFile(bin, args, { env: { ...env, ...extra }, maxBuffer: 1 << 24 }, (err, stdout, stderr) =>
        resolve({ code: err ? err.code ?? 1 : 0, stdout, stderr }));
});
const gen = (model, ...more) => run(["generate", model, "-p", "Once upon a time", "-n", "12", "--temperature", "0", "--quiet-stats", ...more]);

// A snapshot of models/tiny-next in the fake HF cache, as huggingface_hub lays it out.
const commitA = "a".repeat(40);
const commitB = "b".repeat(40);
function cacheSnapshot(repo, commit, refs) {
    const root = path.join(hfHome, "hub", "models--" + repo.replace("/", "--"));
    const snap = path.join(root, "snapshots", commit);
    fs.mkdirSync(path.join(root, "blobs"), { recursive: true });
    fs.mkdirSync(snap, { recursive: true });
    fs.mkdirSync(path.join(root, "refs"), { recursive: true });
    for (const f of fs.readdirSync(tiny)) {
        const bytes = fs.readFileSync(path.join(tiny, f));
        const blob = crypto.createHash("sha256").update(bytes).digest("hex");
        fs.writeFileSync(path.join(root, "blobs", blob), bytes);
        fs.symlinkSync(path.join("..", "..", "blobs", blob), path.join(snap, f));
    }
    for (const ref of refs) fs.writeFileSync(path.join(root, "refs", ref), commit);
}

try {
    const byPath = await gen(tiny);
    check("generate by path", byPath.code === 0 && byPath.stdout.length > 0, byPath.stderr.slice(-300));

    await test("not installed", async () => {
        const r = await gen("sluice-test/tiny");
        check("an id that is nowhere: exit 1 naming both places and the fix",
            r.code === 1 && r.stderr.includes(modelsDir) && r.stderr.includes(path.join(hfHome, "hub")) && r.stderr.includes("sluice pull sluice-test/tiny") &&
                r.stderr.includes("--pull"), r.stderr);
        const bad = await gen("not/a/model");
        check("neither a path nor an id: exit 1 saying so", bad.code === 1 && bad.stderr.includes("nor a model id"), bad.stderr);
    });

    await test("the Hugging Face cache", async () => {
        cacheSnapshot("sluice-test/tiny", commitA, ["main"]);
        cacheSnapshot("sluice-test/tiny", commitB, ["v2"]);
        for (const id of ["sluice-test/tiny", "sluice-test/tiny@v2", `sluice-test/tiny@${commitA}`]) {
            const r = await gen(id);
            check(`${id}: resolved in the HF cache, the same greedy text as by path`, r.code === 0 && r.stdout === byPath.stdout && r.stderr.includes("snapshots"),
                `${r.code} ${r.stderr.slice(-300)}`);
        }
        // Packed once beside the models folder (per snapshot), reused after; --no-pack loads it as it is.
        const packedA = path.join(modelsDir, ".hf-packed", `sluice-test--tiny@${commitA}`);
        check("a cached checkpoint is packed once, per snapshot", fs.existsSync(path.join(packedA, "manifest.json")) &&
            fs.existsSync(path.join(modelsDir, ".hf-packed", `sluice-test--tiny@${commitB}`, "manifest.json")), fs.readdirSync(modelsDir).join(","));
        const again = await gen("sluice-test/tiny");
        check("the packed layout is reused", again.code === 0 && again.stdout === byPath.stdout && again.stderr.includes("its packed layout") &&
            !again.stderr.includes("packing it once"), again.stderr.slice(-300));
        const raw = await gen("sluice-test/tiny", "--no-pack");
        check("--no-pack loads the checkpoint as it is", raw.code === 0 && raw.stdout === byPath.stdout && !raw.stderr.includes("packed layout"),
            raw.stderr.slice(-300));
        const commit = (await run(["show", "sluice-test/tiny@v2", "--json"])).stdout;
        let shown = {};
        try {
            shown = JSON.parse(commit);
        } catch {}
        check("show --json: where, folder and the commit of the ref", shown.where === "hf-cache" && shown.commit === commitB && shown.dir?.endsWith(commitB), commit);
        const missing = await gen("sluice-test/tiny@v3");
        check("an unknown ref is not installed", missing.code === 1 && missing.stderr.includes("not installed"), missing.stderr);
        const rm = await run(["rm", "sluice-test/tiny"]);
        check("rm refuses the HF cache (huggingface_hub's to manage)", rm.code === 1 && rm.stderr.includes("hf cache delete") &&
            fs.existsSync(path.join(hfHome, "hub", "models--sluice-test--tiny")), rm.stderr);
    });

    // The mock Hub: a public and a private copy of tiny-next.
    const repoDir = path.join(tmp, "repo-next");
    fs.mkdirSync(repoDir);
    for (const f of ["config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json"])
        fs.copyFileSync(path.join(tiny, f), path.join(repoDir, f));
    reshard(path.join(tiny, "model.safetensors"), repoDir, 2);
    const hub = await startMockHub({
        "sluice-test/tiny-next": { dir: repoDir, sha: "2".repeat(40) },
        "sluice-test/tiny-private": { dir: repoDir, private: true, sha: "3".repeat(40) },
    });
    const hubEnv = { HF_ENDPOINT: hub.endpoint };
    try {
        await test("--pull", async () => {
            const r = await run(["generate", "sluice-test/tiny-next", "--pull", "-p", "Once upon a time", "-n", "12", "--temperature", "0", "--quiet-stats"], hubEnv);
            const dir = path.join(modelsDir, "sluice-test", "tiny-next");
            check("generate ID --pull: pulled into the models folder, then generated", r.code === 0 && fs.existsSync(path.join(dir, "manifest.json")) && r.stdout.length > 0,
                `${r.code} ${r.stderr.slice(-400)}`);
            const again = await run(["generate", "sluice-test/tiny-next", "-p", "Once upon a time", "-n", "12", "--temperature", "0", "--quiet-stats"],
                { HF_ENDPOINT: "http://127.0.0.1:9" });
            check("  the next run finds it installed (no Hub needed), the same text", again.code === 0 && again.stdout === r.stdout, `${again.code} ${again.stderr.slice(-300)}`);
        });

        await test("pull defaults and the saved token", async () => {
            const denied = await run(["pull", "sluice-test/tiny-private"], hubEnv);
            check("a private repository without a token: refused", denied.code !== 0, denied.stderr.slice(-200));
            fs.mkdirSync(hfHome, { recursive: true });
            fs.writeFileSync(path.join(hfHome, "token"), hub.token + "\n");
            const r = await run(["pull", "sluice-test/tiny-private"], hubEnv);
            check("with the token `hf auth login` saved ($HF_HOME/token): pulled into the models folder",
                r.code === 0 && fs.existsSync(path.join(modelsDir, "sluice-test", "tiny-private", "manifest.json")), `${r.code} ${r.stderr.slice(-300)}`);
        });

        await test("list and rm", async () => {
            const l = await run(["list", "--json"]);
            let models = [];
            try {
                models = JSON.parse(l.stdout).models;
            } catch {}
            const ids = models.map((m) => `${m.id} ${m.where}`).sort();
            check("list --json: both pulls and both cached refs", JSON.stringify(ids) === JSON.stringify([
                "sluice-test/tiny hf-cache", "sluice-test/tiny-next models", "sluice-test/tiny-private models", "sluice-test/tiny@v2 hf-cache"].sort()), l.stdout.slice(0, 400));
            const pulled = models.find((m) => m.id === "sluice-test/tiny-next");
            check("  a pull's commit, size and completeness", pulled?.commit === "2".repeat(40) && pulled.bytes > 1e6 && pulled.complete === true, JSON.stringify(pulled));
            const text = await run(["list"]);
            check("list: a table", text.code === 0 && text.stdout.startsWith("MODEL") && text.stdout.includes("tiny-private"), text.stdout);
            const rm = await run(["rm", "sluice-test/tiny-private"]);
            check("rm: deletes the pull", rm.code === 0 && !fs.existsSync(path.join(modelsDir, "sluice-test", "tiny-private")), rm.stderr);
            const rm2 = await run(["rm", "sluice-test/tiny-private"]);
            check("rm of what is not there: exit 1", rm2.code === 1 && rm2.stderr.includes("not in sluice's models folder"), rm2.stderr);
        });
    } finally {
        await hub.close();
    }
} catch (e) {
    check("suite", false, `threw ${e && e.stack ? e.stack : e}`);
} finally {
    fs.rmSync(tmp, { recursive: true, force: true });
}
finish();
