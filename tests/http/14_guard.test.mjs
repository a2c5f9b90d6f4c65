// Hostile clients and browsers: requests that cost far more than they send are refused or
// bounded before the expensive work (peak memory read from /proc), a forged Host or a page
// of another origin gets 403, POST bodies must be application/json, CORS per --cors-origin,
// Allow on 405, WWW-Authenticate on 401, and --protect-control.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import { spawnSync } from 'node:child_process';
import { startServer, rawExchange, statusOf, bodyOf, getJSON, postJSON, readSSE, STORIES, KEY, BIN } from './lib.mjs';

const servers = [];
async function serve(args) {
	const s = await startServer(['-m', STORIES, '--api-key', KEY, ...args]);
	servers.push(s);
	return s;
}
after(() => servers.forEach((s) => s.proc.kill('SIGKILL')));

// Peak resident memory of the server process so far, in MiB.
const peakMiB = (s) => Number(fs.readFileSync(`/proc/${s.proc.pid}/status`, 'utf8').match(/VmHWM:\s+(\d+) kB/)[1]) / 1024;

// One raw request with exactly these headers (Host included), and its status, headers and body.
async function raw(port, method, path, { headers = {}, body } = {}) {
	let h = `${method} ${path} HTTP/1.1\r\nConnection: close\r\n`;
	for (const [k, v] of Object.entries(headers)) h += `${k}: ${v}\r\n`;
	const b = body === undefined ? '' : typeof body === 'string' ? body : JSON.stringify(body);
	if (body !== undefined) h += `Content-Length: ${Buffer.byteLength(b)}\r\n`;
	const r = await rawExchange(port, [h + '\r\n', b], { timeoutMs: 20000, keepOpen: true });
	const head = r.text.slice(0, Math.max(0, r.text.indexOf('\r\n\r\n')));
	const hdr = {};
	for (const line of head.split('\r\n').slice(1)) {
		const i = line.indexOf(':');
		hdr[line.slice(0, i).toLowerCase()] = line.slice(i + 1).trim();
	}
	const text = bodyOf(r.text);
	let json = null;
	try {
		json = JSON.parse(text);
	} catch {}
	return { status: statusOf(r.text), headers: hdr, text, json };
}

const own = (s) => ({ Host: `127.0.0.1:${s.port}`, Authorization: `Bearer ${KEY}` });
const json = { 'Content-Type': 'application/json' };
const chat = (extra = {}) => ({ messages: [{ role: 'user', content: 'Once upon a time' }], max_tokens: 4, ...extra });

// ---- amplification ------------------------------------------------------------------------------

// Peak memory is asserted as growth over the peak after start-up; sanitizer builds (ASan's
// shadow and quarantine) get four times the room.
let amp, amp0, room;
before(async () => {
	amp = await serve([]);
	amp0 = peakMiB(amp);
	const props = await getJSON(`${amp.url}/props`, { headers: { Authorization: `Bearer ${KEY}` } });
	room = /sanitize/.test(props.body.build_flags) ? 4 : 1;
});
const grown = () => peakMiB(amp) - amp0;

test('/tokenize has its own size limit: an 8 MB body gets 413 and the peak memory stays low', async () => {
	const content = 'Once upon a time there was a little dog. '.repeat(Math.floor(8e6 / 42));
	const r = await raw(amp.port, 'POST', '/tokenize', { headers: { ...own(amp), ...json }, body: { content } });
	assert.equal(r.status, 413, r.text.slice(0, 200));
	assert.match(r.json.error.message, /--max-tokenize-bytes/);
	const d = await raw(amp.port, 'POST', '/detokenize', { headers: { ...own(amp), ...json }, body: { tokens: Array(2e6).fill(1) } });
	assert.equal(d.status, 413);
	assert.ok(grown() < 40 * room, `peak RSS grew ${grown().toFixed(0)} MiB`);
	// a body under the limit is tokenized as before
	const ok = await postJSON(`${amp.url}/tokenize`, { content: 'Once upon a time' });
	assert.equal(ok.status, 200);
	assert.ok(ok.body.tokens.length > 0);
});

// (before the bound this request ran for minutes: the timeout fails it)
test('n x max_tokens x top_logprobs over --max-output-bytes is refused before any work (non-streamed)', { timeout: 60000 }, async () => {
	const body = chat({ n: 32, max_tokens: 2000, logprobs: true, top_logprobs: 20 });
	const r = await postJSON(`${amp.url}/v1/chat/completions`, body);
	assert.equal(r.status, 400, JSON.stringify(r.body).slice(0, 200));
	assert.equal(r.body.error.param, 'max_tokens');
	assert.match(r.body.error.message, /--max-output-bytes/);
	const slots = (await getJSON(`${amp.url}/slots`)).body;
	assert.ok(slots.lanes.every((l) => l.phase === 'idle') && slots.queue_depth === 0, 'nothing was queued');
	// completions' logprobs (the number of alternatives) count alike
	const c = await postJSON(`${amp.url}/v1/completions`, { prompt: 'Once', n: 32, max_tokens: 2000, logprobs: 20 });
	assert.equal(c.status, 400);
	assert.equal(c.body.error.param, 'max_tokens');
	assert.ok(grown() < 40 * room, `peak RSS grew ${grown().toFixed(0)} MiB`);
});

test('240k messages are refused before the template and the tokenizer run', async () => {
	const messages = Array.from({ length: 240000 }, (_, i) => ({ role: i % 2 ? 'assistant' : 'user', content: 'hi' }));
	const r = await raw(amp.port, 'POST', '/v1/chat/completions', { headers: { ...own(amp), ...json }, body: { messages, max_tokens: 4 } });
	assert.equal(r.status, 400, r.text.slice(0, 200));
	assert.equal(r.json.error.param, 'messages');
	assert.equal(r.json.error.code, 'context_length_exceeded');
	// and a prompt of more text than the context can hold is refused without tokenizing it
	const p = await raw(amp.port, 'POST', '/v1/completions', {
		headers: { ...own(amp), ...json },
		body: { prompt: 'Once upon a time '.repeat(400000), max_tokens: 4 },
	});
	assert.equal(p.status, 400);
	assert.equal(p.json.error.param, 'prompt');
	assert.equal(p.json.error.code, 'context_length_exceeded');
	assert.ok(grown() < 250 * room, `peak RSS grew ${grown().toFixed(0)} MiB`);
});

test('--max-output-bytes bounds a non-streamed reply; a streamed one is sent as it is made', async () => {
	const s = await serve(['--max-output-bytes', '2048']);
	const body = { prompt: 'Once upon a time', max_tokens: 1500, ignore_eos: true, temperature: 0 };
	const r = await postJSON(`${s.url}/v1/completions`, body);
	assert.equal(r.status, 400, JSON.stringify(r.body).slice(0, 200));
	assert.equal(r.body.error.param, 'max_tokens');
	assert.match(r.body.error.message, /--max-output-bytes/);
	const st = await fetch(`${s.url}/v1/completions`, {
		method: 'POST',
		headers: { ...json, Authorization: `Bearer ${KEY}` },
		body: JSON.stringify({ ...body, stream: true }),
	});
	assert.equal(st.status, 200);
	const events = await readSSE(st);
	const text = events.filter((e) => e.data.choices).map((e) => e.data.choices[0].text).join('');
	assert.ok(text.length > 2048, `streamed ${text.length} bytes`);
	assert.equal(events.at(-1).data, '[DONE]');
});

// ---- Host, Origin, Content-Type ---------------------------------------------------------------

let g;
before(async () => (g = await serve([])));

test('a text/plain POST with a forged Host and a foreign Origin gets 403, not a completion', async () => {
	const r = await raw(g.port, 'POST', '/v1/chat/completions', {
		headers: { Host: 'evil.example:8080', Origin: 'http://evil.example:8080', 'Content-Type': 'text/plain', Authorization: `Bearer ${KEY}` },
		body: chat(),
	});
	assert.equal(r.status, 403, r.text.slice(0, 200));
	assert.equal(r.json.error.code, 'host_not_allowed');
	assert.match(r.json.error.message, /--allowed-host evil\.example/);
	assert.equal(r.headers['access-control-allow-origin'], undefined);
	// the Host alone, with a JSON body
	const h = await raw(g.port, 'POST', '/v1/chat/completions', { headers: { ...own(g), Host: 'evil.example:8080', ...json }, body: chat() });
	assert.equal(h.status, 403);
	// a GET too: DNS rebinding would read the answer
	assert.equal((await raw(g.port, 'GET', '/slots', { headers: { Host: 'evil.example' } })).status, 403);
});

test('loopback names with any port are this server', async () => {
	for (const host of ['127.0.0.1', `127.0.0.1:${g.port}`, 'localhost:1234', 'LOCALHOST', '[::1]:9', 'app.localhost']) {
		const r = await raw(g.port, 'GET', '/health', { headers: { Host: host } });
		assert.equal(r.status, 200, host);
	}
	assert.equal((await raw(g.port, 'GET', '/health', { headers: { Host: '10.1.2.3' } })).status, 403);
	assert.equal((await raw(g.port, 'GET', '/health', { headers: { Host: 'localhost:x' } })).status, 403);
});

test('a cross-origin request is refused; the server\'s own origin is not cross-origin', async () => {
	const r = await raw(g.port, 'POST', '/v1/chat/completions', { headers: { ...own(g), ...json, Origin: 'http://evil.example:8080' }, body: chat() });
	assert.equal(r.status, 403);
	assert.equal(r.json.error.code, 'origin_not_allowed');
	assert.match(r.json.error.message, /--cors-origin http:\/\/evil\.example:8080/);
	const a = await raw(g.port, 'POST', '/v1/messages', {
		headers: { ...own(g), ...json, Origin: 'null', 'anthropic-version': '2023-06-01' },
		body: chat(),
	});
	assert.equal(a.status, 403);
	assert.equal(a.json.error.type, 'permission_error');
	const same = await raw(g.port, 'POST', '/v1/chat/completions', { headers: { ...own(g), ...json, Origin: `http://127.0.0.1:${g.port}` }, body: chat() });
	assert.equal(same.status, 200);
	assert.equal(same.headers['access-control-allow-origin'], undefined);
});

test('POST bodies must be application/json (charset optional); others get 415', async () => {
	for (const ct of ['text/plain', 'application/x-www-form-urlencoded', 'multipart/form-data; boundary=x', 'application/json; charset=latin1', undefined]) {
		const headers = { ...own(g) };
		if (ct) headers['Content-Type'] = ct;
		const r = await raw(g.port, 'POST', '/v1/completions', { headers, body: { prompt: 'Once', max_tokens: 2 } });
		assert.equal(r.status, 415, String(ct));
		assert.equal(r.json.error.code, 'unsupported_media_type');
		assert.match(r.json.error.message, /application\/json/);
	}
	for (const ct of ['application/json', 'Application/JSON; charset=UTF-8', 'application/json;charset="utf-8"']) {
		const r = await raw(g.port, 'POST', '/v1/completions', { headers: { ...own(g), 'Content-Type': ct }, body: { prompt: 'Once', max_tokens: 2 } });
		assert.equal(r.status, 200, ct);
	}
});

test('--allowed-host names a Host this server answers to; a bad value is refused by name', async () => {
	const s = await serve(['--allowed-host', 'evil.example', '--allowed-host', 'other.example']);
	for (const host of ['evil.example:8080', 'other.example']) {
		const r = await raw(s.port, 'POST', '/v1/completions', { headers: { ...own(s), Host: host, ...json }, body: { prompt: 'Once', max_tokens: 2 } });
		assert.equal(r.status, 200, host);
	}
	assert.equal((await raw(s.port, 'GET', '/health', { headers: { Host: 'third.example' } })).status, 403);
	const bad = spawnSync(BIN, ['serve', '-m', STORIES, '--port', '0', '--allowed-host', 'http://x.example/'], { encoding: 'utf8', timeout: 10000 });
	assert.equal(bad.status, 1);
	assert.match(bad.stderr, /--allowed-host/);
});

// ---- CORS, Allow, WWW-Authenticate -------------------------------------------------------------

const preflight = (s, origin, path = '/v1/chat/completions') =>
	raw(s.port, 'OPTIONS', path, {
		headers: { Host: `127.0.0.1:${s.port}`, Origin: origin, 'Access-Control-Request-Method': 'POST', 'Access-Control-Request-Headers': 'authorization, content-type, x-stainless-os' },
	});

test('without --cors-origin a preflight gets 403 naming the flag, and no reply carries CORS headers', async () => {
	const r = await preflight(g, 'http://app.example:3000');
	assert.equal(r.status, 403);
	assert.match(r.json.error.message, /--cors-origin/);
	assert.equal(r.headers['access-control-allow-origin'], undefined);
	const h = await raw(g.port, 'GET', '/health', { headers: { Host: '127.0.0.1' } });
	assert.equal(h.headers['access-control-allow-origin'], undefined);
	// OPTIONS that is no preflight: the path's methods
	const o = await raw(g.port, 'OPTIONS', '/v1/models', { headers: { Host: '127.0.0.1' } });
	assert.equal(o.status, 204);
	assert.equal(o.headers.allow, 'GET, HEAD, OPTIONS');
});

test('--cors-origin: an allowed origin gets 204 and its header on every reply, another gets 403', async () => {
	const s = await serve(['--cors-origin', 'http://app.example:3000']);
	const origin = 'http://app.example:3000';
	const p = await preflight(s, origin);
	assert.equal(p.status, 204);
	assert.equal(p.headers['access-control-allow-origin'], origin);
	assert.match(p.headers['access-control-allow-methods'], /POST/);
	for (const h of ['authorization', 'content-type', 'x-api-key', 'anthropic-version', 'x-stainless-os'])
		assert.ok(p.headers['access-control-allow-headers'].split(/,\s*/).includes(h), h);
	const bad = await preflight(s, 'http://evil.example:3000');
	assert.equal(bad.status, 403);
	assert.match(bad.json.error.message, /--cors-origin/);
	assert.equal(bad.headers['access-control-allow-origin'], undefined);
	// replies of every kind carry the origin: a completion, a stream, an error, a control read
	const hdr = { ...own(s), ...json, Origin: origin };
	const c = await raw(s.port, 'POST', '/v1/chat/completions', { headers: hdr, body: chat() });
	assert.equal(c.status, 200);
	assert.equal(c.headers['access-control-allow-origin'], origin);
	assert.equal(c.headers.vary, 'Origin');
	const st = await raw(s.port, 'POST', '/v1/chat/completions', { headers: hdr, body: chat({ stream: true }) });
	assert.equal(st.status, 200);
	assert.equal(st.headers['access-control-allow-origin'], origin);
	const e = await raw(s.port, 'POST', '/v1/chat/completions', { headers: { ...hdr, Authorization: 'Bearer wrong' }, body: chat() });
	assert.equal(e.status, 401);
	assert.equal(e.headers['access-control-allow-origin'], origin);
	const m = await raw(s.port, 'GET', '/v1/models', { headers: { Host: '127.0.0.1', Origin: origin } });
	assert.equal(m.headers['access-control-allow-origin'], origin);
	// *: any origin
	const any = await serve(['--cors-origin', '*']);
	const pa = await preflight(any, 'http://whatever.example');
	assert.equal(pa.status, 204);
	assert.equal(pa.headers['access-control-allow-origin'], '*');
});

test('405 lists the path\'s methods in Allow; 401 carries WWW-Authenticate: Bearer', async () => {
	let r = await raw(g.port, 'DELETE', '/v1/chat/completions', { headers: own(g) });
	assert.equal(r.status, 405);
	assert.equal(r.headers.allow, 'POST, OPTIONS');
	r = await raw(g.port, 'POST', '/health', { headers: { ...own(g), ...json }, body: {} });
	assert.equal(r.status, 405);
	assert.equal(r.headers.allow, 'GET, HEAD, OPTIONS');
	r = await raw(g.port, 'POST', '/v1/chat/completions', { headers: { Host: '127.0.0.1', ...json }, body: chat() });
	assert.equal(r.status, 401);
	assert.equal(r.headers['www-authenticate'], 'Bearer');
	r = await raw(g.port, 'POST', '/v1/messages', { headers: { Host: '127.0.0.1', ...json, 'x-api-key': 'wrong' }, body: chat() });
	assert.equal(r.status, 401);
	assert.equal(r.headers['www-authenticate'], 'Bearer');
});

// ---- --protect-control --------------------------------------------------------------------------

test('--protect-control: /slots, /metrics and /props need the key, /health stays a bare liveness answer', async () => {
	const s = await serve(['--protect-control']);
	for (const p of ['/slots', '/metrics', '/props']) {
		const r = await raw(s.port, 'GET', p, { headers: { Host: '127.0.0.1' } });
		assert.equal(r.status, 401, p);
		assert.equal(r.headers['www-authenticate'], 'Bearer');
		assert.equal((await raw(s.port, 'GET', p, { headers: own(s) })).status, 200, p);
	}
	const h = await raw(s.port, 'GET', '/health', { headers: { Host: '127.0.0.1' } });
	assert.equal(h.status, 200);
	assert.deepEqual(h.json, { status: 'ok' });
	// without the flag control reads stay open
	assert.equal((await raw(g.port, 'GET', '/slots', { headers: { Host: '127.0.0.1' } })).status, 200);
	const bad = spawnSync(BIN, ['serve', '-m', STORIES, '--port', '0', '--protect-control'], { encoding: 'utf8', timeout: 10000 });
	assert.equal(bad.status, 1);
	assert.match(bad.stderr, /--protect-control needs --api-key/);
});
