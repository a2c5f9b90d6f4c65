// bench/http_load: an OpenAI-API load generator for lanes serve. Reports time to first token,
// inter-token latency and aggregate tokens/s at several client counts, (--prefill N) the
// latency of /health, /metrics and /slots while an N-token prompt is processed, and
// (--one-stream N) one client's decode speed, streamed and not, over N-token completions.
//
//   node bench/http_load.mjs --model ../shared/models/stories260K.gguf [--clients 1,4,16]
//        [--requests 4] [--max-tokens 64] [--prefill 1500] [--lanes 16] [--threads T]
//   node bench/http_load.mjs --model M --one-stream 256 [--requests 5] [--json] [serve's flags after --]
//   node bench/http_load.mjs --url http://127.0.0.1:8080 [--key KEY] ...
import { startServer } from '../tests/http/lib.mjs';
import http from 'node:http';
import path from 'node:path';

const dash = process.argv.indexOf('--');
const serveArgs = dash < 0 ? [] : process.argv.slice(dash + 1);
const args = Object.fromEntries(
	process.argv.slice(2, dash < 0 ? undefined : dash).reduce((acc, a, i, all) => (a.startsWith('--') ? [...acc, [a.slice(2), all[i + 1] && !all[i + 1].startsWith('--') ? all[i + 1] : '1']] : acc), []),
);
const oneStream = Number(args['one-stream'] || 0);
const clients = oneStream ? [] : (args.clients || '1,4,16').split(',').map(Number);
const perClient = Number(args.requests || 4);
const maxTokens = Number(args['max-tokens'] || 64);
const prefill = Number(args.prefill || 0);
const key = args.key || '';
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function start() {
	if (args.url) return { url: args.url, stop: async () => {} };
	if (!args.model) throw new Error('give --url of a running server or --model to start one');
	const bin = path.resolve(args.bin || 'build/lanes');
	// one stream runs serve as it comes (its defaults, or the flags after --)
	const extra = oneStream ? serveArgs : ['--lanes', args.lanes || '16', '--ctx', args.ctx || '32768', ...serveArgs];
	if (args.threads) extra.push('--threads', args.threads);
	const srv = await startServer(['-m', args.model, ...extra], {}, { bin });
	return { url: srv.url, stop: async () => { srv.proc.kill('SIGTERM'); await srv.exited; } };
}

const headers = () => ({ 'Content-Type': 'application/json', ...(key ? { Authorization: `Bearer ${key}` } : {}) });

// One streamed completion: [ttft ms, inter-token gaps ms, tokens].
async function one(url, i) {
	const t0 = performance.now();
	const r = await fetch(`${url}/v1/completions`, {
		method: 'POST', headers: headers(),
		body: JSON.stringify({ prompt: `Story ${i}: once upon a time`, max_tokens: maxTokens, ignore_eos: true, stream: true,
			stream_options: { include_usage: true }, seed: i }),
	});
	if (r.status !== 200) throw new Error(`HTTP ${r.status}: ${await r.text()}`);
	let ttft = -1, last = 0, tokens = 0, buf = '';
	const gaps = [];
	const dec = new TextDecoder();
	for await (const chunk of r.body) {
		const now = performance.now();
		buf += dec.decode(chunk, { stream: true });
		let k;
		while ((k = buf.indexOf('\n\n')) >= 0) {
			const line = buf.slice(0, k);
			buf = buf.slice(k + 2);
			if (!line.startsWith('data: {')) continue;
			const d = JSON.parse(line.slice(6));
			if (d.usage) tokens = d.usage.completion_tokens;
			if (!d.choices.length || !d.choices[0].text) continue;
			if (ttft < 0) ttft = now - t0;
			else gaps.push(now - last);
			last = now;
		}
	}
	return { ttft, gaps, tokens };
}

const q = (v, f) => (v.length ? v[Math.min(v.length - 1, Math.floor(f * v.length))] : NaN);
const fmt = (x) => (Number.isFinite(x) ? x.toFixed(1) : 'n/a');

async function load(url) {
	console.log(`| clients | requests | ttft p50 ms | ttft p99 ms | itl p50 ms | itl p99 ms | tokens | aggregate tok/s |`);
	console.log(`|---|---|---|---|---|---|---|---|`);
	let serial = 0;
	for (const c of clients) {
		const t0 = performance.now();
		const results = await Promise.all(
			Array.from({ length: c }, async () => {
				const out = [];
				for (let k = 0; k < perClient; k++) out.push(await one(url, serial++));
				return out;
			}),
		);
		const wall = (performance.now() - t0) / 1000;
		const all = results.flat();
		const ttft = all.map((r) => r.ttft).sort((a, b) => a - b);
		const itl = all.flatMap((r) => r.gaps).sort((a, b) => a - b);
		const tokens = all.reduce((s, r) => s + r.tokens, 0);
		console.log(`| ${c} | ${all.length} | ${fmt(q(ttft, 0.5))} | ${fmt(q(ttft, 0.99))} | ${fmt(q(itl, 0.5))} | ${fmt(q(itl, 0.99))} | ${tokens} | ${fmt(tokens / wall)} |`);
	}
}

async function control(url) {
	const ids = [];
	let x = 12345;
	for (let i = 0; i < prefill; i++) (x = (Math.imul(x, 1664525) + 1013904223) >>> 0), ids.push(3 + (x % 500));
	let done = false;
	const t0 = performance.now();
	const reply = fetch(`${url}/v1/completions`, { method: 'POST', headers: headers(), body: JSON.stringify({ prompt: ids, max_tokens: 1 }) })
		.then((r) => r.json()).then((j) => ((done = true), j));
	const lat = { '/health': [], '/metrics': [], '/slots': [] };
	while (!done) {
		for (const p of Object.keys(lat)) {
			const s = performance.now();
			await (await fetch(url + p)).text();
			if (!done) lat[p].push(performance.now() - s);
		}
		await sleep(10);
	}
	const r = await reply;
	console.log(`\nprefill of ${r.usage ? r.usage.prompt_tokens : '?'} tokens took ${((performance.now() - t0) / 1000).toFixed(1)} s; control reads meanwhile:`);
	console.log(`| path | n | p50 ms | p99 ms | max ms |`);
	console.log(`|---|---|---|---|---|`);
	for (const [p, v] of Object.entries(lat)) {
		v.sort((a, b) => a - b);
		console.log(`| ${p} | ${v.length} | ${q(v, 0.5).toFixed(2)} | ${q(v, 0.99).toFixed(2)} | ${v.length ? v.at(-1).toFixed(2) : 'n/a'} |`);
	}
}

// One completion of n tokens, streamed or not: its tokens over the wall time of the request.
// node:http, not fetch: fetch's web streams cost the client more per chunk than the server
// spends on it, and on a small machine the client shares the cores being measured.
const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
function post(url, body) {
	const u = new URL(`${url}/v1/completions`);
	const data = JSON.stringify(body);
	return new Promise((resolve, reject) => {
		const req = http.request({ host: u.hostname, port: u.port, path: u.pathname, method: 'POST', agent,
			headers: { ...headers(), 'Content-Length': Buffer.byteLength(data) } }, (res) => {
			const parts = [];
			res.on('data', (d) => parts.push(d));
			res.on('end', () => resolve({ status: res.statusCode, text: Buffer.concat(parts).toString() }));
			res.on('error', reject);
		});
		req.on('error', reject);
		req.end(data);
	});
}

async function completion(url, n, stream) {
	const t0 = performance.now();
	const r = await post(url, { prompt: 'Once upon a time', max_tokens: n, ignore_eos: true, stream, seed: 1,
		...(stream ? { stream_options: { include_usage: true } } : {}) });
	if (r.status !== 200) throw new Error(`HTTP ${r.status}: ${r.text}`);
	const wall = (performance.now() - t0) / 1000;
	let tokens = 0;
	if (!stream) tokens = JSON.parse(r.text).usage.completion_tokens;
	else for (const line of r.text.split('\n\n')) if (line.startsWith('data: {') && line.includes('"usage":{')) tokens = JSON.parse(line.slice(6)).usage.completion_tokens;
	if (tokens !== n) throw new Error(`asked for ${n} tokens, got ${tokens}`);
	return tokens / wall;
}

const median = (v) => [...v].sort((a, b) => a - b)[Math.floor(v.length / 2)];

// One client, one request at a time, streamed and not in turn: tok/s per request.
async function single(url) {
	await completion(url, 16, false); // warms the server: pages, the first connection
	const res = { plain: [], stream: [] };
	for (let k = 0; k < perClient; k++) {
		res.plain.push(await completion(url, oneStream, false));
		res.stream.push(await completion(url, oneStream, true));
	}
	const out = { tokens: oneStream, plain_tps: median(res.plain), stream_tps: median(res.stream), plain: res.plain, stream: res.stream };
	if (args.json) console.log(JSON.stringify(out));
	else console.log(`one stream, ${oneStream}-token completions: ${fmt(out.plain_tps)} tok/s plain, ${fmt(out.stream_tps)} tok/s streamed (medians of ${perClient})`);
}

const srv = await start();
try {
	if (oneStream > 0) await single(srv.url);
	if (clients.length && perClient > 0) await load(srv.url);
	if (prefill > 0) await control(srv.url);
} finally {
	agent.destroy();
	await srv.stop();
}
