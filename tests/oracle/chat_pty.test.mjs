// `sluice chat` driven through a real pseudo-terminal (util-linux `script` allocates it): the
// banner; Ctrl-C at the idle prompt (a fresh prompt, the typed line and its continuation lines
// discarded, the chat still answering); line editing input, /think, a streamed reply, Ctrl-C
// stopping a long reply without ending the program, /stats showing that the second turn reused the
// first turn's state, /exit; in a second chat, Ctrl-D at an empty prompt quitting.
import { spawn } from 'node:child_process';
import path from 'node:path';

const bin = process.env.SLUICE_BIN;
const model = path.join(process.env.SLUICE_SOURCE_DIR, 'models/tiny-next');
let passed = 0, failed = 0;
const check = (ok, what) => { if (ok) passed++; else { failed++; console.error('FAIL: ' + what); } };
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// Starts a chat on a pty, at the model's whole context (4096: more is refused at load). `exec`: script(1) runs the command through $SHELL -c; dash (CI's /bin/sh)
// does not exec it, stays in the terminal's foreground group and dies of the Ctrl-C, and script
// reports its 130.
const startChat = () => {
  const cmd = `exec ${bin} chat ${model} -n 4000 --temperature 0.8 --seed 1 --ctx-size 4096`;
  const child = spawn('script', ['-qfec', cmd, '/dev/null'], { stdio: ['pipe', 'pipe', 'pipe'], env: { ...process.env, TERM: 'xterm' } });
  const chat = { child, screen: '', exitCode: null };
  child.stdout.on('data', (d) => { chat.screen += d.toString(); });
  // Listening from the start: a chat that quits early must not be mistaken for one that hangs.
  const exited = new Promise((resolve) => child.on('exit', (code) => { chat.exitCode = code; resolve(code); }));
  chat.type = (s) => child.stdin.write(s);
  // Waits until the screen output after offset `from` matches `re` (false at once if the chat quit).
  chat.waitFor = async (re, ms, from = 0) => {
    const end = Date.now() + ms;
    while (Date.now() < end) {
      if (re.test(chat.screen.slice(from))) return true;
      if (chat.exitCode !== null) return false;
      await sleep(50);
    }
    return false;
  };
  chat.exit = (ms) => Promise.race([exited, sleep(ms).then(() => 'timeout')]);
  return chat;
};

const idlePrompt = /\n> $/;
// What Ctrl-C at the prompt prints: ^C, a new line, a fresh prompt.
const freshPrompt = /\^C\r?\n> $/;

let chat = startChat();
try {
  const { type, waitFor } = chat;
  check(await waitFor(/sluice chat[\s\S]*\n> $/, 20000), 'banner and prompt');

  // Ctrl-C at the idle prompt, before any reply: a fresh prompt, and the chat still answers.
  let before = chat.screen.length;
  type('\x03');
  check(await waitFor(freshPrompt, 5000, before), 'Ctrl-C at the idle prompt shows a fresh prompt');
  before = chat.screen.length;
  type('/stats\r');
  check(await waitFor(/last reply: prompt 0 tokens[^\n]*\n> $/, 5000, before), '/stats answers after Ctrl-C at the idle prompt');

  // Ctrl-C discards what was typed, continuation lines included: the next line is a command of its own.
  before = chat.screen.length;
  type('half a line \\\r');
  check(await waitFor(/\n\. $/, 5000, before), 'continuation prompt');
  type('and more');
  check(await waitFor(/and more$/, 5000, before), 'continuation line echoed');
  before = chat.screen.length;
  type('\x03');
  check(await waitFor(freshPrompt, 5000, before), 'Ctrl-C discards the typed lines');
  type('/think off\r');
  check(await waitFor(/\(thinking off\)/, 5000, before), '/think off acknowledged');

  // Ctrl-C once the reply streams: this one runs to 1,415 tokens, and a fixed wait (1.5 s before) lost
  // the race to a decode that now finishes it in about a second.
  const opened = chat.screen.length;
  type('def add(a, b):\r');
  check(await waitFor(/def add\(a, b\):[^\n]*\n[\s\S]*\S/, 20000, opened), 'the first reply streams');
  type('\x03');
  check(await waitFor(/\(stopped\)/, 20000), 'Ctrl-C stops the reply');
  before = chat.screen.length;
  type('/stats\r');
  check(await waitFor(/last reply: prompt \d+ tokens[^\n]*tokens at/, 5000, before), '/stats after the first turn');
  const first = chat.screen.slice(before).match(/, (\d+) tokens at/);
  const asked = chat.screen.length;
  type('and subtract?\r');
  // Stop the second reply once it streams. A short reply can end by itself first (sampling at
  // 0.8), even between the look at the screen and the Ctrl-C: then the Ctrl-C meets the idle
  // prompt and only gives a fresh one.
  check(await waitFor(/and subtract\?[^\n]*\n[\s\S]*\S/, 20000, asked), 'second reply streams');
  await sleep(300);
  const ended = idlePrompt.test(chat.screen);
  if (!ended) type('\x03');
  check(ended || await waitFor(/\(stopped\)|\^C\r?\n> $/, 20000, asked), 'second reply stopped (or ended by itself)');
  check(await waitFor(idlePrompt, 5000, asked), 'prompt after the second reply');
  before = chat.screen.length;
  type('/stats\r');
  check(await waitFor(/last reply: prompt \d+ tokens \(\d+ computed\)/, 5000, before), 'second /stats');
  const m = chat.screen.slice(before).match(/last reply: prompt (\d+) tokens \((\d+) computed\)/);
  // The history is reused up to the checkpoint before the first reply; only that reply (re-rendered
  // by the template) and the new message are computed, not the whole conversation.
  check(m && first && Number(m[2]) < Number(m[1]) && Number(m[2]) <= Number(first[1]) + 40,
        `second turn computes only the last reply and the new message (${m && m[0]}; first reply ${first && first[1]} tokens)`);
  check(chat.exitCode === null, `still running before /exit (exit code ${chat.exitCode})`);
  type('/exit\r');
  const code = await chat.exit(10000);
  check(code === 0, `/exit: exit code ${code}`);
} finally {
  chat.child.kill('SIGKILL');
}
if (failed) console.error(chat.screen.slice(-2000));

// Ctrl-D at an empty prompt quits (after a Ctrl-C there, which must not have ended the chat).
chat = startChat();
try {
  check(await chat.waitFor(/sluice chat[\s\S]*\n> $/, 20000), 'second chat: banner and prompt');
  const before = chat.screen.length;
  chat.type('\x03');
  check(await chat.waitFor(freshPrompt, 5000, before), 'second chat: Ctrl-C at the idle prompt');
  check(chat.exitCode === null, `second chat: still running after Ctrl-C (exit code ${chat.exitCode})`);
  chat.type('\x04');
  const code = await chat.exit(10000);
  check(code === 0, `Ctrl-D: exit code ${code}`);
} finally {
  chat.child.kill('SIGKILL');
}
if (failed) console.error(chat.screen.slice(-2000));

console.log(`${passed} passed, ${failed} failed`);
process.exit(failed ? 1 : 0);
