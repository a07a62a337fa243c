// sluice perplexity of the shipped 4-bit default model on its held-out text, against the
// perplexity PyTorch measured for the same 4-bit weights (within 2%) and for the bf16 weights
// (within 5%) — models/tiny-next/reference_perplexity.json, written at training time.
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import path from 'node:path';

const bin = process.env.SLUICE_BIN;
const root = process.env.SLUICE_SOURCE_DIR;
const model = path.join(root, 'models/tiny-next');
const ref = JSON.parse(readFileSync(path.join(model, 'reference_perplexity.json'), 'utf8'));
let passed = 0, failed = 0;
const check = (ok, what) => { if (ok) passed++; else { failed++; console.error('FAIL: ' + what); } };

const out = execFileSync(bin, ['perplexity', model, path.join(model, 'heldout.txt'), '--ctx-size', String(ref.ctx)],
                         { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] });
const m = out.match(/perplexity ([0-9.]+) .* over (\d+) scored tokens in (\d+) windows/);
check(m !== null, `unexpected output: ${out}`);
if (m) {
  const ppl = Number(m[1]);
  const q4 = ref.results.mlx_q4_shipped.ppl, bf16 = ref.results.bf16.ppl;
  console.log(`sluice ${ppl}, PyTorch 4-bit ${q4.toFixed(4)}, bf16 ${bf16.toFixed(4)}`);
  check(Number(m[2]) === ref.scored_tokens && Number(m[3]) === ref.windows, `windows/tokens ${m[3]}/${m[2]} vs ${ref.windows}/${ref.scored_tokens}`);
  check(Math.abs(ppl / q4 - 1) < 0.02, `4-bit: ${ppl} vs ${q4}`);
  check(Math.abs(ppl / bf16 - 1) < 0.05, `bf16: ${ppl} vs ${bf16}`);
}
console.log(`${passed} passed, ${failed} failed`);
process.exit(failed ? 1 : 0);
