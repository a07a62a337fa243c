#!/usr/bin/env node
// vendor_web.mjs — copies the chat page's third-party files from node_modules into web/vendor/,
// which cmake/embed_web.cmake embeds into the binary with the rest of web/ (the page makes no
// request outside the server: no CDN).
//
//   node tools/vendor_web.mjs           write web/vendor/ from node_modules (run `npm ci` first)
//   node tools/vendor_web.mjs --check   verify web/vendor/ against package-lock.json and node_modules;
//                                       prints each problem and exits 1 on any
//
// Which package versions are vendored is decided by package-lock.json alone: the files are taken
// from node_modules only after node_modules/<pkg>/package.json was checked to hold the locked
// version. web/vendor/manifest.json records, per file, the package@version it came from, its path
// in the package and its sha256, so a reviewer sees what a change to web/vendor/ is, and
// tests/oracle/web_vendor.test.mjs fails when the vendored copy drifts from the lock file (a
// version bumped without re-vendoring, a vendored file edited by hand, a file added or removed).
//
// Only what the page loads is copied: the minified browser builds (UMD scripts that define a
// global, loaded by classic <script defer> tags before the page's own module), their CSS, KaTeX's
// fonts in woff2 only (every browser the page targets reads woff2, so katex.min.css never falls
// back to its .woff/.ttf URLs) and each package's license.
// Rejected: the packages' ES-module builds. Only markdown-it ships a minified one; KaTeX's and
// DOMPurify's are unminified (3x the bytes), and highlight.js's npm package is one module per
// language. @highlightjs/cdn-assets is highlight.js's own prebuilt browser bundle (the common
// languages), published from the same release as the `highlight.js` package.
import crypto from "node:crypto";
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";

const kRepoRoot = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..");

// Every vendored file: [destination under web/vendor/, source path inside the package].
// A directory source with a filter copies the matching files of that directory.
export const kVendored = [
    {
        package: "markdown-it",
        files: [
            ["markdown-it/markdown-it.min.js", "dist/browser/markdown-it.umd.min.js"],
            ["markdown-it/LICENSE", "LICENSE"],
        ],
    },
    {
        package: "@highlightjs/cdn-assets",
        files: [
            ["highlight.js/highlight.min.js", "highlight.min.js"],
            ["highlight.js/github.min.css", "styles/github.min.css"],
            ["highlight.js/github-dark.min.css", "styles/github-dark.min.css"],
            ["highlight.js/LICENSE", "LICENSE"],
        ],
    },
    {
        package: "katex",
        files: [
            ["katex/katex.min.js", "dist/katex.min.js"],
            ["katex/katex.min.css", "dist/katex.min.css"],
            ["katex/LICENSE", "LICENSE"],
        ],
        dirs: [["katex/fonts", "dist/fonts", (name) => name.endsWith(".woff2")]],
    },
    {
        package: "dompurify",
        files: [
            ["dompurify/purify.min.js", "dist/purify.min.js"],
            ["dompurify/LICENSE", "LICENSE"],
        ],
    },
];

export const kManifestName = "manifest.json";

function sha256(bytes) {
    return crypto.createHash("sha256").update(bytes).digest("hex");
}

// The version package-lock.json pins for a top-level dependency, or null.
function lockedVersion(lock, pkg) {
    return lock.packages?.[`node_modules/${pkg}`]?.version ?? null;
}

// The manifest entries web/vendor/ should hold: [{path, package, version, source, sha256}], sorted by
// path, with the bytes of each file from node_modules. Throws when node_modules does not hold the
// locked version (the files would then not be the lock file's).
export function plan({ root = kRepoRoot } = {}) {
    const lock = JSON.parse(fs.readFileSync(path.join(root, "package-lock.json"), "utf8"));
    const out = [];
    for (const v of kVendored) {
        const version = lockedVersion(lock, v.package);
        if (!version) throw new Error(`[vendor_web] package-lock.json does not lock '${v.package}'`);
        const pkgDir = path.join(root, "node_modules", v.package);
        const installed = JSON.parse(fs.readFileSync(path.join(pkgDir, "package.json"), "utf8")).version;
        if (installed !== version)
            throw new Error(`[vendor_web] node_modules/${v.package}: expected ${version} (package-lock.json), got ${installed}; run npm ci`);
        const pairs = [...v.files];
        for (const [dest, srcDir, keep] of v.dirs ?? []) {
            for (const name of fs.readdirSync(path.join(pkgDir, srcDir)).filter(keep).sort())
                pairs.push([`${dest}/${name}`, `${srcDir}/${name}`]);
        }
        for (const [dest, source] of pairs) {
            const bytes = fs.readFileSync(path.join(pkgDir, source));
            out.push({ path: dest, package: v.package, version, source, sha256: sha256(bytes), bytes });
        }
    }
    return out.sort((a, b) => (a.path < b.path ? -1 : a.path > b.path ? 1 : 0));
}

function manifestText(entries) {
    const packages = {};
    for (const e of [...entries].sort((a, b) => (a.package < b.package ? -1 : 1))) packages[e.package] = e.version;
    const files = entries.map(({ path: p, package: pkg, version, source, sha256: h }) => ({ path: p, package: `${pkg}@${version}`, source, sha256: h }));
    return JSON.stringify({ generated_by: "tools/vendor_web.mjs from package-lock.json", packages, files }, null, 2) + "\n";
}

// Every file under dir, as paths relative to it with "/" separators.
function listFiles(dir, prefix = "") {
    if (!fs.existsSync(dir)) return [];
    const out = [];
    for (const d of fs.readdirSync(dir, { withFileTypes: true })) {
        const rel = prefix ? `${prefix}/${d.name}` : d.name;
        if (d.isDirectory()) out.push(...listFiles(path.join(dir, d.name), rel));
        else out.push(rel);
    }
    return out;
}

// Rewrites vendorDir from node_modules: stale files are removed, so it holds exactly the plan.
export function write({ root = kRepoRoot, vendorDir = path.join(root, "web", "vendor") } = {}) {
    const entries = plan({ root });
    fs.rmSync(vendorDir, { recursive: true, force: true });
    for (const e of entries) {
        fs.mkdirSync(path.dirname(path.join(vendorDir, e.path)), { recursive: true });
        fs.writeFileSync(path.join(vendorDir, e.path), e.bytes);
    }
    fs.writeFileSync(path.join(vendorDir, kManifestName), manifestText(entries));
    return entries;
}

// The ways vendorDir differs from what package-lock.json and node_modules say it should hold, as
// messages naming the file and showing expected vs actual; [] when it is up to date. lockPath is
// separate so a test can check one vendored copy against a tampered lock file.
export function verify({ root = kRepoRoot, vendorDir = path.join(root, "web", "vendor"),
    lockPath = path.join(root, "package-lock.json") } = {}) {
    const problems = [];
    const manifestPath = path.join(vendorDir, kManifestName);
    if (!fs.existsSync(manifestPath)) return [`${manifestPath} is missing; run node tools/vendor_web.mjs`];
    let manifest;
    try {
        manifest = JSON.parse(fs.readFileSync(manifestPath, "utf8"));
    } catch (e) {
        return [`${kManifestName}: not JSON (${e.message})`];
    }
    // The manifest against the lock file: the versions it names are the locked ones.
    const lock = JSON.parse(fs.readFileSync(lockPath, "utf8"));
    for (const [pkg, version] of Object.entries(manifest.packages ?? {})) {
        const locked = lockedVersion(lock, pkg);
        if (locked !== version) problems.push(`${kManifestName}: ${pkg}@${version}, but package-lock.json locks ${locked ?? "nothing"}`);
    }
    for (const f of manifest.files ?? []) {
        const pkg = f.package.slice(0, f.package.lastIndexOf("@"));
        const locked = lockedVersion(lock, pkg);
        if (f.package !== `${pkg}@${locked}`) problems.push(`${f.path}: from ${f.package}, but package-lock.json locks ${pkg}@${locked ?? "nothing"}`);
    }
    // The files against the manifest and against node_modules (which must hold the locked version).
    let expected;
    try {
        expected = plan({ root });
    } catch (e) {
        return [...problems, e.message];
    }
    const listed = new Map((manifest.files ?? []).map((f) => [f.path, f]));
    for (const e of expected) {
        const f = listed.get(e.path);
        const onDisk = path.join(vendorDir, e.path);
        if (!f) problems.push(`${e.path}: in node_modules/${e.package}/${e.source} but not in ${kManifestName}`);
        else if (f.sha256 !== e.sha256 || f.source !== e.source)
            problems.push(`${e.path}: ${kManifestName} says ${f.source} sha256 ${f.sha256}, node_modules/${e.package} has ${e.source} sha256 ${e.sha256}`);
        if (!fs.existsSync(onDisk)) problems.push(`${e.path}: missing from ${vendorDir}`);
        else if (sha256(fs.readFileSync(onDisk)) !== e.sha256)
            problems.push(`${e.path}: sha256 ${sha256(fs.readFileSync(onDisk))}, expected ${e.sha256} (node_modules/${e.package}/${e.source})`);
    }
    const wanted = new Set(expected.map((e) => e.path));
    for (const p of listed.keys()) if (!wanted.has(p)) problems.push(`${p}: in ${kManifestName} but not vendored by tools/vendor_web.mjs`);
    for (const p of listFiles(vendorDir)) if (p !== kManifestName && !wanted.has(p)) problems.push(`${p}: in ${vendorDir} but not vendored by tools/vendor_web.mjs`);
    return problems;
}

if (process.argv[1] && path.resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
    if (process.argv.includes("--check")) {
        const problems = verify();
        for (const p of problems) console.log(`[vendor_web] ${p}`);
        console.log(problems.length ? `[vendor_web] web/vendor/ is out of date (${problems.length} problems); run node tools/vendor_web.mjs` : "[vendor_web] web/vendor/ matches package-lock.json");
        process.exit(problems.length ? 1 : 0);
    }
    const entries = write();
    const bytes = entries.reduce((n, e) => n + e.bytes.length, 0);
    for (const id of new Set(entries.map((e) => `${e.package}@${e.version}`))) console.log(`[vendor_web] ${id}`);
    console.log(`[vendor_web] wrote ${entries.length} files (${(bytes / 1e6).toFixed(2)} MB) and ${kManifestName} to web/vendor/`);
}
