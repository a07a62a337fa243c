// Conversations: their shape, their persistence in localStorage, and their JSON export and import.
//
// A conversation is {id, title, created, updated, messages}; a message is {role: "system" | "user" |
// "assistant", content, reasoning?, error?, stats?} (stats: what a reply measured, see app.js). The
// whole list is one JSON value under "sluice.convs" (newest first), rewritten after each change;
// "sluice.current" holds the id of the one shown. localStorage is synchronous and per origin, so
// two tabs of the page share the list and the last writer wins (rejected: merging, which would
// need a per-message clock for a case a local chat page rarely meets).
//
// An export is {format: "sluice.conversations", version: 1, conversations: [...]}. An import takes
// that, a bare array of conversations or one conversation, checks every field it keeps and refuses
// the whole file with a message naming the first bad place; imported conversations get new ids so
// they never replace existing ones.

const kConvsKey = "sluice.convs";
const kCurrentKey = "sluice.current";
export const kExportFormat = "sluice.conversations";
const kRoles = new Set(["system", "user", "assistant"]);
const kMaxTitleChars = 200;

export function newId() {
    return Date.now().toString(36) + Math.random().toString(36).slice(2, 7);
}

export function newConversation(title = "New chat", messages = []) {
    const now = Date.now();
    return { id: newId(), title, created: now, updated: now, messages };
}

export function loadConversations() {
    try {
        const list = JSON.parse(localStorage.getItem(kConvsKey) || "[]");
        return Array.isArray(list) ? list.filter((c) => c && Array.isArray(c.messages)) : [];
    } catch {
        return [];
    }
}

// Returns null, or the reason the list could not be stored (the origin's quota is a few MB).
export function saveConversations(list, currentId) {
    try {
        localStorage.setItem(kConvsKey, JSON.stringify(list));
        if (currentId) localStorage.setItem(kCurrentKey, currentId);
        return null;
    } catch (e) {
        return "could not save the conversations in this browser: " + (e.message || e);
    }
}

export function loadCurrentId() {
    return localStorage.getItem(kCurrentKey);
}

// A title from the first user message: its first line, shortened.
export function titleFrom(text) {
    const line = text.trim().split("\n")[0];
    return line.length > 48 ? line.slice(0, 47) + "…" : line || "New chat";
}

// Whether the conversation's title or any message contains `query` (case-insensitive).
export function matches(conv, query) {
    const q = query.trim().toLowerCase();
    if (!q) return true;
    if (conv.title.toLowerCase().includes(q)) return true;
    return conv.messages.some((m) => (m.content || "").toLowerCase().includes(q) || (m.reasoning || "").toLowerCase().includes(q));
}

export function exportJson(convs) {
    return JSON.stringify({ format: kExportFormat, version: 1, exported: new Date().toISOString(), conversations: convs }, null, 2);
}

// A file name for an export: "sluice-<title>.json" or "sluice-conversations-<date>.json".
export function exportName(convs) {
    if (convs.length === 1) {
        const slug = convs[0].title.toLowerCase().replace(/[^a-z0-9]+/g, "-").replace(/^-|-$/g, "").slice(0, 40);
        return `sluice-${slug || "chat"}.json`;
    }
    return `sluice-conversations-${new Date().toISOString().slice(0, 10)}.json`;
}

function fail(where, what) {
    throw new Error(`${where}: ${what}`);
}

function typeName(v) {
    return v === null ? "null" : Array.isArray(v) ? "an array" : typeof v;
}

function checkMessage(m, where) {
    if (!m || typeof m !== "object" || Array.isArray(m)) fail(where, `expected an object, got ${typeName(m)}`);
    if (!kRoles.has(m.role)) fail(where, `role must be "system", "user" or "assistant", got ${JSON.stringify(m.role)}`);
    const content = m.content ?? "";
    if (typeof content !== "string") fail(where, `content must be a string, got ${typeName(content)}`);
    const out = { role: m.role, content };
    for (const k of ["reasoning", "error"]) {
        if (m[k] === undefined || m[k] === null || m[k] === "") continue;
        if (typeof m[k] !== "string") fail(where, `${k} must be a string, got ${typeName(m[k])}`);
        out[k] = m[k];
    }
    if (m.reasoning_content && typeof m.reasoning_content === "string" && !out.reasoning) out.reasoning = m.reasoning_content;  // OpenAI's name
    if (m.stats && typeof m.stats === "object" && !Array.isArray(m.stats)) {
        const stats = {};
        for (const [k, v] of Object.entries(m.stats)) if (typeof v === "number" && Number.isFinite(v)) stats[k] = v;
        out.stats = stats;
    }
    return out;
}

function checkConversation(c, where) {
    if (!c || typeof c !== "object" || Array.isArray(c)) fail(where, `expected an object, got ${typeName(c)}`);
    if (!Array.isArray(c.messages)) fail(where, `"messages" must be an array, got ${typeName(c.messages)}`);
    if (c.title !== undefined && typeof c.title !== "string") fail(where, `title must be a string, got ${typeName(c.title)}`);
    const messages = c.messages.map((m, i) => checkMessage(m, `${where}, message ${i + 1}`));
    const firstUser = messages.find((m) => m.role === "user");
    const title = (c.title || "").trim().slice(0, kMaxTitleChars) || (firstUser ? titleFrom(firstUser.content) : "Imported chat");
    const conv = newConversation(title, messages);
    if (Number.isFinite(c.created)) conv.created = c.created;
    if (Number.isFinite(c.updated)) conv.updated = c.updated;
    return conv;
}

// The conversations in an exported file's text; throws an Error whose message says what is wrong.
export function parseImport(text) {
    let data;
    try {
        data = JSON.parse(text);
    } catch (e) {
        throw new Error("not a JSON file (" + e.message + ")");
    }
    let list;
    if (Array.isArray(data)) list = data;
    else if (data && typeof data === "object" && Array.isArray(data.conversations)) {
        if (data.format !== undefined && data.format !== kExportFormat) fail("format", `expected "${kExportFormat}", got ${JSON.stringify(data.format)}`);
        list = data.conversations;
    } else if (data && typeof data === "object" && Array.isArray(data.messages)) list = [data];
    else throw new Error(`expected {"format": "${kExportFormat}", "conversations": [...]}, an array of conversations or one conversation`);
    if (list.length === 0) throw new Error("the file holds no conversations");
    return list.map((c, i) => checkConversation(c, `conversation ${i + 1}`));
}
