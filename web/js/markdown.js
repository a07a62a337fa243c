// Model output → DOM: markdown-it parses the full CommonMark + GFM tables/strikethrough, linkify
// and a math extension; DOMPurify sanitises the HTML; then the math placeholders are typeset with
// KaTeX and code blocks get a header with their language and a Copy button.
//
// Model output is untrusted. Raw HTML in it is escaped by markdown-it (html: false), markdown-it
// refuses javascript:/vbscript:/file:/data: links, and DOMPurify removes whatever else could run
// (event-handler attributes, scripts, forms) — a second wall behind the first, and the server's
// Content-Security-Policy is a third. Math is typeset after sanitising, from the placeholder's text:
// KaTeX with trust: false emits no links or raw HTML, and its MathML (semantics/annotation, which
// DOMPurify would strip) is kept for screen readers. Images become links: the page loads nothing
// that a reply names, so a reply cannot make the browser fetch a tracking URL.
//
// The renderer is a pure function of the text, re-run on every streamed update (a reply is at most
// tens of KB); KaTeX's output is cached per formula so a long reply's math is not re-typeset on
// every token.

const md = window.markdownit({
    html: false,
    linkify: true,
    breaks: true,  // a single newline in a reply is a line break, as models mean it
    highlight(code, lang) {
        const name = (lang || "").trim().toLowerCase();
        if (!name || !window.hljs.getLanguage(name)) return "";  // "" lets markdown-it escape it
        try {
            return window.hljs.highlight(code, { language: name, ignoreIllegals: true }).value;
        } catch {
            return "";
        }
    },
});
md.use(mathPlugin);
md.renderer.rules.image = (tokens, idx, options, env, self) => {
    const t = tokens[idx];
    const alt = self.renderInlineAsText(t.children, options, env) || t.attrGet("src");
    return `<a href="${md.utils.escapeHtml(t.attrGet("src") || "")}">[image: ${md.utils.escapeHtml(alt)}]</a>`;
};

// ---- math: $…$ and \(…\) inline, $$…$$ and \[…\] display (inline or as their own block) ----
// A single-dollar formula follows pandoc's rule so prices are left alone: the opening $ is not
// followed by a space, the closing $ is not preceded by one nor followed by a digit ("$5 and $10"
// is text). \( and \[ are taken before markdown's backslash escapes would turn them into ( and [.
function mathPlugin(md) {
    const isSpace = (ch) => ch === undefined || /\s/.test(ch);
    function inline(state, silent) {
        const src = state.src;
        const start = state.pos;
        const max = state.posMax;
        let open, close, display;
        if (src.startsWith("\\(", start)) [open, close, display] = ["\\(", "\\)", false];
        else if (src.startsWith("\\[", start)) [open, close, display] = ["\\[", "\\]", true];
        else if (src.startsWith("$$", start)) [open, close, display] = ["$$", "$$", true];
        else if (src[start] === "$") [open, close, display] = ["$", "$", false];
        else return false;
        let end = start + open.length;
        if (open === "$") {
            if (isSpace(src[end])) return false;
            for (;; ++end) {
                end = src.indexOf("$", end);
                if (end < 0 || end >= max) return false;
                if (src[end - 1] === "\\") continue;  // \$ inside the formula
                if (!isSpace(src[end - 1]) && !/[0-9]/.test(src[end + 1] ?? "")) break;
            }
        } else {
            end = src.indexOf(close, end);
            if (end < 0 || end + close.length > max) return false;
        }
        const content = src.slice(start + open.length, end);
        if (!content.trim()) return false;
        if (!silent) {
            const t = state.push("math_inline", "math", 0);
            t.content = content;
            t.markup = open;
            t.meta = { display };
        }
        state.pos = end + close.length;
        return true;
    }
    // A line that starts with $$ or \[ opens a block that ends on the line that ends with the
    // closing delimiter (possibly the same line). No blank line may come between: an unclosed block
    // (a reply still streaming) stays text until its delimiter arrives.
    function block(state, startLine, endLine, silent) {
        if (state.sCount[startLine] - state.blkIndent >= 4) return false;
        const lineText = (n) => state.src.slice(state.bMarks[n] + state.tShift[n], state.eMarks[n]);
        const first = lineText(startLine);
        const open = first.startsWith("$$") ? "$$" : first.startsWith("\\[") ? "\\[" : null;
        if (!open) return false;
        const close = open === "$$" ? "$$" : "\\]";
        const rest = first.slice(open.length).trimEnd();
        const lines = [];
        let last = startLine;
        if (rest.endsWith(close) && rest.length >= close.length) {
            lines.push(rest.slice(0, -close.length));
        } else {
            if (rest.includes(close)) return false;  // "$$a$$ and text": inline math in a paragraph
            lines.push(rest);
            for (last = startLine + 1; ; ++last) {
                if (last >= endLine) return false;
                const text = lineText(last).trimEnd();
                if (!text || state.sCount[last] < state.blkIndent) return false;
                if (text.endsWith(close)) {
                    lines.push(text.slice(0, -close.length));
                    break;
                }
                lines.push(text);
            }
        }
        if (!lines.join("").trim()) return false;
        if (silent) return true;
        state.line = last + 1;
        const t = state.push("math_block", "math", 0);
        t.block = true;
        t.content = lines.join("\n");
        t.markup = open;
        t.map = [startLine, state.line];
        return true;
    }
    md.inline.ruler.before("escape", "math_inline", inline);
    md.block.ruler.before("fence", "math_block", block, { alt: ["paragraph", "reference", "blockquote", "list"] });
    const esc = md.utils.escapeHtml;
    md.renderer.rules.math_inline = (tokens, idx) => {
        const t = tokens[idx];
        return t.meta.display ? `<span class="math" data-display="1">${esc(t.content)}</span>` : `<span class="math">${esc(t.content)}</span>`;
    };
    md.renderer.rules.math_block = (tokens, idx) => `<div class="math" data-display="1">${esc(tokens[idx].content)}</div>\n`;
}

const kTypesetCacheSize = 500;
const typesetCache = new Map();  // "D" or "I" + TeX → KaTeX's HTML

function typeset(tex, display) {
    const key = (display ? "D" : "I") + tex;
    let html = typesetCache.get(key);
    if (html === undefined) {
        // throwOnError: false renders a bad formula as its source in red, escaped.
        html = window.katex.renderToString(tex, { displayMode: display, throwOnError: false, trust: false, strict: "ignore", maxSize: 50, maxExpand: 500 });
        if (typesetCache.size >= kTypesetCacheSize) typesetCache.delete(typesetCache.keys().next().value);
        typesetCache.set(key, html);
    }
    return html;
}

// The sanitiser's settings: DOMPurify's defaults (HTML, SVG and MathML without scripts or event
// handlers) minus form controls, which a reply has no use for.
const kPurify = { RETURN_DOM_FRAGMENT: true, FORBID_TAGS: ["form", "input", "button", "textarea", "select", "style"] };

// The markdown `src` as a DocumentFragment ready to insert.
export function renderMarkdown(src) {
    const frag = window.DOMPurify.sanitize(md.render(src), kPurify);
    for (const code of frag.querySelectorAll("pre > code.language-math")) {  // ```math fences
        const div = document.createElement("div");
        div.className = "math";
        div.dataset.display = "1";
        div.textContent = code.textContent;
        code.parentElement.replaceWith(div);
    }
    for (const el of frag.querySelectorAll(".math")) {
        try {
            el.innerHTML = typeset(el.textContent, el.dataset.display === "1");
        } catch {
            // left as its TeX source
        }
    }
    for (const pre of frag.querySelectorAll("pre")) {
        const code = pre.querySelector("code");
        if (!code) continue;
        code.classList.add("hljs");
        const lang = (code.className.match(/language-(\S+)/) || [])[1] || "";
        const wrap = document.createElement("div");
        wrap.className = "code-block";
        const head = document.createElement("div");
        head.className = "code-head";
        const name = document.createElement("span");
        name.className = "lang";
        name.textContent = lang || "text";
        const copy = document.createElement("button");
        copy.type = "button";
        copy.className = "copy";
        copy.textContent = "Copy";
        copy.title = "Copy the code";
        head.append(name, copy);
        pre.replaceWith(wrap);
        wrap.append(head, pre);
    }
    for (const a of frag.querySelectorAll("a[href]")) {
        a.target = "_blank";
        a.rel = "noopener noreferrer nofollow";
    }
    return frag;
}

// Copies `text` to the clipboard; resolves true on success. The async Clipboard API needs a secure
// context (loopback is one; a LAN address over http is not), so the old execCommand path backs it.
export async function copyText(text) {
    try {
        await navigator.clipboard.writeText(text);
        return true;
    } catch {
        const ta = document.createElement("textarea");
        ta.value = text;
        ta.style.position = "fixed";
        ta.style.opacity = "0";
        document.body.append(ta);
        ta.select();
        let ok = false;
        try {
            ok = document.execCommand("copy");
        } catch {
            ok = false;
        }
        ta.remove();
        return ok;
    }
}
