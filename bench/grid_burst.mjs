// bench/grid_burst: what a peer adds to a burst. A burst of streamed completions to A alone,
// then to A with B as its --peer (same model and lanes each): aggregate tokens/s and time to
// first token (p50, p99); then the first-token latency a forward adds: A's only lane held by a
// lease, so every request goes to B, against the same requests sent to B directly.
//
//   [LANES_BIN=build/lanes] node bench/grid_burst.mjs [--model FILE] [--requests 24] [--max-tokens 32] [--lanes 2] [--threads T]
//        [--forward-only] (the last measurement alone)
// Without --model it writes build/bench-models/tinyllama-1.1b-Q4_0.gguf (`lanes gen`) first.
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { startServer, BIN } from '../tests/http/lib.mjs';

const args = Object.fromEntries(
	process.argv.slice(2).reduce((acc, a, i, all) => (a.startsWith('--') ? [...acc, [a.slice(2), all[i + 1] && !all[i + 1].startsWith('--') ? all[i + 1] : '1']] : acc), []),
);
const bin = BIN; // LANES_BIN, else build/lanes
const n = Number(args.requests || 24), maxTokens = Number(args['max-tokens'] || 32), lanes = args.lanes || '2';
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

function model() {
	if (args.model) return args.model;
	const out = path.resolve('build/bench-models/tinyllama-1.1b-Q4_0.gguf');
	if (!fs.existsSync(out)) {
		fs.mkdirSync(path.dirname(out), { recursive: true });
		const vocab = path.join(process.env.LANES_SHARED || '../shared', 'vocab/ggml-vocab-llama-spm.gguf');
		const r = spawnSync(bin, ['gen', '--shape', 'tinyllama-1.1b', '--type', 'Q4_0', '--vocab', vocab, '-o', out], { stdio: 'inherit' });
		if (r.status !== 0) throw new Error('lanes gen failed');
	}
	return out;
}

async function serve(extra, nLanes = lanes) {
	const threads = args.threads ? ['--threads', args.threads] : [];
	const srv = await startServer(['-m', model(), '--lanes', nLanes, ...threads, ...extra]);
	return { url: srv.url, stop: () => (srv.proc.kill('SIGTERM'), srv.exited) };
}

// One streamed completion: time to first token (ms), tokens, and who answered.
async function one(url, i) {
	const t0 = performance.now();
	const r = await fetch(`${url}/v1/completions`, {
		method: 'POST', headers: { 'Content-Type': 'application/json' },
		body: JSON.stringify({ prompt: `Story ${i}: once upon a time there was`, max_tokens: maxTokens, ignore_eos: true, stream: true, seed: i }),
	});
	if (r.status !== 200) throw new Error(`HTTP ${r.status}: ${await r.text()}`);
	let ttft = -1, tokens = 0, buf = '';
	const dec = new TextDecoder();
	for await (const chunk of r.body) {
		buf += dec.decode(chunk, { stream: true });
		let k;
		while ((k = buf.indexOf('\n\n')) >= 0) {
			const ev = buf.slice(0, k);
			buf = buf.slice(k + 2);
			if (!ev.startsWith('data: {')) continue;
			const d = JSON.parse(ev.slice(6));
			if (d.choices?.[0]?.text !== undefined && d.choices[0].finish_reason === null) {
				if (ttft < 0) ttft = performance.now() - t0;
				tokens++;
			}
		}
	}
	return { ttft, tokens, peer: r.headers.get('x-lanes-peer') };
}

const pct = (v, p) => [...v].sort((a, b) => a - b)[Math.min(v.length - 1, Math.ceil((p / 100) * v.length) - 1)];

async function burst(url) {
	const t0 = performance.now();
	const res = await Promise.all(Array.from({ length: n }, (_, i) => one(url, i)));
	const s = (performance.now() - t0) / 1000, tokens = res.reduce((a, r) => a + r.tokens, 0), ttft = res.map((r) => r.ttft);
	return { tps: tokens / s, p50: pct(ttft, 50), p99: pct(ttft, 99), forwarded: res.filter((r) => r.peer).length, s };
}

const line = (name, b) =>
	console.log(`${name.padEnd(12)} ${b.tps.toFixed(1).padStart(8)} tok/s  ttft p50 ${b.p50.toFixed(0).padStart(6)} ms  p99 ${b.p99.toFixed(0).padStart(6)} ms  ${b.s.toFixed(1)} s  forwarded ${b.forwarded}/${n}`);

console.log(`${n} streamed requests x ${maxTokens} tokens, ${lanes} lanes per server, ${model()}`);
const b = await serve([]);
let a;
if (!args['forward-only']) {
	a = await serve([]);
	await one(a.url, -1); // warm
	line('A alone', await burst(a.url));
	await a.stop();
	a = await serve(['--peer', b.url, '--peer-poll-ms', '100']);
	await sleep(300);
	await one(a.url, -1);
	line('A + peer B', await burst(a.url));
	await a.stop();
}
// every request forwarded: A's only lane is leased away and one request waits behind it
a = await serve(['--peer', b.url, '--peer-poll-ms', '100'], '1');
await sleep(300);
const lease = await fetch(`${a.url}/v1/leases`, { method: 'POST', headers: { 'Content-Type': 'application/json' },
	body: JSON.stringify({ model: path.basename(model(), '.gguf'), ttl_ms: 600000 }) });
if (lease.status !== 201) throw new Error(`lease: ${lease.status}`);
const held = fetch(`${a.url}/v1/completions`, { method: 'POST', headers: { 'Content-Type': 'application/json' },
	body: JSON.stringify({ prompt: 'x', max_tokens: 1 }) }).catch(() => {});
await sleep(200);
const direct = [], via = [];
for (let i = 0; i < 8; i++) {
	direct.push((await one(b.url, 100 + i)).ttft);
	const r = await one(a.url, 100 + i);
	if (!r.peer) throw new Error('not forwarded');
	via.push(r.ttft);
}
await fetch(`${a.url}/v1/leases/${(await lease.json()).id}`, { method: 'DELETE' });
await held;
console.log(`first token alone on B: p50 ${pct(direct, 50).toFixed(1)} ms; forwarded through A: p50 ${pct(via, 50).toFixed(1)} ms; ` +
	`added ${(pct(via, 50) - pct(direct, 50)).toFixed(1)} ms (8 each, interleaved)`);
await a.stop();
await b.stop();
