// serve_util.mjs — shared by the server oracle suites: a free loopback port and a `sluice serve`
// child process that is always killed when the suite exits, with its stderr kept for failure
// reports. (Not a suite itself: ctest runs only *.test.mjs.)
import { spawn } from "node:child_process";
import net from "node:net";

export function freePort() {
    return new Promise((resolve, reject) => {
        const s = net.createServer();
        s.once("error", reject);
        s.listen(0, "127.0.0.1", () => {
            const { port } = s.address();
            s.close(() => resolve(port));
        });
    });
}

// Starts `bin serve ...args --port P`. Returns {port, log, exited, kill(), ready()}: `log` grows
// with the server's stderr; ready() waits for "listening on" and throws when the server exits or
// does not start within `ms`.
export async function startServe(bin, args) {
    const port = await freePort();
    const child = spawn(bin, ["serve", ...args, "--port", String(port)], { stdio: ["ignore", "ignore", "pipe"] });
    const s = {
        port,
        log: "",
        exited: false,
        kill() {
            if (!s.exited) child.kill("SIGKILL");
        },
        async ready(ms = 30000) {
            for (const end = Date.now() + ms; Date.now() < end && !s.log.includes("listening on");) {
                if (s.exited) throw new Error(`server exited: ${s.log}`);
                await new Promise((r) => setTimeout(r, 100));
            }
            if (!s.log.includes("listening on")) throw new Error(`server did not start: ${s.log}`);
        },
    };
    child.stderr.on("data", (d) => (s.log += d.toString()));
    child.on("exit", () => (s.exited = true));
    process.on("exit", () => s.kill());
    return s;
}
