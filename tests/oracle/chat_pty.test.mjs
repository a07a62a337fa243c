// `sluice chat` driven through a real pseudo-terminal (util-linux `script` allocates it): the
// banner, line editing input, /think, a streamed reply, Ctrl-C stopping a long reply without
// ending the program, /stats showing that the second turn reused the first turn's state, /exit.
import { spawn } from 'node:child_process';
import path from 'node:path';

const bin = process.env.SLUICE_BIN;
const model = path.join(process.env.SLUICE_SOURCE_DIR, 'models/tiny-next');
let passed = 0, failed = 0;
const check = (ok, what) => { if (ok) passed++; else { failed++; console.error('FAIL: ' + what); } };

// `exec`: script(1) runs the command through $SHELL -c; dash (CI's /bin/sh) does not exec it,
// stays in the terminal's foreground group and dies of the Ctrl-C, and script reports its 130.
const cmd = `exec ${bin} chat ${model} -n 4000 --temperature 0.8 --seed 1 --ctx-size 8192`;
const child = spawn('script', ['-qfec', cmd, '/dev/null'], { stdio: ['pipe', 'pipe', 'pipe'], env: { ...process.env, TERM: 'xterm' } });
let screen = '';
child.stdout.on('data', (d) => { screen += d.toString(); });
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
// Waits until the screen output after offset `from` matches `re`.
const waitFor = async (re, ms, from = 0) => {
  const end = Date.now() + ms;
  while (Date.now() < end) { if (re.test(screen.slice(from))) return true; await sleep(50); }
  return false;
};
const type = (s) => child.stdin.write(s);

try {
  check(await waitFor(/sluice chat/, 20000), 'banner');
  type('/think off\r');
  check(await waitFor(/\(thinking off\)/, 5000), '/think off acknowledged');
  type('def add(a, b):\r');
  await sleep(1500);              // the reply streams (up to 4000 tokens)...
  type('\x03');                   // ...Ctrl-C stops it
  check(await waitFor(/\(stopped\)/, 20000), 'Ctrl-C stops the reply');
  let before = screen.length;
  type('/stats\r');
  check(await waitFor(/last reply: prompt \d+ tokens[^\n]*tokens at/, 5000, before), '/stats after the first turn');
  const first = screen.slice(before).match(/, (\d+) tokens at/);
  const asked = screen.length;
  type('and subtract?\r');
  // Stop the second reply once it streams. A short reply can end by itself first (sampling at
  // 0.8): then the prompt is back and there is nothing to stop.
  check(await waitFor(/and subtract\?[^\n]*\n[\s\S]*\S/, 20000, asked), 'second reply streams');
  await sleep(300);
  const ended = /\n> ?$/.test(screen);
  if (!ended) type('\x03');
  check(ended || await waitFor(/\(stopped\)/, 20000, asked), 'second reply stopped (or ended by itself)');
  before = screen.length;
  type('/stats\r');
  check(await waitFor(/last reply: prompt \d+ tokens \(\d+ computed\)/, 5000, before), 'second /stats');
  const m = screen.slice(before).match(/last reply: prompt (\d+) tokens \((\d+) computed\)/);
  // The history is reused up to the checkpoint before the first reply; only that reply (re-rendered
  // by the template) and the new message are computed, not the whole conversation.
  check(m && first && Number(m[2]) < Number(m[1]) && Number(m[2]) <= Number(first[1]) + 40,
        `second turn computes only the last reply and the new message (${m && m[0]}; first reply ${first && first[1]} tokens)`);
  type('/exit\r');
  const code = await new Promise((resolve) => { child.on('exit', resolve); setTimeout(() => resolve('timeout'), 10000); });
  check(code === 0, `exit code ${code}`);
} finally {
  child.kill('SIGKILL');
}
if (failed) console.error(screen.slice(-2000));
console.log(`${passed} passed, ${failed} failed`);
process.exit(failed ? 1 : 0);
