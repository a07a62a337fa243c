// A bounded load test of `sluice serve` on loopback: N concurrent streaming clients send chat
// requests back to back for D seconds; reports requests, errors, tokens/s, and the server's RSS
// before and after (memory growth). Only 127.0.0.1 is contacted; the loop ends by itself.
//
//   node bench/server_load.mjs [BIN] [MODEL] [--clients 32] [--seconds 30] [--parallel 2]
import { spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import net from 'node:net';

const args = process.argv.slice(2);
const opt = (name, def) => { const i = args.indexOf(name); return i >= 0 ? args[i + 1] : def; };
const bin = args[0] && !args[0].startsWith('--') ? args[0] : 'build/bin/sluice';
const model = args[1] && !args[1].startsWith('--') ? args[1] : 'models/tiny-next';
const clients = Number(opt('--clients', 32)), seconds = Number(opt('--seconds', 30)), parallel = Number(opt('--parallel', 2));

const port = await new Promise((r) => { const s = net.createServer(); s.listen(0, '127.0.0.1', () => { const p = s.address().port; s.close(() => r(p)); }); });
const server = spawn(bin, ['serve', model, '--port', String(port), '--parallel', String(parallel), '--ctx-size', '2048'], { stdio: ['ignore', 'ignore', 'inherit'] });
const rss = () => { try { return Number(readFileSync(`/proc/${server.pid}/status`, 'utf8').match(/VmRSS:\s+(\d+)/)[1]) * 1024; } catch { return 0; } };
const base = `http://127.0.0.1:${port}`;
for (let i = 0; i < 200; i++) { try { if ((await fetch(base + '/health')).ok) break; } catch {} await new Promise((r) => setTimeout(r, 100)); }

const modelId = (await (await fetch(base + '/v1/models')).json()).data[0].id;
let firstError = '';
const prompts = ['def add(a, b):', 'Write a loop that prints 1 to 10.', 'import json', 'class Point:', 'What is a list comprehension?'];
let requests = 0, errors = 0, tokens = 0;
let deadline = Date.now() + 5000;  // warm-up: sessions and buffers reach their steady size
async function client(id) {
  let k = id;
  while (Date.now() < deadline) {
    try {
      const res = await fetch(base + '/v1/chat/completions', {
        method: 'POST', headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ model: modelId, stream: true, max_tokens: 32, temperature: 0.8, seed: k,
                               messages: [{ role: 'user', content: prompts[k++ % prompts.length] }] }),
      });
      if (!res.ok) { errors++; const t = await res.text(); if (!firstError) firstError = `${res.status} ${t}`; continue; }
      const text = await res.text();
      if (!text.includes('data: [DONE]')) errors++;
      tokens += (text.match(/"delta":\{"content"/g) || []).length;
      requests++;
    } catch (e) { errors++; if (!firstError) firstError = String(e); }
  }
}
await Promise.all(Array.from({ length: clients }, (_, i) => client(i)));
requests = 0; errors = 0; tokens = 0;
const rssStart = rss();
deadline = Date.now() + seconds * 1000;
const t0 = Date.now();
await Promise.all(Array.from({ length: clients }, (_, i) => client(i)));
const elapsed = (Date.now() - t0) / 1000;
const rssEnd = rss();
server.kill('SIGTERM');
console.log(JSON.stringify({ clients, seconds: elapsed, parallel, requests, errors, content_chunks: tokens,
  first_error: firstError || null, chunks_per_s: tokens / elapsed, requests_per_s: requests / elapsed, server_rss_start_bytes: rssStart, server_rss_end_bytes: rssEnd }, null, 1));
process.exit(errors ? 1 : 0);
