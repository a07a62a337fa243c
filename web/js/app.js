// The chat page: wires the sidebar (conversations), the chat (messages, streaming, edit /
// regenerate / branch), the settings and resources drawers to the modules that do the work —
// store.js (conversations in localStorage, export/import), settings.js (the request's fields),
// chat.js (one streamed request), markdown.js (rendering untrusted replies), resources.js (/health).
//
// State lives in one object, `state`, and the DOM is redrawn from it: the sidebar and the message
// list are rebuilt whole on each change (tens of elements), except the reply being streamed, whose
// element is updated in place at most once per animation frame. One reply streams at a time;
// while it does, the conversation cannot be switched or changed (the reply object belongs to it),
// and Stop aborts the request (the server frees the session) keeping the partial reply.

import { streamChat } from "./chat.js";
import { copyText, renderMarkdown } from "./markdown.js";
import { Monitor, statusLine } from "./resources.js";
import { buildSettingsForm, loadSettings, requestFields, saveSettings } from "./settings.js";
import {
    exportJson, exportName, loadConversations, loadCurrentId, matches, newConversation, parseImport, saveConversations, titleFrom,
} from "./store.js";

const $ = (id) => document.getElementById(id);
const kSidebarKey = "sluice.sidebar";  // "collapsed" on a wide screen when the user hid it
const phone = window.matchMedia("(max-width: 760px)");

const state = {
    convs: loadConversations(),
    current: null,      // the conversation shown
    controller: null,   // AbortController of the reply streaming now, or null
    streaming: null,    // that reply (a message of state.current), or null
    settings: loadSettings(),
    modelId: "",
    hasDraft: false,    // the server runs with --draft (/health's stats.speculative)
    streamingPlan: false,  // the server streams experts from disk (/health's memory_plan.streaming)
    search: "",
};

function apiHeaders() {
    const h = { "Content-Type": "application/json" };
    if (state.settings.api_key) h.Authorization = "Bearer " + state.settings.api_key;
    return h;
}

function persist() {
    const err = saveConversations(state.convs, state.current?.id);
    if (err) notify(err, true);
}

// A conversation that changed moves to the top of the list.
function touch(conv) {
    conv.updated = Date.now();
    const i = state.convs.indexOf(conv);
    if (i > 0) {
        state.convs.splice(i, 1);
        state.convs.unshift(conv);
    }
}

let noticeTimer = 0;
function notify(text, isError = false) {
    const el = $("notice");
    el.textContent = text;
    el.className = isError ? "error" : "";
    el.hidden = false;
    clearTimeout(noticeTimer);
    noticeTimer = setTimeout(() => (el.hidden = true), isError ? 12000 : 5000);
}

function button(text, act, title) {
    const b = document.createElement("button");
    b.type = "button";
    b.textContent = text;
    b.dataset.act = act;
    if (title) b.title = title;
    return b;
}

// ---- sidebar: layout ----
function setPhoneSidebar(open) {
    document.body.classList.toggle("sidebar-open", open);
    $("backdrop").hidden = !open;
}
function toggleSidebar() {
    if (phone.matches) return setPhoneSidebar(!document.body.classList.contains("sidebar-open"));
    const collapsed = document.body.classList.toggle("sidebar-collapsed");
    localStorage.setItem(kSidebarKey, collapsed ? "collapsed" : "open");
}
function hideSidebar() {
    if (phone.matches) setPhoneSidebar(false);
    else if (!document.body.classList.contains("sidebar-collapsed")) toggleSidebar();
}

// ---- sidebar: the conversation list ----
function renderSidebar() {
    const list = state.convs.filter((c) => matches(c, state.search));
    const items = list.map((c) => {
        const d = document.createElement("div");
        d.className = "conv" + (c === state.current ? " active" : "");
        d.dataset.id = c.id;
        const title = document.createElement("span");
        title.className = "title";
        title.textContent = c.title;
        title.title = c.title;
        d.append(title, button("✎", "rename", "Rename"), button("⤓", "export", "Export as JSON"), button("✕", "delete", "Delete"));
        return d;
    });
    if (!items.length) {
        const empty = document.createElement("div");
        empty.className = "empty";
        empty.textContent = "No conversation matches.";
        items.push(empty);
    }
    $("convs").replaceChildren(...items);
}

function select(conv) {
    if (state.controller) return;
    state.current = conv;
    persist();
    renderSidebar();
    renderLog();
    if (phone.matches) setPhoneSidebar(false);
}

function newChat() {
    if (state.controller) return;
    if (state.current && state.current.messages.length === 0) {
        if (phone.matches) setPhoneSidebar(false);
        $("input").focus();
        return;
    }
    const c = newConversation();
    state.convs.unshift(c);
    select(c);
    $("input").focus();
}

function startRename(item, conv) {
    const input = document.createElement("input");
    input.className = "rename-input";
    input.value = conv.title;
    input.setAttribute("aria-label", "New title");
    item.querySelector(".title").replaceWith(input);
    input.focus();
    input.select();
    let done = false;
    const finish = (save) => {
        if (done) return;
        done = true;
        const title = input.value.trim();
        if (save && title) {
            conv.title = title.slice(0, 200);
            persist();
        }
        renderSidebar();
    };
    input.addEventListener("keydown", (e) => {
        if (e.key === "Enter") finish(true);
        if (e.key === "Escape") finish(false);
        e.stopPropagation();
    });
    input.addEventListener("blur", () => finish(true));
    input.addEventListener("click", (e) => e.stopPropagation());
}

// Delete asks twice: the first click arms the button for 3 s, the second deletes.
function deleteConv(btn, conv) {
    if (!btn.classList.contains("armed")) {
        btn.classList.add("armed");
        btn.textContent = "Delete?";
        setTimeout(() => {
            btn.classList.remove("armed");
            btn.textContent = "✕";
        }, 3000);
        return;
    }
    if (state.controller && conv === state.current) return;
    state.convs = state.convs.filter((c) => c !== conv);
    if (conv === state.current) state.current = state.convs[0] || null;
    ensureCurrent();
    persist();
    renderSidebar();
    renderLog();
}

// With no conversation left (or none stored yet), a new empty one becomes current; true when made.
function ensureCurrent() {
    if (state.current) return false;
    state.current = newConversation();
    state.convs.unshift(state.current);
    return true;
}

function download(name, text) {
    const url = URL.createObjectURL(new Blob([text], { type: "application/json" }));
    const a = document.createElement("a");
    a.href = url;
    a.download = name;
    document.body.append(a);
    a.click();
    a.remove();
    setTimeout(() => URL.revokeObjectURL(url), 10000);
}

async function importFile(file) {
    try {
        const imported = parseImport(await file.text());
        state.convs.unshift(...imported);
        if (!state.controller) state.current = imported[0];  // a reply streaming keeps its conversation shown
        persist();
        renderSidebar();
        renderLog();
        notify(`Imported ${imported.length} conversation${imported.length === 1 ? "" : "s"} from ${file.name}.`);
    } catch (e) {
        notify(`Could not import ${file.name}: ${e.message}`, true);
    }
}

// ---- messages ----
function statsText(s) {
    if (!s) return "";
    const parts = [];
    if (s.completion_tokens !== undefined) parts.push(`${s.completion_tokens} tokens`);
    if (s.tok_s) parts.push(`${s.tok_s.toFixed(1)} tok/s`);
    if (s.ttft_ms !== undefined) parts.push(`TTFT ${s.ttft_ms >= 1000 ? (s.ttft_ms / 1000).toFixed(2) + " s" : Math.round(s.ttft_ms) + " ms"}`);
    if (s.prompt_tokens !== undefined) parts.push(`prompt ${s.prompt_tokens}` + (s.cached_tokens ? ` (${s.cached_tokens} cached)` : ""));
    if (s.draft_tokens) parts.push(`${s.accepted_tokens}/${s.draft_tokens} drafts kept`);
    if (s.expert_hits !== undefined) {
        const n = s.expert_hits + s.expert_misses;
        parts.push(`experts ${n ? ((100 * s.expert_hits) / n).toFixed(0) : 0}% hits (${s.expert_hits}/${n})`);
    }
    if (s.cut) parts.push("cut at max tokens");
    if (s.stopped) parts.push(`stopped after ${(s.duration_ms / 1000).toFixed(1)} s`);
    return parts.join(" · ");
}

// Fills a message element's reasoning, body, error and stats from `m` (a reply being streamed is
// refreshed through here; its reasoning keeps its open/closed state).
function fillMessage(el, m) {
    let det = el.querySelector("details.reasoning");
    if (m.reasoning && !det) {
        det = document.createElement("details");
        det.className = "reasoning";
        const summary = document.createElement("summary");
        det.append(summary, document.createElement("div"));
        el.querySelector(".body").before(det);
    }
    if (det) {
        det.querySelector("summary").textContent = m === state.streaming && !m.content ? "Thinking…" : "Reasoning";
        det.querySelector("div").textContent = m.reasoning;
    }
    const body = el.querySelector(".body");
    if (m.role === "assistant") body.replaceChildren(renderMarkdown(m.content || ""));
    else body.textContent = m.content;
    // A reply waiting for its first token (queued, or prefilling a long prompt) shows a pulse.
    body.classList.toggle("pending", m === state.streaming && !m.content && !m.reasoning);
    let err = el.querySelector(".error");
    if (m.error && !err) {
        err = document.createElement("div");
        err.className = "error";
        body.after(err);
    }
    if (err) err.textContent = m.error || "";
    const stats = el.querySelector(".stats");
    if (stats) stats.textContent = statsText(m.stats);
}

function messageEl(m, i, isLast) {
    const d = document.createElement("div");
    d.className = "msg " + m.role;
    d.dataset.index = i;
    const head = document.createElement("div");
    head.className = "msg-head";
    const role = document.createElement("span");
    role.className = "role";
    role.textContent = m.role;
    const actions = document.createElement("span");
    actions.className = "actions";
    actions.append(button("Copy", "copy", "Copy the message"));
    if (m.role === "user") actions.append(button("Edit", "edit", "Edit and send again (drops the replies after it)"));
    if (m.role === "user" && isLast) actions.append(button("Reply", "reply", "Ask for a reply to this message"));
    if (m.role === "assistant" && isLast) actions.append(button("Regenerate", "regen", "Ask for another reply"));
    if (m.role !== "system") actions.append(button("Branch", "branch", "Start a new conversation from here"));
    head.append(role, actions);
    const body = document.createElement("div");
    body.className = "body";
    d.append(head, body);
    if (m.role === "assistant") {
        const stats = document.createElement("div");
        stats.className = "stats";
        d.append(stats);
    }
    fillMessage(d, m);
    return d;
}

function renderLog() {
    const log = $("log");
    const msgs = state.current.messages;
    if (!msgs.length) {
        const w = document.createElement("div");
        w.className = "welcome";
        w.textContent = state.modelId ? `Ask ${state.modelId} anything.` : "Ask anything.";
        log.replaceChildren(w);
        return;
    }
    log.replaceChildren(...msgs.map((m, i) => messageEl(m, i, i === msgs.length - 1)));
    log.scrollTop = log.scrollHeight;
}

function startEdit(el, i) {
    const m = state.current.messages[i];
    const box = document.createElement("div");
    box.className = "edit-box";
    const ta = document.createElement("textarea");
    ta.value = m.content;
    ta.setAttribute("aria-label", "Edit the message");
    const row = document.createElement("div");
    const cancel = button("Cancel", "edit-cancel");
    const save = button("Send", "edit-send");
    save.className = "primary";
    row.append(cancel, save);
    box.append(ta, row);
    el.querySelector(".body").replaceWith(box);
    ta.focus();
    cancel.onclick = () => renderLog();
    save.onclick = () => {
        const text = ta.value.trim();
        if (!text || state.controller) return;
        m.content = text;
        state.current.messages.length = i + 1;  // the replies after it answered the old text
        if (i === state.current.messages.findIndex((x) => x.role === "user")) state.current.title = titleFrom(text);
        generate();
    };
    ta.addEventListener("keydown", (e) => {
        if (e.key === "Enter" && !e.shiftKey) {
            e.preventDefault();
            save.click();
        }
        if (e.key === "Escape") cancel.click();
    });
}

// A new conversation with the messages before message i. Branching at a reply keeps the reply;
// branching at a question puts the question in the input box, to be reworded and sent.
function branch(i) {
    const src = state.current;
    const m = src.messages[i];
    const keep = m.role === "assistant" ? i + 1 : i;
    const c = newConversation("Branch: " + src.title, structuredClone(src.messages.slice(0, keep)));
    state.convs.unshift(c);
    select(c);
    if (m.role === "user") {
        $("input").value = m.content;
        $("input").focus();
    }
}

function onLogClick(e) {
    const b = e.target.closest("button");
    if (!b) return;
    if (b.classList.contains("copy")) {  // a code block's Copy button
        const code = b.closest(".code-block").querySelector("code").textContent;
        copyText(code).then((ok) => {
            b.textContent = ok ? "Copied" : "Copy failed";
            setTimeout(() => (b.textContent = "Copy"), 1500);
        });
        return;
    }
    const el = b.closest(".msg");
    if (!el || !b.dataset.act || state.controller) return;
    const i = Number(el.dataset.index);
    const m = state.current.messages[i];
    if (b.dataset.act === "copy") {
        copyText(m.content).then((ok) => {
            b.textContent = ok ? "Copied" : "Copy failed";
            setTimeout(() => (b.textContent = "Copy"), 1500);
        });
    } else if (b.dataset.act === "edit") startEdit(el, i);
    else if (b.dataset.act === "branch") branch(i);
    else if (b.dataset.act === "regen") {
        state.current.messages.length = i;  // drop the last reply
        generate();
    } else if (b.dataset.act === "reply") generate();
}

// ---- streaming a reply ----
function setBusy(busy) {
    $("send").hidden = busy;
    $("stop").hidden = !busy;
    document.body.classList.toggle("busy", busy);
}

// The request's messages: the settings' system prompt first unless the conversation has its own,
// then every message but failed empty replies.
function requestMessages(conv) {
    const out = [];
    if (state.settings.system.trim() && conv.messages[0]?.role !== "system") out.push({ role: "system", content: state.settings.system });
    for (const m of conv.messages) {
        if (m.role === "assistant" && m.error && !m.content) continue;
        out.push({ role: m.role, content: m.content });
    }
    return out;
}

// Generates a reply to the current conversation (which ends with the user's message).
async function generate() {
    const conv = state.current;
    const body = {
        model: state.modelId || undefined,
        messages: requestMessages(conv),
        stream: true,
        stream_options: { include_usage: true },
        ...requestFields(state.settings),
    };
    if (!state.hasDraft) delete body.speculative;  // a server without --draft refuses it
    const reply = { role: "assistant", content: "", reasoning: "" };
    conv.messages.push(reply);
    touch(conv);
    state.controller = new AbortController();
    state.streaming = reply;
    setBusy(true);
    renderSidebar();
    renderLog();
    const el = $("log").lastElementChild;
    const log = $("log");
    let frame = 0;
    const redraw = () => {
        frame = 0;
        const atBottom = log.scrollHeight - log.scrollTop - log.clientHeight < 60;
        fillMessage(el, reply);
        if (atBottom) log.scrollTop = log.scrollHeight;
    };
    // Expert-cache counters are server-wide: their change over this reply is its own only while no
    // other client generates, which is the common case for a local page.
    const before = state.streamingPlan ? await monitorHealth() : null;
    const t0 = performance.now();
    try {
        const r = await streamChat({
            body, headers: apiHeaders(), signal: state.controller.signal,
            onDelta: (d) => {
                reply.content += d.content;
                reply.reasoning += d.reasoning;
                if (!frame) frame = requestAnimationFrame(redraw);
            },
        });
        const s = { duration_ms: r.endMs - t0 };
        if (r.firstTokenMs !== null) s.ttft_ms = r.firstTokenMs - t0;
        if (r.usage) {
            s.completion_tokens = r.usage.completion_tokens;
            s.prompt_tokens = r.usage.prompt_tokens;
            s.cached_tokens = r.usage.prompt_tokens_details?.cached_tokens ?? 0;
            const decode_s = (r.endMs - (r.firstTokenMs ?? t0)) / 1000;
            if (s.completion_tokens > 1 && decode_s > 0) s.tok_s = (s.completion_tokens - 1) / decode_s;
            const spec = r.usage.completion_tokens_details;
            if (spec && spec.accepted_prediction_tokens !== undefined) {
                s.accepted_tokens = spec.accepted_prediction_tokens;
                s.draft_tokens = spec.accepted_prediction_tokens + spec.rejected_prediction_tokens;
            }
        }
        if (r.finishReason === "length") s.cut = 1;
        if (before) {
            const after = await monitorHealth();
            if (after) {
                s.expert_hits = after.expert_cache.hits - before.expert_cache.hits;
                s.expert_misses = after.expert_cache.misses - before.expert_cache.misses;
            }
        }
        reply.stats = s;
    } catch (e) {
        if (e.name === "AbortError") reply.stats = { stopped: 1, duration_ms: performance.now() - t0 };
        else if (e.status === 401) {
            reply.error = "This server needs an API key: enter it in Settings, then Regenerate.";
            openPanel("settings");
            $("set-api_key").focus();
        } else reply.error = String(e.message || e);
    } finally {
        cancelAnimationFrame(frame);
        state.controller = null;
        state.streaming = null;
        if (!reply.reasoning) delete reply.reasoning;
        setBusy(false);
        persist();
        renderLog();
    }
}

function sendText(text) {
    const conv = state.current;
    if (!conv.messages.some((m) => m.role === "user")) conv.title = titleFrom(text);
    conv.messages.push({ role: "user", content: text });
    generate();
}

// ---- drawers: one open at a time; on a wide screen the chat narrows beside it (style.css) ----
function openPanel(id) {
    for (const p of ["settings", "resources"]) $(p).hidden = p !== id;
    document.body.classList.toggle("panel-open", id !== null);
    if (id === "resources") monitor.render();
}
function togglePanel(id) {
    openPanel($(id).hidden ? id : null);
}

// ---- start ----
const settingsForm = buildSettingsForm($("settings-form"), state.settings, saveSettings);
const monitor = new Monitor({
    onHealth(h) {
        state.modelId = h.model;
        $("model").textContent = h.model + " · " + h.family;
        $("stats").textContent = $("stats").title = statusLine(h);
        state.streamingPlan = h.memory_plan.streaming;
        if (state.hasDraft !== !!h.stats.speculative) {
            state.hasDraft = !!h.stats.speculative;
            settingsForm.setDraft(state.hasDraft);
        }
        const welcome = document.querySelector("#log .welcome");
        if (welcome) welcome.textContent = `Ask ${h.model} anything.`;
    },
    onError() {
        $("stats").textContent = "server unreachable";
    },
    panelOpen: () => !$("resources").hidden,
    headers: apiHeaders,
});
const monitorHealth = () => monitor.fetchHealth();

$("form").addEventListener("submit", (e) => {
    e.preventDefault();
    const text = $("input").value.trim();
    if (!text || state.controller) return;
    $("input").value = "";
    $("input").style.height = "";
    sendText(text);
});
$("input").addEventListener("keydown", (e) => {
    if (e.key === "Enter" && !e.shiftKey && !e.isComposing) {
        e.preventDefault();
        $("form").requestSubmit();
    }
});
$("input").addEventListener("input", () => {
    const ta = $("input");
    ta.style.height = "";
    ta.style.height = Math.max(ta.scrollHeight, ta.offsetHeight) + "px";
});
$("stop").addEventListener("click", () => state.controller?.abort());
$("new").addEventListener("click", newChat);
$("log").addEventListener("click", onLogClick);
$("convs").addEventListener("click", (e) => {
    const item = e.target.closest(".conv");
    if (!item) return;
    const conv = state.convs.find((c) => c.id === item.dataset.id);
    if (!conv) return;
    const act = e.target.closest("button")?.dataset.act;
    if (act === "rename") startRename(item, conv);
    else if (act === "export") download(exportName([conv]), exportJson([conv]));
    else if (act === "delete") deleteConv(e.target.closest("button"), conv);
    else if (!act) select(conv);
});
$("search").addEventListener("input", () => {
    state.search = $("search").value;
    renderSidebar();
});
$("export-all").addEventListener("click", () => download(exportName(state.convs), exportJson(state.convs)));
$("import").addEventListener("click", () => $("import-file").click());
$("import-file").addEventListener("change", async () => {
    const file = $("import-file").files[0];
    $("import-file").value = "";  // the same file can be chosen again
    if (file) await importFile(file);
});
$("sidebar-toggle").addEventListener("click", toggleSidebar);
$("sidebar-close").addEventListener("click", hideSidebar);
$("backdrop").addEventListener("click", () => setPhoneSidebar(false));
$("settings-toggle").addEventListener("click", () => togglePanel("settings"));
$("resources-toggle").addEventListener("click", () => togglePanel("resources"));
$("settings-reset").addEventListener("click", () => settingsForm.reset());
for (const close of document.querySelectorAll(".panel .close")) close.addEventListener("click", () => openPanel(null));
document.addEventListener("keydown", (e) => {
    if (e.key !== "Escape") return;
    openPanel(null);
    if (phone.matches) setPhoneSidebar(false);
});
phone.addEventListener("change", () => setPhoneSidebar(false));
if (localStorage.getItem(kSidebarKey) === "collapsed") document.body.classList.add("sidebar-collapsed");

fetch("/props", { headers: apiHeaders() })
    .then((r) => (r.ok ? r.json() : null))
    .then((p) => p && settingsForm.setDefaults(p.default_generation_settings?.params))
    .catch(() => {});
monitor.start();

state.current = state.convs.find((c) => c.id === loadCurrentId()) || state.convs[0];
if (ensureCurrent()) persist();
renderSidebar();
renderLog();
