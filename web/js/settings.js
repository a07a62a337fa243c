// The settings drawer: the system prompt and every sampling field /v1/chat/completions accepts
// (src/server/api.cpp: parse_common and parse_chat_request), thinking, the conversation's KV cache
// type, speculation and the API key. One table, kFields, declares each setting once: its form
// control, its range (the server's, so the browser flags what the server would refuse) and how it
// goes into the request. The form is built from the table.
//
// Persistence: the values live in localStorage under "sluice.settings" (one JSON object), except two
// that older pages stored on their own and that keep their keys: the KV choice ("sluice.kv") and
// the API key ("sluice.key", also set when the server answers 401). An empty field is not sent, so
// the server's default applies; the defaults the server reports in /props are shown as placeholders.

const kSettingsKey = "sluice.settings";
const kKvKey = "sluice.kv";
const kApiKeyKey = "sluice.key";

// kind: "number" | "integer" | "text" (a textarea) | "lines" (a textarea, one value per line) |
// "bool" | "select". `def` is the page's default ("" = the server's); `props` names the field of
// /props' default_generation_settings.params shown as the placeholder.
export const kFields = [
    { key: "system", label: "System prompt", kind: "text", def: "", note: "Sent as the first message of every conversation." },
    { key: "temperature", label: "Temperature", kind: "number", min: 0, max: 100, step: 0.05, def: "0.7", props: "temperature", note: "0 is greedy." },
    { key: "top_p", label: "Top p", kind: "number", min: 0.01, max: 1, step: 0.01, def: "", props: "top_p" },
    { key: "top_k", label: "Top k", kind: "integer", min: 0, step: 1, def: "", props: "top_k", note: "0 keeps every token." },
    { key: "min_p", label: "Min p", kind: "number", min: 0, max: 1, step: 0.01, def: "", props: "min_p" },
    { key: "repetition_penalty", label: "Repetition penalty", kind: "number", min: 0.001, max: 100, step: 0.05, def: "", props: "repeat_penalty", note: "1 is off." },
    { key: "presence_penalty", label: "Presence penalty", kind: "number", min: -2, max: 2, step: 0.1, def: "", props: "presence_penalty" },
    { key: "frequency_penalty", label: "Frequency penalty", kind: "number", min: -2, max: 2, step: 0.1, def: "", props: "frequency_penalty" },
    { key: "seed", label: "Seed", kind: "integer", step: 1, def: "", placeholder: "random", note: "The same seed and settings give the same reply." },
    { key: "max_tokens", label: "Max tokens", kind: "integer", min: 1, step: 1, def: "1024", placeholder: "context" },
    { key: "stop", label: "Stop strings", kind: "lines", def: "", note: "One per line (at most 16); \\n and \\t stand for a newline and a tab." },
    { key: "enable_thinking", label: "Thinking", kind: "bool", def: true, note: "Lets a reasoning model think first (chat_template_kwargs.enable_thinking)." },
    { key: "kv_bits", label: "KV cache bits", kind: "select", def: "",
        options: [["", "server's"], ["32", "32"], ["16", "16"], ["8", "8"], ["4", "4"], ["3", "3"]],
        note: "Bits per element of this chat's KV cache: fewer hold longer contexts; the server refuses a type its memory plan cannot hold." },
    { key: "speculative", label: "Speculative decoding", kind: "select", def: "", options: [["", "server's"], ["true", "on"], ["false", "off"]],
        note: "Drafts with the server's --draft model; greedy replies are the same text.", needsDraft: true },
    { key: "api_key", label: "API key", kind: "password", def: "", placeholder: "none", note: "For a server started with --api-key." },
];

export function loadSettings() {
    let saved = {};
    try {
        saved = JSON.parse(localStorage.getItem(kSettingsKey) || "{}") || {};
    } catch {
        saved = {};
    }
    const s = {};
    for (const f of kFields) s[f.key] = f.key in saved ? saved[f.key] : f.def;
    s.kv_bits = localStorage.getItem(kKvKey) || "";
    s.api_key = localStorage.getItem(kApiKeyKey) || "";
    return s;
}

export function saveSettings(s) {
    const rest = { ...s };
    delete rest.kv_bits;
    delete rest.api_key;
    localStorage.setItem(kSettingsKey, JSON.stringify(rest));
    localStorage.setItem(kKvKey, s.kv_bits || "");
    if (s.api_key) localStorage.setItem(kApiKeyKey, s.api_key);
    else localStorage.removeItem(kApiKeyKey);
}

// "a\nb" typed as backslash-n means a newline: stop strings are often control characters.
function unescape(line) {
    return line.replace(/\\(n|t|\\)/g, (_, c) => (c === "n" ? "\n" : c === "t" ? "\t" : "\\"));
}

// The request fields the settings add to a /v1/chat/completions body (empty fields left out).
export function requestFields(s) {
    const out = {};
    for (const f of kFields) {
        const v = s[f.key];
        if (f.kind === "number" && v !== "" && Number.isFinite(Number(v))) out[f.key] = Number(v);
        if (f.kind === "integer" && v !== "" && Number.isInteger(Number(v))) out[f.key] = Number(v);
    }
    const stops = String(s.stop || "").split("\n").filter((l) => l !== "").map(unescape);
    if (stops.length) out.stop = stops;
    out.chat_template_kwargs = { enable_thinking: !!s.enable_thinking };
    if (s.kv_bits) out.kv_bits = Number(s.kv_bits);
    if (s.speculative) out.speculative = s.speculative === "true";
    return out;
}

// Builds the form into `root`, showing `settings` and calling onChange(settings) after each edit.
// Returns {setDefaults(params), setDraft(bool), reset()}: the server's defaults as placeholders,
// whether the server speculates (the speculative field is shown only then: a server without
// --draft refuses it).
export function buildSettingsForm(root, settings, onChange) {
    const controls = new Map();
    for (const f of kFields) {
        const row = document.createElement("div");
        row.className = "field" + (f.kind === "text" || f.kind === "lines" ? " wide" : "");
        row.hidden = !!f.needsDraft;
        const id = "set-" + f.key;
        const label = document.createElement("label");
        label.htmlFor = id;
        label.textContent = f.label;
        let c;
        if (f.kind === "text" || f.kind === "lines") {
            c = document.createElement("textarea");
            c.rows = f.kind === "text" ? 4 : 2;
        } else if (f.kind === "select") {
            c = document.createElement("select");
            for (const [value, text] of f.options) c.add(new Option(text, value));
        } else {
            c = document.createElement("input");
            c.type = f.kind === "bool" ? "checkbox" : f.kind === "password" ? "password" : "number";
            if (f.kind === "number" || f.kind === "integer") {
                if (f.min !== undefined) c.min = f.min;
                if (f.max !== undefined) c.max = f.max;
                c.step = f.step;
            }
            if (f.kind === "password") c.autocomplete = "off";
        }
        c.id = id;
        if (f.placeholder) c.placeholder = f.placeholder;
        row.append(label, c);
        if (f.note) {
            const note = document.createElement("div");
            note.className = "note";
            note.textContent = f.note;
            row.append(note);
        }
        root.append(row);
        controls.set(f.key, { f, c, row });
        c.addEventListener(f.kind === "bool" || f.kind === "select" ? "change" : "input", () => {
            settings[f.key] = f.kind === "bool" ? c.checked : c.value;
            onChange(settings);
        });
    }
    const show = () => {
        for (const { f, c } of controls.values()) {
            if (f.kind === "bool") c.checked = !!settings[f.key];
            else c.value = settings[f.key] ?? "";
        }
    };
    show();
    return {
        setDefaults(params) {
            for (const { f, c } of controls.values())
                if (f.props && params && params[f.props] !== undefined) c.placeholder = "server: " + +Number(params[f.props]).toFixed(3);
        },
        setDraft(hasDraft) {
            for (const { f, row } of controls.values()) if (f.needsDraft) row.hidden = !hasDraft;
        },
        reset() {
            const key = settings.api_key;
            for (const f of kFields) settings[f.key] = f.def;
            settings.api_key = key;  // a reset of the sampling does not log out
            show();
            onChange(settings);
        },
        refresh: show,
    };
}
