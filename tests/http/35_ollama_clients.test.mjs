// Ollama's API as the pinned `ollama` client uses it today: the version Codex's --oss asks for,
// /api/show's capabilities, chat with tools (calls in Ollama's shape, streamed and not, equal to
// the OpenAI endpoint's tokens; tool results in the history), and the model cache — pull from a
// local fake hub with Ollama's progress lines, copy and delete, confined to the cache, the
// served file kept, and the same key gate as every other change.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import crypto from 'node:crypto';
import fs from 'node:fs';
import http from 'node:http';
import path from 'node:path';
import { Ollama } from 'ollama';
import Ajv from 'ajv';
import { STORIES, TMP, KEY, startServer, postJSON, sleep, assertWaitsSettled } from './lib.mjs';

const gguf = fs.readFileSync(STORIES);
const sha = (b) => crypto.createHash('sha256').update(b).digest('hex');
const CACHE = fs.mkdtempSync(path.join(TMP, 'ollama-cache-'));
const SERVED = path.join(CACHE, 'served.gguf'); // the served model lives in the cache too
let hub, srv, ollama, stalled = null;

before(async () => {
	// the hub: a listing, resolve with a 302 carrying the checksum and size, a CDN path; "stall"
	// sends half of the file and then nothing
	hub = http.createServer((req, res) => {
		const u = new URL(req.url, 'http://x');
		if (u.pathname === '/api/models/org/repo/tree/main') {
			res.setHeader('content-type', 'application/json');
			return res.end(JSON.stringify([{ type: 'file', path: 'stories-Q8_0.gguf' }, { type: 'file', path: 'slow-Q4_0.gguf' }]));
		}
		const m = u.pathname.match(/^\/org\/repo\/resolve\/main\/(stories-Q8_0|slow-Q4_0)\.gguf$/);
		if (m) {
			res.writeHead(302, { location: `/cdn/${m[1]}`, 'x-linked-etag': `"${sha(gguf)}"`, 'x-linked-size': String(gguf.length) });
			return res.end();
		}
		if (u.pathname === '/cdn/stories-Q8_0') {
			res.writeHead(200, { 'content-length': gguf.length });
			return res.end(gguf);
		}
		if (u.pathname === '/cdn/slow-Q4_0') {
			res.writeHead(200, { 'content-length': gguf.length });
			res.write(gguf.subarray(0, gguf.length >> 1));
			stalled = res;
			return;
		}
		res.writeHead(404);
		res.end('not found');
	});
	await new Promise((r) => hub.listen(0, '127.0.0.1', r));
	fs.copyFileSync(STORIES, SERVED);
	srv = await startServer(['-m', SERVED, '--api-key', KEY], {
		LANES_MODELS: CACHE, LANES_HF_ENDPOINT: `http://127.0.0.1:${hub.address().port}`, LANES_PULL_STALL_S: '30',
	});
	ollama = new Ollama({ host: srv.url, headers: { Authorization: `Bearer ${KEY}` } });
});
after(() => {
	stalled?.destroy();
	srv?.proc.kill('SIGKILL');
	hub?.close();
});

const MODEL = 'served';
const user = (content) => [{ role: 'user', content }];
const WEATHER = {
	type: 'object',
	properties: { city: { type: 'string', maxLength: 12 }, unit: { enum: ['c', 'f'] } },
	required: ['city', 'unit'],
	additionalProperties: false,
};
const TOOLS = [
	{ type: 'function', function: { name: 'get_weather', description: 'Weather in a city', parameters: WEATHER } },
	{ type: 'function', function: { name: 'add', description: 'Adds', parameters: { type: 'object', properties: { a: { type: 'integer' } }, required: ['a'] } } },
];
// Ollama's API has no tool_choice: lanes takes OpenAI's as an extension, so a random model calls
const FORCE = { tool_choice: { type: 'function', function: { name: 'get_weather' } }, parallel_tool_calls: false };
const GREEDY = { temperature: 0, repeat_penalty: 1, num_predict: 120, seed: 3 };
const ajv = new Ajv({ strict: false });

test('version: at least 0.13.4, the Ollama whose features Codex --oss needs', async () => {
	const v = (await ollama.version()).version;
	const [a, b, c] = v.split('.').map(Number);
	assert.ok(a > 0 || b > 13 || (b === 13 && c >= 4), v);
});

test('show: the capabilities this server serves — completion, tools, embedding; thinking only with a thinking template', async () => {
	const show = await ollama.show({ model: MODEL });
	assert.deepEqual(show.capabilities, ['completion', 'tools', 'embedding']);
	const dir = fs.mkdtempSync(path.join(TMP, 'think-'));
	const tpl = path.join(dir, 'think.jinja');
	fs.writeFileSync(tpl, "{% for m in messages %}<|{{ m.role }}|>{{ m.content }}{% endfor %}{% if add_generation_prompt %}<|assistant|><think>\n{% endif %}");
	const t = await startServer(['-m', STORIES, '--chat-template', tpl]);
	try {
		const c = (await postJSON(`${t.url}/api/show`, { model: 'stories260K' })).body.capabilities;
		assert.ok(c.includes('thinking') && c.includes('tools'), JSON.stringify(c));
		assert.ok(!c.includes('insert'), 'no fill-in-the-middle tokens: no insert');
	} finally {
		t.proc.kill('SIGKILL');
	}
});

test('chat with tools: message.tool_calls in Ollama\'s shape (arguments an object), streamed the same, the OpenAI endpoint\'s tokens', async () => {
	const body = { model: MODEL, messages: user('What is the weather in Rome?'), tools: TOOLS, ...FORCE, options: GREEDY };
	const r = await ollama.chat({ ...body, stream: false });
	assert.equal(r.done, true);
	assert.equal(r.done_reason, 'stop');
	assert.equal(r.message.role, 'assistant');
	assert.equal(r.message.content, '');
	assert.equal(r.message.tool_calls.length, 1);
	const call = r.message.tool_calls[0];
	assert.equal(call.function.name, 'get_weather');
	assert.equal(typeof call.function.arguments, 'object');
	assert.ok(ajv.validate(WEATHER, call.function.arguments), JSON.stringify(ajv.errors));
	// streamed: the call whole in one object's message, then the final object
	const parts = [];
	for await (const p of await ollama.chat({ ...body, stream: true })) parts.push(p);
	const withCalls = parts.filter((p) => p.message.tool_calls?.length);
	assert.equal(withCalls.length, 1);
	assert.deepEqual(withCalls[0].message.tool_calls[0].function, call.function);
	assert.equal(parts.at(-1).done, true);
	assert.equal(parts.at(-1).token_sha, r.token_sha);
	// the same request through the OpenAI endpoint gives the same tokens
	const o = await postJSON(`${srv.url}/v1/chat/completions`, {
		messages: user('What is the weather in Rome?'), tools: TOOLS, ...FORCE, temperature: 0, seed: 3, max_tokens: 120,
	});
	assert.equal(o.status, 200, JSON.stringify(o.body));
	assert.equal(o.body.choices[0].token_sha, r.token_sha);
	assert.deepEqual(JSON.parse(o.body.choices[0].message.tool_calls[0].function.arguments), call.function.arguments);
});

test('chat: a tool result in the history (role tool, tool_name) renders as the OpenAI endpoint renders it', async () => {
	const args = { city: 'Rome', unit: 'c' };
	const opts = { temperature: 0.9, top_k: 40, top_p: 0.9, seed: 5, num_predict: 16, repeat_penalty: 1 };
	const hist = [
		...user('What is the weather in Rome?'),
		{ role: 'assistant', content: '', tool_calls: [{ function: { name: 'get_weather', arguments: args } }] },
		{ role: 'tool', content: '{"temp": 21}', tool_name: 'get_weather' },
	];
	const r = await ollama.chat({ model: MODEL, messages: hist, tools: TOOLS, stream: false, options: opts });
	const o = await postJSON(`${srv.url}/v1/chat/completions`, {
		messages: [
			...user('What is the weather in Rome?'),
			{ role: 'assistant', content: '', tool_calls: [{ id: 'call_1', type: 'function', function: { name: 'get_weather', arguments: JSON.stringify(args) } }] },
			{ role: 'tool', tool_call_id: 'call_1', content: '{"temp": 21}' },
		],
		tools: TOOLS, temperature: 0.9, top_k: 40, top_p: 0.9, seed: 5, max_tokens: 16,
	});
	assert.equal(o.status, 200, JSON.stringify(o.body));
	assert.equal(r.token_sha, o.body.choices[0].token_sha);
	assert.equal(r.eval_count, o.body.usage.completion_tokens);
});

test('pull: Ollama\'s NDJSON progress from the hub into the cache; stream false gives one object; errors as {"error"}', async () => {
	const seen = [];
	for await (const p of await ollama.pull({ model: 'hf.co/org/repo:Q8_0', stream: true })) seen.push(p);
	assert.equal(seen[0].status, 'pulling manifest');
	const layer = seen.filter((p) => p.digest);
	assert.ok(layer.length >= 1, JSON.stringify(seen));
	assert.equal(layer[0].digest, `sha256:${sha(gguf)}`);
	assert.equal(layer[0].status, `pulling ${sha(gguf).slice(0, 12)}`);
	assert.equal(layer.at(-1).total, gguf.length);
	assert.equal(layer.at(-1).completed, gguf.length);
	const statuses = seen.map((p) => p.status);
	assert.deepEqual(statuses.slice(-3), ['verifying sha256 digest', 'writing manifest', 'success']);
	const file = path.join(CACHE, 'org/repo/stories-Q8_0.gguf');
	assert.equal(sha(fs.readFileSync(file)), sha(gguf));
	// in the cache now: one object
	const again = await ollama.pull({ model: 'org/repo:Q8_0', stream: false });
	assert.deepEqual(again, { status: 'success' });
	// the hub has no such file: 404, or a last {"error"} line in a stream
	const nf = await postJSON(`${srv.url}/api/pull`, { model: 'hf.co/org/repo:Q2_K', stream: false });
	assert.equal(nf.status, 404);
	assert.match(nf.body.error, /no \.gguf file matching 'Q2_K'/);
	await assert.rejects(async () => { for await (const _ of await ollama.pull({ model: 'hf.co/org/repo:Q2_K', stream: true })); }, /Q2_K/);
	// names outside the hub's, URLs and paths are refused before anything is fetched
	for (const model of ['llama3.2', 'https://example.com/x.gguf', '../../etc/passwd', 'org/../x:Q8_0']) {
		const r = await postJSON(`${srv.url}/api/pull`, { model });
		assert.equal(r.status, 400, model);
		assert.deepEqual(Object.keys(r.body), ['error']);
	}
	assert.deepEqual(fs.readdirSync(CACHE).sort(), ['org', 'served.gguf']);
});

test('pull: a client that goes away cancels its pull; the partial download stays for the next', async () => {
	const it = await ollama.pull({ model: 'hf.co/org/repo:Q4_0', stream: true });
	for await (const p of it) if (p.completed > 0) break; // the first half arrived
	it.abort();
	let log = '';
	for (let i = 0; i < 600 && !/pull hf\.co\/org\/repo:Q4_0: the pull was cancelled/.test(log); i++) {
		await sleep(50);
		log = srv.log();
	}
	assert.match(log, /pull hf\.co\/org\/repo:Q4_0: the pull was cancelled/);
	assert.ok(fs.existsSync(path.join(CACHE, 'org/repo/slow-Q4_0.gguf.part')));
	assert.ok(!fs.existsSync(path.join(CACHE, 'org/repo/slow-Q4_0.gguf')));
});

test('copy and delete: names in the cache, the served model never deleted nor replaced', async () => {
	await ollama.copy({ source: 'hf.co/org/repo:Q8_0', destination: 'mystory' });
	assert.equal(sha(fs.readFileSync(path.join(CACHE, 'mystory.gguf'))), sha(gguf));
	await ollama.copy({ source: 'mystory:latest', destination: 'other' });
	assert.ok(fs.existsSync(path.join(CACHE, 'other.gguf')));
	await ollama.delete({ model: 'mystory' });
	assert.ok(!fs.existsSync(path.join(CACHE, 'mystory.gguf')));
	await assert.rejects(ollama.delete({ model: 'mystory' }), (e) => e.status_code === 404);
	await ollama.delete({ model: 'org/repo/stories-Q8_0.gguf' });
	assert.ok(!fs.existsSync(path.join(CACHE, 'org/repo/stories-Q8_0.gguf')));
	// the file this server serves
	await assert.rejects(ollama.delete({ model: 'served' }), (e) => e.status_code === 409 && /serves/.test(e.error));
	await assert.rejects(ollama.copy({ source: 'other', destination: 'served' }), (e) => e.status_code === 409);
	assert.equal(sha(fs.readFileSync(SERVED)), sha(gguf));
	// nothing outside the cache is named, read or written
	const outside = path.join(TMP, 'outside.gguf');
	fs.writeFileSync(outside, 'x');
	for (const [p, body] of [['/api/copy', { source: 'other', destination: '../outside' }], ['/api/copy', { source: '../outside', destination: 'x' }],
		['/api/copy', { source: '/etc/passwd', destination: 'x' }], ['/api/copy', { source: 'other', destination: 'a/b' }]]) {
		const r = await postJSON(`${srv.url}${p}`, body);
		assert.ok([400, 404].includes(r.status), `${JSON.stringify(body)}: ${r.status}`);
	}
	const d = await fetch(`${srv.url}/api/delete`, { method: 'DELETE', headers: { Authorization: `Bearer ${KEY}` }, body: JSON.stringify({ model: '../outside' }) });
	assert.equal(d.status, 400);
	assert.ok(fs.existsSync(outside));
	await ollama.delete({ model: 'other' });
	assert.deepEqual(fs.readdirSync(CACHE).sort(), ['org', 'served.gguf']);
});

test('pull, copy and delete are changes: open to the network without a key they get 403; with a key they need it', async () => {
	const open = await startServer(['-m', STORIES, '--host', '0.0.0.0'], { LANES_MODELS: CACHE });
	try {
		for (const [method, p, body] of [['POST', '/api/pull', { model: 'org/repo:Q8_0' }], ['POST', '/api/copy', { source: 'served', destination: 'x' }],
			['DELETE', '/api/delete', { model: 'served' }]]) {
			const r = await fetch(`${open.url}${p}`, { method, body: JSON.stringify(body) });
			assert.equal(r.status, 403, p);
			assert.match((await r.json()).error, /--api-key/);
		}
	} finally {
		open.proc.kill('SIGKILL');
	}
	const nokey = await fetch(`${srv.url}/api/delete`, { method: 'DELETE', body: JSON.stringify({ model: 'served' }) });
	assert.equal(nokey.status, 401);
	assert.ok(fs.existsSync(SERVED));
});

test('every request that waited for a pull, streamed or not, cancelled or not, was woken exactly once', async () => {
	await assertWaitsSettled(assert, srv.url, ['pull', 'work', 'engine']);
});
