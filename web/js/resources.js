// What the server is doing, from GET /health every 2 s (and GET /slots while the resources drawer
// is open): the one-line status in the header and the resources drawer — the memory plan as a bar,
// and the expert-cache hit rate, disk read throughput and generated tokens per second over the
// last three minutes as small SVG charts.
//
// /health's counters are totals since the server started (src/server/endpoint_info.cpp), so each
// chart point is the difference of two polls over the time between them: hit rate = Δhits /
// (Δhits + Δmisses) (no point when no expert was looked up), disk GB/s = Δexpert_cache.bytes_read
// / Δt, tokens/s = Δstats.generated_tokens_total / Δt. Polling pauses while the tab is hidden
// (the gap then shows as a longer interval, not as zeros). /health needs no API key; /slots does.

const kPollMs = 2000;
const kMaxSamples = 90;  // three minutes at one poll per 2 s
const kColors = { dense: "#2a6df4", state: "#f29c1f", cache: "#1f9d55", scratch: "#9a6bd8" };

export function fmtBytes(n) {
    if (n >= 1e9) return (n / 1e9).toFixed(2) + " GB";
    if (n >= 1e6) return (n / 1e6).toFixed(1) + " MB";
    return (n / 1e3).toFixed(0) + " KB";
}

// The header's status line (the tests read it: "decode … tok/s", "… busy", "speculative N% of
// drafts kept").
export function statusLine(h) {
    const plan = h.memory_plan, cache = h.expert_cache, s = h.stats;
    const parts = [
        "decode " + s.last_decode_tok_s.toFixed(1) + " tok/s",
        "prefill " + s.last_prefill_tok_s.toFixed(1) + " tok/s",
        "memory " + fmtBytes(plan.dense_bytes + plan.state_bytes * h.slots.total + plan.cache_bytes + plan.scratch_bytes),
    ];
    if (s.speculative) parts.push("speculative " + (s.speculative.draft_tokens_total ? (100 * s.speculative.acceptance_rate).toFixed(0) + "% of drafts kept" : "on"));
    if (plan.streaming) parts.push("expert cache " + (100 * cache.hit_rate).toFixed(1) + "% hits, " + fmtBytes(cache.bytes_read) + " read");
    parts.push(h.slots.active + "/" + h.slots.total + " busy" + (h.slots.queued ? ", " + h.slots.queued + " queued" : ""));
    return parts.join(" · ");
}

// The per-interval series of the charts, from consecutive samples {t_ms, hits, misses, bytes, tokens}.
export function series(samples) {
    const hits = [], disk = [], tokens = [];
    for (let i = 1; i < samples.length; ++i) {
        const a = samples[i - 1], b = samples[i];
        const dt_s = (b.t_ms - a.t_ms) / 1000;
        if (b.hits < a.hits || b.misses < a.misses || b.bytes < a.bytes || b.tokens < a.tokens) {  // the server restarted
            hits.push(null), disk.push(null), tokens.push(null);
            continue;
        }
        const looked = b.hits - a.hits + (b.misses - a.misses);
        hits.push(looked > 0 ? (b.hits - a.hits) / looked : null);
        disk.push(dt_s > 0 ? (b.bytes - a.bytes) / dt_s / 1e9 : null);
        tokens.push(dt_s > 0 ? (b.tokens - a.tokens) / dt_s : null);
    }
    return { hits, disk, tokens };
}

// Draws `values` (null = no point) across a 300×70 viewBox, oldest at the left: a line and the
// area under it, scaled to `max` (or to the largest value). Writes the latest value into the
// figure caption.
function drawChart(svg, values, { max, fmt }) {
    const w = 300, h = 70, pad = 3;
    const top = max ?? Math.max(1e-9, ...values.filter((v) => v !== null));
    const x = (i) => (values.length > 1 ? (i * w) / (values.length - 1) : w);
    const y = (v) => h - pad - (Math.min(v, top) / top) * (h - 2 * pad);
    const runs = [];
    let run = [];
    values.forEach((v, i) => {
        if (v === null) {
            if (run.length) runs.push(run);
            run = [];
        } else run.push([x(i), y(v)]);
    });
    if (run.length) runs.push(run);
    const ns = "http://www.w3.org/2000/svg";
    svg.replaceChildren();
    for (const r of runs) {
        const pts = r.map(([a, b]) => a.toFixed(1) + "," + b.toFixed(1));
        const area = document.createElementNS(ns, "polygon");
        area.setAttribute("class", "area");
        area.setAttribute("points", `${r[0][0].toFixed(1)},${h} ${pts.join(" ")} ${r[r.length - 1][0].toFixed(1)},${h}`);
        const line = document.createElementNS(ns, "polyline");
        line.setAttribute("points", r.length === 1 ? `${pts[0]} ${(r[0][0] - 1).toFixed(1)},${r[0][1].toFixed(1)}` : pts.join(" "));
        svg.append(area, line);
    }
    const last = [...values].reverse().find((v) => v !== null);
    const now = svg.parentElement.querySelector(".now");
    if (now) now.textContent = last === undefined ? "—" : fmt(last) + (max === undefined ? " (peak " + fmt(top) + ")" : "");
}

function renderPlan(h, els) {
    const plan = h.memory_plan;
    const parts = [
        ["dense", "weights", plan.dense_bytes],
        ["state", `KV/state × ${h.slots.total} (${plan.kv_type})`, plan.state_bytes * h.slots.total],
        ["cache", `expert cache (${plan.cache_slots} slots)`, plan.cache_bytes],
        ["scratch", "scratch", plan.scratch_bytes],
    ];
    // The bar shows what the plan reserves, in proportion; the budget is its ceiling, which a
    // model that fits whole leaves mostly unused (a bar scaled to it would be one sliver).
    const used = parts.reduce((n, p) => n + p[2], 0);
    els.bar.replaceChildren(...parts.filter((p) => p[2] > 0).map(([k, name, bytes]) => {
        const seg = document.createElement("span");
        seg.style.width = ((100 * bytes) / used).toFixed(2) + "%";
        seg.style.background = kColors[k];
        seg.title = `${name}: ${fmtBytes(bytes)}`;
        return seg;
    }));
    const items = parts.map(([k, name, bytes]) => {
        const li = document.createElement("li");
        const sw = document.createElement("i");
        sw.style.background = kColors[k];
        li.append(sw, `${name}: ${fmtBytes(bytes)}`);
        return li;
    });
    const total = document.createElement("li");
    total.className = "total";
    total.textContent = `${fmtBytes(used)} reserved of a ${fmtBytes(plan.budget_bytes)} budget`;
    els.legend.replaceChildren(...items, total);
    els.planText.textContent = plan.description;
    const c = h.expert_cache;
    els.cacheText.textContent = plan.streaming
        ? `${(100 * c.hit_rate).toFixed(1)}% hits since start (${c.hits} hits, ${c.misses} misses, ${c.evictions} evictions); ` +
          `${fmtBytes(c.bytes_read)} read in ${c.reads} reads at ${c.read_gb_s.toFixed(2)} GB/s while reading`
        : "Not streaming: every expert is held in memory, so nothing is read from disk.";
    // The expert cache follows memory pressure (docs/ARCHITECTURE.md "Memory"): its size now
    // between the floor and the planned ceiling, and what it has handed back to the OS.
    const p = h.memory_pressure;
    els.pressureText.textContent = p && p.adaptive
        ? `Under memory pressure the cache moves between ${fmtBytes(p.floor_bytes)} and ${fmtBytes(p.ceiling_bytes)}: ` +
          `budget now ${fmtBytes(p.budget_bytes)}, ${p.pressure_events} pressure events, ${fmtBytes(p.bytes_returned)} handed back ` +
          `(${fmtBytes(p.available_bytes)} available; ${p.source}).`
        : plan.streaming ? "The expert cache keeps its planned size (--fixed-memory, or page-locked for the GPU)." : "";
}

function renderSlots(table, slots) {
    const head = document.createElement("tr");
    for (const t of ["slot", "state", "tokens held", "KV bits"]) {
        const th = document.createElement("th");
        th.textContent = t;
        head.append(th);
    }
    table.replaceChildren(head, ...slots.map((s) => {
        const tr = document.createElement("tr");
        for (const v of [s.id, s.is_processing ? "busy" : "idle", `${s.n_past} / ${s.n_ctx}`, s.kv_bits]) {
            const td = document.createElement("td");
            td.textContent = String(v);
            tr.append(td);
        }
        return tr;
    }));
}

// Polls /health and keeps the samples. onHealth(h) runs after each successful poll, onError()
// after a failed one. panelOpen() says whether to draw the drawer (and fetch /slots with headers()).
export class Monitor {
    constructor({ onHealth, onError, panelOpen, headers }) {
        this.samples = [];
        this.last = null;
        this.onHealth = onHealth;
        this.onError = onError;
        this.panelOpen = panelOpen;
        this.headers = headers;
        this.timer = null;
        this.els = {
            bar: document.getElementById("plan-bar"),
            legend: document.getElementById("plan-legend"),
            planText: document.getElementById("plan-text"),
            pressureText: document.getElementById("pressure-text"),
            cacheText: document.getElementById("cache-text"),
            hits: document.getElementById("chart-hits"),
            disk: document.getElementById("chart-disk"),
            tokens: document.getElementById("chart-tokens"),
            slots: document.getElementById("slots"),
        };
    }

    start() {
        // this.timer: a pending setTimeout, -1 while a poll runs, null while stopped (tab hidden).
        const tick = async () => {
            this.timer = -1;
            await this.poll();
            this.timer = document.hidden ? null : setTimeout(tick, kPollMs);
        };
        document.addEventListener("visibilitychange", () => {
            if (!document.hidden && this.timer === null) tick();
        });
        tick();
    }

    // One /health read; returns it (or null when the server is unreachable).
    async fetchHealth() {
        try {
            const res = await fetch("/health");
            if (!res.ok) throw new Error("HTTP " + res.status);
            return await res.json();
        } catch {
            return null;
        }
    }

    async poll() {
        const h = await this.fetchHealth();
        if (!h) return this.onError();
        this.last = h;
        this.samples.push({ t_ms: performance.now(), hits: h.expert_cache.hits, misses: h.expert_cache.misses, bytes: h.expert_cache.bytes_read,
            tokens: h.stats.generated_tokens_total });
        if (this.samples.length > kMaxSamples) this.samples.shift();
        this.onHealth(h);
        if (this.panelOpen()) await this.render();
    }

    async render() {
        if (!this.last) return;
        renderPlan(this.last, this.els);
        const s = series(this.samples);
        drawChart(this.els.hits, s.hits, { max: 1, fmt: (v) => (100 * v).toFixed(0) + "%" });
        drawChart(this.els.disk, s.disk, { fmt: (v) => v.toFixed(2) + " GB/s" });
        drawChart(this.els.tokens, s.tokens, { fmt: (v) => v.toFixed(1) + " tok/s" });
        try {
            const res = await fetch("/slots", { headers: this.headers() });
            if (res.ok) renderSlots(this.els.slots, await res.json());
        } catch {
            // the table keeps its last state
        }
    }
}
