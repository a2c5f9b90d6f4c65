// tests/http: shared helpers — the server under test (LANES_URL, started by
// tests/script/http.sh) or servers a test starts itself, raw sockets, SSE parsing.
import { spawn, spawnSync } from 'node:child_process';
import net from 'node:net';
import path from 'node:path';
import fs from 'node:fs';

export const BIN = process.env.LANES_BIN ? path.resolve(process.env.LANES_BIN) : path.resolve('build/lanes');
export const SHARED = path.resolve(process.env.LANES_SHARED || '../shared');
export const TMP = process.env.LANES_TMP || fs.mkdtempSync('/tmp/lanes-http-');
// a folder of our own (no LANES_TMP: a test file or a benchmark run alone) goes with us
if (!process.env.LANES_TMP) process.on('exit', () => fs.rmSync(TMP, { recursive: true, force: true }));
export const STORIES = path.join(SHARED, 'models/stories260K.gguf');
export const KEY = process.env.LANES_KEY || 'test-key';
export const URL_ = process.env.LANES_URL;

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// A larger `lanes gen` model (qwen2.5-0.5b shape, Q4_0, stories260K's vocabulary) whose
// prompts take seconds: LANES_BIG_MODEL when the script made one, else written to TMP.
export function bigModel() {
	if (process.env.LANES_BIG_MODEL && fs.existsSync(process.env.LANES_BIG_MODEL)) return process.env.LANES_BIG_MODEL;
	const out = path.join(TMP, 'big-qwen2.5-0.5b-Q4_0.gguf');
	if (!fs.existsSync(out)) {
		const r = spawnSync(BIN, ['gen', '--shape', 'qwen2.5-0.5b', '--type', 'Q4_0', '--vocab', STORIES, '-o', out], { stdio: 'inherit' });
		if (r.status !== 0) throw new Error('lanes gen failed');
	}
	return out;
}

// The agents' model: `lanes gen --shape agent` (a tiny llama with a 131072-token window) over
// Qwen2's vocabulary, so the fallback template is ChatML, with --end-logit: it ends its turns
// with <|im_end|> after a few tokens, as agents need a model to.
export function agentModel() {
	const out = path.join(TMP, 'agent-F16.gguf');
	if (!fs.existsSync(out)) {
		const vocab = path.join(SHARED, 'vocab/ggml-vocab-qwen2.gguf');
		const r = spawnSync(BIN, ['gen', '--shape', 'agent', '--type', 'F16', '--vocab', vocab, '--end-logit', '24', '-o', out], { stdio: 'inherit' });
		if (r.status !== 0) throw new Error('lanes gen failed');
	}
	return out;
}

// A `lanes gen --shape SHAPE` model (Q4_0, stories260K's vocabulary), written to TMP once.
export function shapeModel(shape) {
	const out = path.join(TMP, `${shape}-Q4_0.gguf`);
	if (!fs.existsSync(out)) {
		const r = spawnSync(BIN, ['gen', '--shape', shape, '--type', 'Q4_0', '--vocab', STORIES, '-o', out], { stdio: 'inherit' });
		if (r.status !== 0) throw new Error('lanes gen failed');
	}
	return out;
}

// Starts `lanes serve` (bin: another build than BIN) on a free port; resolves once /health says ok.
export async function startServer(args, env = {}, { onListening, bin = BIN } = {}) {
	const proc = spawn(bin, ['serve', '--port', '0', ...args], {
		env: { ...process.env, ...env },
		stdio: ['ignore', 'pipe', 'pipe'],
	});
	let log = '';
	const exited = new Promise((resolve) => proc.on('exit', (code, signal) => resolve({ code, signal })));
	const port = await new Promise((resolve, reject) => {
		const onData = (d) => {
			log += d.toString();
			const m = log.match(/listening on http:\/\/[0-9.]+:(\d+)/);
			if (!m) return;
			proc.stderr.off('data', onData); // the log goes on below, once
			resolve(Number(m[1]));
		};
		proc.stderr.on('data', onData);
		proc.on('exit', (code) => reject(new Error(`lanes serve exited (${code}) before listening:\n${log}`)));
	});
	proc.stderr.on('data', (d) => (log += d.toString()));
	// keep each server's log next to the test's temporary files
	proc.on('exit', () => fs.writeFileSync(path.join(TMP, `serve-${port}.log`), log));
	const url = `http://127.0.0.1:${port}`;
	if (onListening) await onListening(url);
	for (let i = 0; i < 600; i++) {
		try {
			const r = await fetch(`${url}/health`);
			if (r.status === 200) break;
		} catch {}
		await sleep(50);
	}
	return { url, port, proc, exited, log: () => log };
}

export async function getJSON(url, opts = {}) {
	const r = await fetch(url, opts);
	return { status: r.status, headers: r.headers, body: await r.json() };
}

export async function postJSON(url, body, headers = {}) {
	return getJSON(url, {
		method: 'POST',
		headers: { 'Content-Type': 'application/json', Authorization: `Bearer ${KEY}`, ...headers },
		body: JSON.stringify(body),
	});
}

// Reads an SSE response into [{event, data}] (data parsed when JSON); onEvent sees each as it comes.
export async function readSSE(response, onEvent) {
	const events = [];
	const dec = new TextDecoder();
	let buf = '';
	for await (const chunk of response.body) {
		buf += dec.decode(chunk, { stream: true });
		let i;
		while ((i = buf.indexOf('\n\n')) >= 0) {
			const block = buf.slice(0, i);
			buf = buf.slice(i + 2);
			let event = null;
			const data = [];
			for (const line of block.split('\n')) {
				if (line.startsWith('event: ')) event = line.slice(7);
				else if (line.startsWith('data: ')) data.push(line.slice(6));
			}
			if (!data.length) continue;
			const text = data.join('\n');
			let parsed = text;
			try {
				parsed = JSON.parse(text);
			} catch {}
			const ev = { event, data: parsed };
			events.push(ev);
			if (onEvent) onEvent(ev);
		}
	}
	return events;
}

// Reads an NDJSON response (Ollama's streams) into its objects; a half line at the end is an error.
export async function readNDJSON(res) {
	const out = [];
	let buf = '';
	const dec = new TextDecoder();
	for await (const chunk of res.body) {
		buf += dec.decode(chunk, { stream: true });
		let k;
		while ((k = buf.indexOf('\n')) >= 0) {
			if (k) out.push(JSON.parse(buf.slice(0, k)));
			buf = buf.slice(k + 1);
		}
	}
	if (buf) throw new Error(`a half line ends the stream: ${buf.slice(0, 200)}`);
	return out;
}

export async function postSSE(url, body, headers = {}, onEvent) {
	const r = await fetch(url, {
		method: 'POST',
		headers: { 'Content-Type': 'application/json', Authorization: `Bearer ${KEY}`, ...headers },
		body: JSON.stringify(body),
	});
	if (r.status !== 200) return { status: r.status, body: await r.json(), events: [] };
	return { status: r.status, events: await readSSE(r, onEvent) };
}

// Sends raw bytes on a fresh connection; resolves with everything the server sent until it
// closes or timeoutMs passes.
export function rawExchange(port, bytes, { timeoutMs = 5000, keepOpen = false } = {}) {
	return new Promise((resolve, reject) => {
		const s = net.connect(port, '127.0.0.1');
		let got = Buffer.alloc(0);
		const t = setTimeout(() => {
			s.destroy();
			resolve({ text: got.toString('latin1'), timedOut: true });
		}, timeoutMs);
		s.on('connect', () => {
			for (const b of Array.isArray(bytes) ? bytes : [bytes]) s.write(b);
			if (!keepOpen) s.end();
		});
		s.on('data', (d) => (got = Buffer.concat([got, d])));
		s.on('error', () => {});
		s.on('close', () => {
			clearTimeout(t);
			resolve({ text: got.toString('latin1'), timedOut: false });
		});
	});
}

export function httpRequest(method, pathname, body, headers = {}) {
	const b = body === undefined ? '' : typeof body === 'string' ? body : JSON.stringify(body);
	let h = `${method} ${pathname} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer ${KEY}\r\nConnection: close\r\n`;
	for (const [k, v] of Object.entries(headers)) h += `${k}: ${v}\r\n`;
	if (method === 'POST' && !('Transfer-Encoding' in headers)) h += `Content-Length: ${Buffer.byteLength(b)}\r\n`;
	h += 'Content-Type: application/json\r\n\r\n';
	return h + b;
}

export function statusOf(raw) {
	const m = raw.match(/^HTTP\/1\.[01] (\d{3})/);
	return m ? Number(m[1]) : 0;
}

export function bodyOf(raw) {
	const i = raw.indexOf('\r\n\r\n');
	return i < 0 ? '' : raw.slice(i + 4);
}

export async function metric(url, name) {
	const t = await (await fetch(`${url}/metrics`)).text();
	const line = t.split('\n').find((l) => l.startsWith(name + ' '));
	return line ? Number(line.split(' ')[1]) : NaN;
}

export async function waitIdle(url, timeoutMs = 10000) {
	const t0 = Date.now();
	while (Date.now() - t0 < timeoutMs) {
		const s = (await getJSON(`${url}/slots`)).body;
		if (s.queue_depth === 0 && s.lanes.every((l) => l.phase === 'idle')) return Date.now() - t0;
		await sleep(10);
	}
	return -1;
}

// The shared server: LANES_URL when the script started one, else one started here.
let mainSrv = null;
export async function mainServer() {
	if (URL_) {
		for (let i = 0; i < 600; i++) {
			const ok = await fetch(`${URL_}/health`).then((r) => r.status === 200, () => false);
			if (ok) break;
			await sleep(50);
		}
		return { url: URL_, port: Number(new URL(URL_).port) };
	}
	if (!mainSrv) {
		// as tests/script/http.sh starts it: pricing fixed, so n-gram drafts pay on any machine
		mainSrv = await startServer(['-m', STORIES, '--api-key', KEY, '--price-row-us', '100', '--price-fixed-us', '20000']);
		// the file's process ends with its tests (killing the server), not when the server does
		for (const h of [mainSrv.proc, mainSrv.proc.stdout, mainSrv.proc.stderr]) h.unref();
		process.on('exit', () => mainSrv.proc.kill('SIGKILL'));
	}
	return mainSrv;
}

// The one wait (GET /metrics): { parked, parks, wakes }, each by wait kind.
export async function waits(url) {
	const t = await (await fetch(`${url}/metrics`)).text();
	const out = { parked: {}, parks: {}, wakes: {} };
	for (const m of t.matchAll(/^lanes_http_(parked|parks_total|wakes_total)\{wait="([a-z]+)"\} (\d+)$/gm))
		out[m[1].replace('_total', '')][m[2]] = Number(m[3]);
	return out;
}

// Once every request on url has ended: nothing is parked, and every park of every kind was
// ended by exactly one wake; each kind in used was parked at least once. The waits it read.
export async function assertWaitsSettled(assert, url, used = []) {
	let w;
	for (let i = 0; i < 500; i++) {
		w = await waits(url);
		if (Object.values(w.parked).every((n) => n === 0)) break;
		await sleep(10);
	}
	assert.ok(Object.keys(w.parks).length >= 6, 'every wait kind is listed');
	for (const k of Object.keys(w.parks)) {
		assert.equal(w.parked[k], 0, `no request is left waiting for ${k}`);
		assert.equal(w.wakes[k], w.parks[k], `every park for ${k} ended with exactly one wake`);
	}
	for (const k of used) assert.ok(w.parks[k] > 0, `requests waited for ${k}`);
	return w;
}

// Whether the lane host at url samples under grammars: a grammar of one sentence gives exactly it.
export async function samplesUnderGrammars(url) {
	const r = await postJSON(`${url}/v1/chat/completions`, { messages: [{ role: 'user', content: 'x' }], max_tokens: 16, grammar: 'root ::= "yes"' });
	return r.body?.choices?.[0]?.message?.content === 'yes';
}

// test(), for tests of constrained output: skipped where ok() says the lane host does not sample
// under grammars (ok is read when the test runs, after the file's before()).
export const grammarTest = (test, ok) => (name, fn) =>
	test(name, async (t) => (ok() ? fn(t) : t.skip('the lane host does not sample under grammars')));
