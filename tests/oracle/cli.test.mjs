// cli.test.mjs — the command line's habits (issue 23): the short flags people type (-m, -c, -t,
// -n, -p, -f), one spelling per concept, "-" for standard input and output, range checks that
// name the range, documented exit codes (0 ok, 1 the command failed, 2 usage), llama.cpp flags
// answered with what sluice takes instead, and a --version that says what the build is.
import { spawnSync } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { suite } from "./serve_util.mjs";

const bin = process.env.SLUICE_BIN;
const src = process.env.SLUICE_SOURCE_DIR;
if (!bin || !src) {
    console.error("[cli] SLUICE_BIN and SLUICE_SOURCE_DIR must be set");
    process.exit(2);
}
const { check, test, finish } = suite("cli");
const model = path.join(src, "models", "tiny-next");
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), "sluice-cli-"));
const run = (args, input) => {
    const r = spawnSync(bin, args, { input, encoding: "utf8", maxBuffer: 1 << 24, env: { ...process.env, SLUICE_MODELS: path.join(tmp, "models"), HF_HOME: path.join(tmp, "hf") } });
    return { code: r.status, stdout: r.stdout, stderr: r.stderr };
};
const greedy = ["-n", "8", "--temperature", "0", "--quiet-stats"];

try {
    await test("short flags and stdin", async () => {
        const base = run(["generate", model, "-p", "Once upon a time", ...greedy]);
        check("generate MODEL -p: exit 0", base.code === 0 && base.stdout.length > 0, base.stderr.slice(-300));
        const m = run(["generate", "-m", model, "-p", "Once upon a time", "-c", "512", "-t", "2", ...greedy]);
        check("-m MODEL -c 512 -t 2: the same text", m.code === 0 && m.stdout === base.stdout, m.stderr.slice(-300));
        const stdin = run(["generate", model, "-f", "-", ...greedy], "Once upon a time");
        check("-f - reads the prompt from standard input", stdin.code === 0 && stdin.stdout === base.stdout, stdin.stderr.slice(-300));
        const stats = run(["generate", model, "-p", "Once upon a time", "-n", "4", "--temperature", "0", "--stats-json", "-"]);
        const json = stats.stdout.slice(stats.stdout.indexOf("{"));
        let ok = false;
        try {
            ok = JSON.parse(json).generated_tokens !== undefined || Object.keys(JSON.parse(json)).length > 0;
        } catch {}
        check("--stats-json - writes the JSON to standard output (no file named '-')", stats.code === 0 && ok && !fs.existsSync("-"), stats.stdout.slice(0, 300));
        const msgs = JSON.stringify([{ role: "user", content: "Hi" }]);
        const tpl = run(["template", model, "--messages", "-"], msgs);
        check("template --messages - reads standard input", tpl.code === 0 && tpl.stdout.includes("Hi") && tpl.stdout.includes("<|im_start|>"), tpl.stderr.slice(-200));
    });

    await test("usage errors exit 2 and name the problem", async () => {
        const ngl = run(["generate", model, "-p", "x", "-ngl", "99"]);
        check("-ngl 99: exit 2 pointing at --device cuda", ngl.code === 2 && ngl.stderr.includes("--device cuda") && !ngl.stderr.includes("Could not convert"), ngl.stderr);
        const port = run(["serve", model, "--port", "99999"]);
        check("serve --port 99999: exit 2 naming the range", port.code === 2 && port.stderr.includes("65535"), port.stderr);
        const unknown = run(["generate", model, "--no-such-flag"]);
        check("an unknown flag: exit 2", unknown.code === 2, `${unknown.code} ${unknown.stderr}`);
        const missing = run(["generate"]);
        check("a missing model: exit 2", missing.code === 2 && /model/i.test(missing.stderr), `${missing.code} ${missing.stderr}`);
        const ctx = run(["generate", model, "-p", "x", "-c", "0"]);
        check("-c 0: exit 2 naming the range", ctx.code === 2 && /\[1 - \d+\]|1 and|range/i.test(ctx.stderr), `${ctx.code} ${ctx.stderr}`);
    });

    await test("command failures exit 1", async () => {
        const detok = run(["detokenize", model, "99999"]);
        check("detokenize of an id outside the vocabulary: exit 1 naming it", detok.code === 1 && detok.stderr.includes("99999") && detok.stderr.includes("vocabulary"), `${detok.code} ${detok.stderr}`);
        const nofile = run(["generate", model, "-f", path.join(tmp, "absent.txt")]);
        check("a prompt file that is not there: exit 1 naming it", nofile.code === 1 && nofile.stderr.includes("absent.txt"), `${nofile.code} ${nofile.stderr}`);
    });

    await test("version", async () => {
        const v = run(["--version"]);
        check("--version: version, build type, CPU kernels, CUDA", v.code === 0 && /^sluice \d+\.\d+\.\d+ \(.*CPU kernels (avx512|avx2|scalar).*(CUDA|no CUDA).*\)/.test(v.stdout.trim()), v.stdout);
        const j = run(["version", "--json"]);
        let info = {};
        try {
            info = JSON.parse(j.stdout);
        } catch {}
        check("version --json", j.code === 0 && typeof info.version === "string" && typeof info.cuda === "boolean" && typeof info.cpu_kernels === "string", j.stdout);
    });
} catch (e) {
    check("suite", false, `threw ${e && e.stack ? e.stack : e}`);
} finally {
    fs.rmSync(tmp, { recursive: true, force: true });
}
finish();
