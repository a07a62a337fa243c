// web_vendor.test.mjs — the web page's vendored libraries (web/vendor/) cannot drift from the npm
// lock file: web/vendor/manifest.json names the versions package-lock.json locks, and every
// vendored file has the manifest's sha256, which is that of the file in node_modules (checked by
// tools/vendor_web.mjs's verify(), and here once more independently of it). The check is shown to
// fail: on copies of web/vendor/ with a file edited, a version changed, a file added, and against a
// lock file that locks another version. Every file index.html loads exists under web/.
// Prints "N passed, M failed"; exits 1 on failure.
import crypto from "node:crypto";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { suite } from "./serve_util.mjs";

const src = process.env.SLUICE_SOURCE_DIR;
if (!src) {
    console.error("[web_vendor] SLUICE_SOURCE_DIR must be set");
    process.exit(2);
}
const { verify } = await import(path.join(src, "tools", "vendor_web.mjs"));
const { check, test, finish } = suite("web_vendor");
const vendorDir = path.join(src, "web", "vendor");
const sha256 = (file) => crypto.createHash("sha256").update(fs.readFileSync(file)).digest("hex");

await test("the vendored copy matches the lock file", async () => {
    const problems = verify({ root: src });
    check("verify: no problems", problems.length === 0, problems.join("\n"));
});

await test("independently: manifest versions = lock, hashes = files = node_modules", async () => {
    const manifest = JSON.parse(fs.readFileSync(path.join(vendorDir, "manifest.json"), "utf8"));
    const lock = JSON.parse(fs.readFileSync(path.join(src, "package-lock.json"), "utf8"));
    const pkg = JSON.parse(fs.readFileSync(path.join(src, "package.json"), "utf8"));
    const names = Object.keys(manifest.packages);
    check("manifest: the four libraries", ["markdown-it", "@highlightjs/cdn-assets", "katex", "dompurify"].every((n) => names.includes(n)), names.join(", "));
    for (const [name, version] of Object.entries(manifest.packages)) {
        check(`${name}: manifest = package-lock.json`, lock.packages[`node_modules/${name}`]?.version === version, `${version} vs ${lock.packages[`node_modules/${name}`]?.version}`);
        check(`${name}: an exact version in package.json`, pkg.dependencies[name] === version, `${pkg.dependencies[name]} vs ${version}`);
    }
    for (const f of manifest.files) {
        const at = f.package.lastIndexOf("@");
        const name = f.package.slice(0, at);
        const vendored = path.join(vendorDir, f.path);
        const original = path.join(src, "node_modules", name, f.source);
        check(`${f.path}: vendored file has the manifest's hash`, fs.existsSync(vendored) && sha256(vendored) === f.sha256, f.sha256);
        check(`${f.path}: node_modules' file has the manifest's hash`, fs.existsSync(original) && sha256(original) === f.sha256, original);
    }
    check("manifest: KaTeX's fonts are woff2 only", manifest.files.some((f) => f.path.endsWith(".woff2")) &&
        !manifest.files.some((f) => /\.(woff|ttf)$/.test(f.path)));
});

// A scratch copy of web/vendor/ (and of the lock file) to tamper with.
function scratch() {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), "sluice-vendor-"));
    fs.cpSync(vendorDir, path.join(dir, "vendor"), { recursive: true });
    fs.copyFileSync(path.join(src, "package-lock.json"), path.join(dir, "package-lock.json"));
    return { dir, vendor: path.join(dir, "vendor"), lock: path.join(dir, "package-lock.json") };
}

await test("drift is caught", async () => {
    const s = scratch();
    try {
        const run = () => verify({ root: src, vendorDir: s.vendor, lockPath: s.lock });
        check("scratch copy: clean", run().length === 0, run().join("\n"));

        const js = path.join(s.vendor, "katex", "katex.min.js");
        const bytes = fs.readFileSync(js);
        fs.writeFileSync(js, Buffer.concat([bytes, Buffer.from("\n// edited")]));
        let p = run();
        check("an edited file is caught", p.some((m) => m.startsWith("katex/katex.min.js: sha256")), p.join("\n"));
        fs.writeFileSync(js, bytes);

        const mpath = path.join(s.vendor, "manifest.json");
        const mtext = fs.readFileSync(mpath, "utf8");
        const m = JSON.parse(mtext);
        m.packages.dompurify = "3.0.0";
        fs.writeFileSync(mpath, JSON.stringify(m));
        p = run();
        check("a manifest version that is not the locked one is caught", p.some((x) => x.includes("dompurify@3.0.0") && x.includes("package-lock.json")), p.join("\n"));
        fs.writeFileSync(mpath, mtext);

        fs.writeFileSync(path.join(s.vendor, "dompurify", "extra.js"), "alert(1)");
        p = run();
        check("a file the tool does not vendor is caught", p.some((x) => x.startsWith("dompurify/extra.js")), p.join("\n"));
        fs.rmSync(path.join(s.vendor, "dompurify", "extra.js"));

        fs.rmSync(path.join(s.vendor, "markdown-it", "markdown-it.min.js"));
        p = run();
        check("a missing file is caught", p.some((x) => x.startsWith("markdown-it/markdown-it.min.js: missing")), p.join("\n"));

        const lock = JSON.parse(fs.readFileSync(s.lock, "utf8"));
        lock.packages["node_modules/markdown-it"].version = "99.0.0";
        fs.writeFileSync(s.lock, JSON.stringify(lock));
        p = run();
        check("a lock file bumped without re-vendoring is caught", p.some((x) => x.includes("markdown-it") && x.includes("99.0.0")), p.join("\n"));
    } finally {
        fs.rmSync(s.dir, { recursive: true, force: true });
    }
});

await test("index.html loads only files that exist under web/", async () => {
    const html = fs.readFileSync(path.join(src, "web", "index.html"), "utf8");
    const refs = [...html.matchAll(/(?:src|href)="([^"#]+)"/g)].map((x) => x[1]);
    check("index.html: references found", refs.length >= 8, refs.join(", "));
    for (const r of refs) {
        check(`index.html: ${r} is local`, !/^[a-z]+:|^\/\//i.test(r));
        check(`index.html: ${r} exists`, fs.existsSync(path.join(src, "web", r)));
    }
});

finish();
