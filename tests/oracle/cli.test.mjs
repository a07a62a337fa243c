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
        const ctx = run(["generate", model, "-p", "x", "-c", "99999999999"]);
        check("-c 99999999999: exit 2 naming the range", ctx.code === 2 && /\[0 - \d+\]|range/i.test(ctx.stderr), `${ctx.code} ${ctx.stderr}`);
    });

    await test("command failures exit 1", async () => {
        const detok = run(["detokenize", model, "99999"]);
        check("detokenize of an id outside the vocabulary: exit 1 naming it", detok.code === 1 && detok.stderr.includes("99999") && detok.stderr.includes("vocabulary"), `${detok.code} ${detok.stderr}`);
        const nofile = run(["generate", model, "-f", path.join(tmp, "absent.txt")]);
        check("a prompt file that is not there: exit 1 naming it", nofile.code === 1 && nofile.stderr.includes("absent.txt"), `${nofile.code} ${nofile.stderr}`);
    });

    await test("one --ctx-size default, quiet stats, verify, refused packs", async () => {
        // generate, chat, serve and info share -c: 0 (the default) is the model's context, up to 8192.
        for (const cmd of ["generate", "chat", "serve", "info"]) {
            const h = run([cmd, "--help"]);
            check(`${cmd} --help: -c defaults to 0, the model's context`, h.code === 0 && /-c,--ctx-size INT:INT in \[0 - \d+\]=0\s+Context tokens[^\n]*0: the model's context up to 8192/.test(h.stdout), h.stdout.split("\n").filter((l) => l.includes("ctx-size")).join(" | "));
        }
        const info = run(["info", model]);
        check("info MODEL: a context of the model's 4096 tokens by default", info.code === 0 && /context\s+4096 tokens/.test(info.stdout), info.stdout.split("\n").filter((l) => /context/i.test(l)).join(" | "));
        const packed = path.join(tmp, "packed");
        const pack = run(["pack", model, packed]);
        check("pack the default model", pack.code === 0, pack.stderr.slice(-300));
        const quiet = run(["generate", packed, "-p", "Once upon a time", ...greedy]);
        check("--quiet-stats: nothing on stderr, not even the memory plan", quiet.code === 0 && !quiet.stderr.includes("memory plan"), quiet.stderr.slice(-300));
        const verify = run(["verify", packed]);
        check("verify: the bar names what it checks, once", verify.code === 0 && verify.stderr.includes("verify expert files") && !verify.stderr.includes("verify verify"), verify.stderr);
        const unpacked = run(["verify", model]);
        check("verify of a checkpoint folder says it is one and how to pack it", unpacked.code === 1 && unpacked.stderr.includes("is a checkpoint") && unpacked.stderr.includes("sluice pack") && !unpacked.stderr.includes("incomplete"), unpacked.stderr);
        const streamed = run(["info", packed]);
        check("info of a packed model announces its bandwidth measurement", streamed.code === 0 && streamed.stderr.includes("measuring") && streamed.stdout.includes("speed of light"), streamed.stderr);
        const parse = (text) => {
            try {
                return JSON.parse(text);
            } catch {
                return null;
            }
        };
        const vj = parse(run(["verify", packed, "--json"]).stdout);
        check("verify --json: ok, no problems", vj !== null && vj.ok === true && Array.isArray(vj.problems) && vj.problems.length === 0, JSON.stringify(vj));
        const bad = run(["verify", model, "--json"]);
        const bj = parse(bad.stdout);
        check("verify --json of a checkpoint: ok false with the error, exit 1", bad.code === 1 && bj !== null && bj.ok === false && /checkpoint/.test(bj.error), bad.stdout + bad.stderr);
        const ij = parse(run(["info", model, "--json"]).stdout);
        check("info --json: architecture and plan", ij !== null && ij.family === "qwen3_next" && ij.layers > 0 && ij.plan && ij.plan.context_tokens === 4096 && typeof ij.plan.kv_bytes_per_token === "number", JSON.stringify(ij).slice(0, 300));
        const pj = parse(run(["info", packed, "--json", "--no-measure"]).stdout);
        check("info --json of a packed model: streaming plan", pj !== null && pj.plan.streaming === true && pj.plan.expert_cache_slots > 0, JSON.stringify(pj).slice(0, 300));
        const cj = parse(run(["info", path.join(model, "config.json"), "--json", "--memory", "1G", "--kv-bits", "3"]).stdout);
        check("info CONFIG.json --json: planned without weights", cj !== null && cj.weights_read === false && cj.plan.kv_type === "q3" && cj.plan.max_context_tokens > 0, JSON.stringify(cj).slice(0, 300));
        const busy = path.join(tmp, "busy");
        fs.mkdirSync(busy);
        fs.writeFileSync(path.join(busy, "notes.txt"), "mine");
        const refused = run(["pack", model, busy]);
        check("a refused pack leaves the folder as it was (no empty experts/)", refused.code === 1 && refused.stderr.includes("not empty") && fs.readdirSync(busy).join(",") === "notes.txt", `${refused.code} ${fs.readdirSync(busy)} ${refused.stderr}`);
    });

    await test("shell completions and the man page, from the same definitions", async () => {
        const help = run(["--help"]).stdout;
        const commands = [...help.matchAll(/^  (\w+)\s{2,}/gm)].map((m) => m[1]).filter((c) => !["-h", "-v"].includes(c));
        check("sluice --help lists the commands", commands.includes("generate") && commands.includes("completions") && commands.length > 10, commands.join(" "));
        const bash = run(["completions", "bash"]);
        const script = path.join(tmp, "sluice.bash");
        fs.writeFileSync(script, bash.stdout);
        const complete = (line) => {
            const r = spawnSync("bash", ["-c", `source ${script}; COMP_WORDS=(${line}); COMP_CWORD=$((\${#COMP_WORDS[@]} - 1)); _sluice; printf '%s\\n' "\${COMPREPLY[@]}"`], { encoding: "utf8" });
            return { code: r.status, words: r.stdout.split("\n").filter(Boolean), stderr: r.stderr };
        };
        check("bash: the script parses", spawnSync("bash", ["-n", script]).status === 0, bash.stderr);
        const first = complete("sluice gen");
        check("bash: 'sluice gen<TAB>' completes to generate", first.code === 0 && first.words.join(" ") === "generate", JSON.stringify(first));
        const flag = complete("sluice generate --ctx");
        check("bash: 'sluice generate --ctx<TAB>' completes to --ctx-size", flag.words.join(" ") === "--ctx-size", JSON.stringify(flag));
        const genHelp = run(["generate", "--help"]).stdout;
        const genFlags = [...genHelp.matchAll(/(?:^|[ ,])(--[a-z][a-z0-9-]*)/gm)].map((m) => m[1]);
        const all = complete("sluice generate --");
        const absent = [...new Set(genFlags)].filter((f) => !all.words.includes(f));
        check("bash: every flag generate --help shows is completed", genFlags.length > 20 && absent.length === 0, absent.join(" "));
        const cmds = complete("sluice ''");
        check("bash: every command is completed", commands.every((c) => cmds.words.includes(c)), commands.filter((c) => !cmds.words.includes(c)).join(" "));
        for (const shell of ["zsh", "fish"]) {
            const out = run(["completions", shell]);
            const file = path.join(tmp, `sluice.${shell}`);
            fs.writeFileSync(file, out.stdout);
            const has = spawnSync("sh", ["-c", `command -v ${shell}`]).status === 0;
            const syntax = has ? spawnSync(shell, ["-n", file], { encoding: "utf8" }) : { status: 0, stderr: "" };
            check(`${shell}: the script parses (${has ? shell + " -n" : shell + " not installed"}) and names every command`, out.code === 0 && syntax.status === 0 && commands.every((c) => out.stdout.includes(c)), syntax.stderr);
        }
        const fishHelp = run(["completions", "fish"]).stdout;
        check("fish: generate's --ctx-size with its -c and help", /-n '__fish_seen_subcommand_from generate' -s c -l ctx-size -r -d 'Context tokens/.test(fishHelp), fishHelp.split("\n").filter((l) => l.includes("ctx-size")).slice(0, 2).join(" | "));
        const man = run(["man"]);
        const page = path.join(tmp, "sluice.1");
        fs.writeFileSync(page, man.stdout);
        const lint = spawnSync("mandoc", ["-Tlint", "-Wwarning", page], { encoding: "utf8" });
        check("man: mandoc -Tlint finds no warning", man.code === 0 && (lint.error ? false : lint.status === 0 && lint.stdout + lint.stderr === ""), lint.error ? String(lint.error) : lint.stdout + lint.stderr);
        check("man: a section per command, and generate's flags", commands.every((c) => man.stdout.includes(`.SS "${c}"`)) && man.stdout.includes("\\fB\\-\\-ctx\\-size\\fR") && man.stdout.includes(".SH EXIT STATUS"), man.stdout.slice(0, 200));
    });

    await test("bench sweeps as llama-bench does", async () => {
        const sweep = run(["bench", model, "-p", "8,16", "-n", "2", "-r", "1", "--json", path.join(tmp, "sweep.json")]);
        const rows = sweep.stdout.split("\n").filter((l) => l.startsWith("| tiny-next"));
        check("-p 8,16 -n 2: a table row per test (pp8, tg2 @ d8, pp16, tg2 @ d16)", sweep.code === 0 && rows.length === 4 && /pp8 \(chunk 256\) \| [\d.]+ ± /.test(rows[0]) && rows[3].includes("tg2 @ d16"), sweep.stdout.slice(-600) + sweep.stderr.slice(-300));
        let rec = null;
        try {
            rec = JSON.parse(fs.readFileSync(path.join(tmp, "sweep.json"), "utf8"));
        } catch {}
        check("--json: one record per combination", rec !== null && rec.sweep.length === 2 && rec.sweep[1].prompt_tokens === 16 && rec.sweep[1].decode_tok_s.mean > 0, JSON.stringify(rec).slice(0, 200));
        const chunks = run(["bench", model, "-p", "16", "-n", "0", "-r", "1", "--prefill-chunk", "4,16"]);
        check("--prefill-chunk 4,16: one prompt row per chunk", chunks.code === 0 && chunks.stdout.includes("pp16 (chunk 4)") && chunks.stdout.includes("pp16 (chunk 16)"), chunks.stdout.slice(-400) + chunks.stderr.slice(-300));
        const mixed = run(["bench", model, "-p", "8,16", "--history", "32"]);
        check("a sweep with another mode: exit 1 naming why", mixed.code === 1 && mixed.stderr.includes("default measurement"), mixed.stderr);
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
