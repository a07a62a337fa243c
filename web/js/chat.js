// One streamed /v1/chat/completions request: sends the body, reads the SSE stream (docs/SERVER.md:
// a role chunk, content / reasoning_content / tool_calls deltas, a finish_reason chunk, a usage
// chunk when stream_options.include_usage, then [DONE]) and reports each delta as it arrives.
//
// Aborting `signal` (the Stop button) cancels the fetch; the server sees the connection close and
// frees the session. Errors (an HTTP status, an error event in the stream) are thrown as Error with
// the server's message; a 401 is an Error with .status = 401 so the page can ask for the key.

export class ApiError extends Error {
    constructor(message, status) {
        super(message);
        this.status = status;
    }
}

// Streams one request. onDelta({content, reasoning}) is called per chunk that carries text; the
// result is {finishReason, usage (null when the stream ended early), firstTokenMs, endMs}, times in
// performance.now() milliseconds (firstTokenMs: the first chunk with text, not the role chunk the
// server sends before queueing).
export async function streamChat({ body, headers, signal, onDelta }) {
    const res = await fetch("/v1/chat/completions", { method: "POST", headers, signal, body: JSON.stringify(body) });
    if (!res.ok) {
        let message = res.statusText || "HTTP " + res.status;
        try {
            message = (await res.json()).error?.message || message;
        } catch {
            // not JSON: keep the status text
        }
        throw new ApiError(message, res.status);
    }
    const out = { finishReason: null, usage: null, firstTokenMs: null, endMs: null };
    const reader = res.body.getReader();
    const decoder = new TextDecoder();
    let buf = "";
    const handle = (data) => {
        if (data === "[DONE]") return;
        const j = JSON.parse(data);
        if (j.error) throw new ApiError(j.error.message || "generation failed", 500);
        if (j.usage) out.usage = j.usage;
        const choice = j.choices?.[0];
        if (!choice) return;
        if (choice.finish_reason) out.finishReason = choice.finish_reason;
        const d = choice.delta || {};
        let content = d.content || "";
        if (d.tool_calls) content += d.tool_calls.map((t) => "\n`" + (t.function?.name ?? "") + "(" + (t.function?.arguments ?? "") + ")`").join("");
        const reasoning = d.reasoning_content || "";
        if (!content && !reasoning) return;
        out.firstTokenMs ??= performance.now();
        onDelta({ content, reasoning });
    };
    for (;;) {
        const { done, value } = await reader.read();
        if (done) break;
        buf += decoder.decode(value, { stream: true });
        let cut;
        while ((cut = buf.indexOf("\n\n")) >= 0) {
            const event = buf.slice(0, cut);
            buf = buf.slice(cut + 2);
            for (const line of event.split("\n")) if (line.startsWith("data: ")) handle(line.slice(6));
        }
    }
    out.endMs = performance.now();
    return out;
}
