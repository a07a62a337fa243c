// mock_hub.mjs — a local stand-in for the Hugging Face Hub on loopback, for pull.test.mjs.
//
// It serves repositories from folders with the Hub's URL layout and headers:
//   GET /api/models/{repo}/revision/{rev}           {"sha", "siblings"}        (404 RevisionNotFound)
//   GET /api/models/{repo}/tree/{sha}?recursive=true  file list with size and lfs {oid, size}, paged
//                                                    3 entries a page through a `Link: <..>; rel="next"`
//   GET /{repo}/resolve/{rev}/{path}                 small files: 200 with X-Repo-Commit and ETag;
//                                                    *.safetensors (LFS): 302 to a CDN host with
//                                                    X-Linked-Size and X-Linked-Etag
// and a second server, the "CDN", reached by the name cdn-lfs.localhost (libcurl resolves
// *.localhost to loopback itself, curl ≥ 7.85), that answers range requests with 206 and
// Content-Range. A private repository answers 401 without `Authorization: Bearer <token>`; the
// CDN records any Authorization header it receives (the token must not leak to it).
//
// Faults are injected on CDN requests for tensor data (ranges that reach past the header), one
// per request, from a queue: "drop" (close the socket mid-answer), "429", "503", "html200" (a 200
// answer whose body is an HTML error page), "stall" (send some bytes, then nothing), "corrupt"
// (flip a byte of a 206 answer). `throttle` slows every data answer (bytes/s) for the kill test.
// Lifetime: start() → {endpoint, close()}; single process, no files written.
import crypto from "node:crypto";
import fs from "node:fs";
import http from "node:http";
import path from "node:path";

export function sha256(buf) {
    return crypto.createHash("sha256").update(buf).digest("hex");
}

function gitBlobSha1(buf) {
    return crypto.createHash("sha1").update(`blob ${buf.length}\0`).update(buf).digest("hex");
}

// Reads a safetensors file: {header (object), dataStart, data (Buffer)}.
export function readSafetensors(file) {
    const buf = fs.readFileSync(file);
    const n = Number(buf.readBigUInt64LE(0));
    return { header: JSON.parse(buf.subarray(8, 8 + n).toString("utf8")), dataStart: 8 + n, buf };
}

// Splits one safetensors file into `parts` shards (tensors in name order, cut by size) plus
// model.safetensors.index.json, written to outDir. Returns the shard names.
export function reshard(srcFile, outDir, parts) {
    const { header, dataStart, buf } = readSafetensors(srcFile);
    const names = Object.keys(header).filter((k) => k !== "__metadata__").sort();
    const total = names.reduce((s, k) => s + (header[k].data_offsets[1] - header[k].data_offsets[0]), 0);
    const shardNames = [];
    const weightMap = {};
    let i = 0;
    for (let p = 0; p < parts; p++) {
        const name = `model-${String(p + 1).padStart(5, "0")}-of-${String(parts).padStart(5, "0")}.safetensors`;
        shardNames.push(name);
        const h = { __metadata__: { format: "pt" } };
        const chunks = [];
        let off = 0;
        const limit = (total * (p + 1)) / parts;
        let cum = names.slice(0, i).reduce((s, k) => s + (header[k].data_offsets[1] - header[k].data_offsets[0]), 0);
        while (i < names.length && (p === parts - 1 || cum < limit)) {
            const k = names[i++];
            const [b, e] = header[k].data_offsets;
            chunks.push(buf.subarray(dataStart + b, dataStart + e));
            h[k] = { dtype: header[k].dtype, shape: header[k].shape, data_offsets: [off, off + (e - b)] };
            off += e - b;
            cum += e - b;
            weightMap[k] = name;
        }
        let text = JSON.stringify(h);
        while ((8 + text.length) % 8) text += " ";
        const len = Buffer.alloc(8);
        len.writeBigUInt64LE(BigInt(text.length));
        fs.writeFileSync(path.join(outDir, name), Buffer.concat([len, Buffer.from(text), ...chunks]));
    }
    fs.writeFileSync(path.join(outDir, "model.safetensors.index.json"),
        JSON.stringify({ metadata: { total_size: total }, weight_map: weightMap }, null, 2));
    return shardNames;
}

function listen(server) {
    return new Promise((resolve) => server.listen(0, "127.0.0.1", () => resolve(server.address().port)));
}

// repos: { "org/name": { dir, private?: bool, sha } }. Returns the running hub.
export async function startMockHub(repos, { token = "hf_test_token" } = {}) {
    const state = {
        faults: [],          // queue of fault names for data requests
        throttle: 0,         // bytes per second for data answers (0 = full speed)
        htmlFor: new Set(),  // small files answered with an HTML page (always)
        html200Always: false, // every data answer is a 200 HTML page
        cdnAuthSeen: 0,      // CDN requests that carried an Authorization header
        cdnHostsSeen: new Set(),
        dataBytesServed: 0,  // bytes of 206 data answers
        log: [],
    };
    const files = {};  // repo → [{path, buf, lfs}]
    const byOid = {};  // sha256 → {buf, dataStart}
    for (const [repo, r] of Object.entries(repos)) {
        files[repo] = fs.readdirSync(r.dir).sort().map((p) => {
            const buf = fs.readFileSync(path.join(r.dir, p));
            const lfs = p.endsWith(".safetensors");
            const entry = { path: p, buf, lfs, oid: lfs ? sha256(buf) : gitBlobSha1(buf) };
            if (lfs) byOid[entry.oid] = { buf, dataStart: 8 + Number(buf.readBigUInt64LE(0)) };
            return entry;
        });
    }

    const send = (res, status, headers, body) => {
        res.writeHead(status, headers);
        res.end(body);
    };
    const jsonAnswer = (res, status, obj, extra = {}) =>
        send(res, status, { "Content-Type": "application/json", ...extra }, JSON.stringify(obj));

    let cdnPort = 0;
    const hub = http.createServer((req, res) => {
        const url = new URL(req.url, "http://x");
        state.log.push(`${req.method} ${url.pathname}${url.search}`);
        let m = url.pathname.match(/^\/api\/models\/([^/]+\/[^/]+)\/(revision|tree)\/([^/]+)$/);
        const repoOf = (name) => repos[name];
        const authorized = (r) => !r.private || req.headers.authorization === `Bearer ${token}`;
        if (m) {
            const [, repo, kind, rev] = m;
            const r = repoOf(repo);
            if (!r) return jsonAnswer(res, 404, { error: "Repository not found" }, { "X-Error-Code": "RepoNotFound" });
            if (!authorized(r)) return jsonAnswer(res, 401, { error: "Invalid credentials" });
            if (rev !== "main" && rev !== r.sha)
                return jsonAnswer(res, 404, { error: `Invalid rev id: ${rev}` }, { "X-Error-Code": "RevisionNotFound" });
            if (kind === "revision")
                return jsonAnswer(res, 200, { id: repo, sha: r.sha, siblings: files[repo].map((f) => ({ rfilename: f.path })) });
            const entries = files[repo].map((f) => ({
                type: "file", oid: f.lfs ? gitBlobSha1(Buffer.from("pointer " + f.oid)) : f.oid, size: f.buf.length, path: f.path,
                ...(f.lfs ? { lfs: { oid: f.oid, size: f.buf.length, pointerSize: 134 } } : {}),
            }));
            const cursor = Number(url.searchParams.get("cursor") || 0);
            const page = entries.slice(cursor, cursor + 3);
            const headers = {};
            if (cursor + 3 < entries.length) {
                const next = `http://127.0.0.1:${hub.address().port}${url.pathname}?recursive=true&cursor=${cursor + 3}`;
                headers.Link = `<${next}>; rel="next"`;
            }
            return jsonAnswer(res, 200, page, headers);
        }
        m = url.pathname.match(/^\/([^/]+\/[^/]+)\/resolve\/([^/]+)\/(.+)$/);
        if (m) {
            const [, repo, rev, file] = m;
            const r = repoOf(repo);
            if (!r) return jsonAnswer(res, 404, { error: "Repository not found" }, { "X-Error-Code": "RepoNotFound" });
            if (!authorized(r)) return jsonAnswer(res, 401, { error: "Invalid credentials" });
            if (rev !== "main" && rev !== r.sha) return jsonAnswer(res, 404, { error: "Revision not found" }, { "X-Error-Code": "RevisionNotFound" });
            const f = files[repo].find((x) => x.path === decodeURIComponent(file));
            if (!f) return jsonAnswer(res, 404, { error: "Entry not found" }, { "X-Error-Code": "EntryNotFound" });
            const common = { "X-Repo-Commit": r.sha, ETag: `"${f.oid}"` };
            if (f.lfs) {
                return send(res, 302, {
                    ...common, "X-Linked-Size": String(f.buf.length), "X-Linked-Etag": `"${f.oid}"`,
                    Location: `http://cdn-lfs.localhost:${cdnPort}/repos/ab/cd/${f.oid}?X-Amz-Signature=mock`,
                });
            }
            if (state.htmlFor.has(f.path))
                return send(res, 200, { "Content-Type": "text/html" }, "<!DOCTYPE html><html><body>Rate limited</body></html>");
            return send(res, 200, { ...common, "Content-Type": f.path.endsWith(".json") ? "application/json" : "text/plain" }, f.buf);
        }
        jsonAnswer(res, 404, { error: "not found" });
    });

    const cdn = http.createServer((req, res) => {
        state.cdnHostsSeen.add(req.headers.host);
        if (req.headers.authorization) state.cdnAuthSeen++;
        const m = req.url.match(/^\/repos\/ab\/cd\/([0-9a-f]{64})\?/);
        const obj = m && byOid[m[1]];
        if (!obj) return send(res, 404, { "Content-Type": "text/plain" }, "NoSuchKey");
        const size = obj.buf.length;
        const rm = (req.headers.range || "").match(/^bytes=(\d+)-(\d*)$/);
        if (!rm) return send(res, 200, { "Content-Length": size }, obj.buf);
        const first = Number(rm[1]);
        const last = rm[2] === "" ? size - 1 : Math.min(Number(rm[2]), size - 1);
        if (first >= size) return send(res, 416, { "Content-Range": `bytes */${size}` }, "");
        let body = obj.buf.subarray(first, last + 1);
        const isData = last >= obj.dataStart;  // reaches tensor bytes (header reads end before them)
        const fault = isData ? state.faults.shift() : undefined;
        if (fault) state.log.push(`fault ${fault} at ${first}`);
        if (fault === "429") return send(res, 429, { "Retry-After": "0", "Content-Type": "text/plain" }, "Too Many Requests");
        if (fault === "503") return send(res, 503, { "Content-Type": "text/plain" }, "Service Unavailable");
        if (fault === "html200" || state.html200Always)
            return send(res, 200, { "Content-Type": "text/html" }, "<!DOCTYPE html><html><head><title>429</title></head><body>Too many requests</body></html>");
        if (fault === "corrupt") {
            body = Buffer.from(body);
            body[Math.floor(body.length / 2)] ^= 0x40;
        }
        res.writeHead(206, {
            "Content-Type": "application/octet-stream", "Content-Length": body.length,
            "Content-Range": `bytes ${first}-${last}/${size}`, ETag: `"${m[1]}"`, "Accept-Ranges": "bytes",
        });
        if (fault === "drop" || fault === "stall") {
            const part = body.subarray(0, Math.min(body.length - 1, 40000));
            state.dataBytesServed += part.length;
            res.write(part);
            if (fault === "drop") setTimeout(() => res.socket.destroy(), 20);
            else req.socket.setTimeout(0);  // stall: keep the socket open, send nothing more
            return;
        }
        if (!state.throttle || !isData) {
            if (isData) state.dataBytesServed += body.length;
            return res.end(body);
        }
        // Throttled: 50 ms ticks of throttle/20 bytes.
        let at = 0;
        const step = Math.max(1, Math.floor(state.throttle / 20));
        const tick = () => {
            if (res.destroyed) return;
            const piece = body.subarray(at, at + step);
            at += piece.length;
            state.dataBytesServed += piece.length;
            if (at >= body.length) return res.end(piece);
            res.write(piece);
            setTimeout(tick, 50);
        };
        tick();
    });
    keepAliveShort(cdn);
    const hubPort = await listen(hub);
    cdnPort = await listen(cdn);
    return {
        endpoint: `http://127.0.0.1:${hubPort}`,
        state,
        token,
        close: () => {
            hub.closeAllConnections?.();
            cdn.closeAllConnections?.();
            hub.close();
            cdn.close();
        },
    };
}

// A stalled answer keeps its socket open; make sure the server can still close.
function keepAliveShort(server) {
    server.keepAliveTimeout = 1000;
}
