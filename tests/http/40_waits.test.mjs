// The one wait: a request suspended for its route on a work thread, for the engine's events or
// for an adapter load is woken exactly once each time (GET /metrics counts every park and every
// wake by kind), whichever API and framing it used; a client that leaves while its request is
// parked (streamed or not) ends it, frees its lane, and leaves nothing parked; the server then
// stops cleanly (under ASan in .ci/run: nothing leaked).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import http from 'node:http';
import path from 'node:path';
import { BIN, STORIES, TMP, KEY, startServer, postJSON, sleep, waitIdle, waits, assertWaitsSettled } from './lib.mjs';

const auth = { Authorization: `Bearer ${KEY}`, 'content-type': 'application/json' };
const DIR = path.join(TMP, 'waits-adapters');
let S;

before(async () => {
	fs.mkdirSync(DIR, { recursive: true });
	const r = spawnSync(BIN, ['gen', '--lora', '4', '-m', STORIES, '-o', path.join(DIR, 'w.gguf'), '--seed', '7'], { encoding: 'utf8' });
	assert.equal(r.status, 0, r.stderr);
	S = await startServer(['-m', STORIES, '--api-key', KEY, '--lanes', '2', '--adapters-dir', DIR]);
});

after(() => {
	if (S && S.proc.exitCode === null) S.proc.kill('SIGKILL');
});

// Requests across the APIs, streamed and not: each waits on a work thread, then for the engine.
function request(i) {
	const gen = { max_tokens: 24, seed: i, temperature: 0.7 };
	const msgs = [{ role: 'user', content: `Tell story ${i}` }];
	switch (i % 4) {
	case 0: return ['/v1/chat/completions', { messages: msgs, stream: i % 8 === 0, ...gen }];
	case 1: return ['/v1/completions', { prompt: `Story ${i}:`, stream: i % 8 === 1, ...gen }];
	case 2: return ['/v1/messages', { model: 'stories260K', messages: msgs, stream: i % 8 === 2, ...gen }];
	default: return ['/api/generate', { model: 'stories260K', prompt: `Story ${i}:`, stream: i % 8 === 3, options: { num_predict: 24, seed: i } }];
	}
}

test('every park is ended by exactly one wake: work and engine waits over four APIs, streamed and not', async () => {
	const before_ = await waits(S.url);
	const rs = await Promise.all(Array.from({ length: 16 }, async (_, i) => {
		const [p, body] = request(i);
		const r = await fetch(`${S.url}${p}`, { method: 'POST', headers: auth, body: JSON.stringify(body) });
		const text = await r.text();
		return { status: r.status, text };
	}));
	for (const r of rs) assert.equal(r.status, 200, r.text);
	const w = await assertWaitsSettled(assert, S.url, ['work', 'engine']);
	assert.ok(w.parks.work - (before_.parks.work || 0) >= 16, 'each request waited for its route on a work thread');
});

test('an adapter load parks its request until the load thread wakes it, once', async () => {
	// a small load can end before its request parks (then it is answered at once, unparked):
	// new versions are loaded until one has waited
	for (let i = 0; i < 40; i++) {
		const r = await postJSON(`${S.url}/v1/adapters`, { name: 'w', file: 'w.gguf', replace: i > 0 }, { Authorization: `Bearer ${KEY}` });
		assert.equal(r.status, 200, JSON.stringify(r.body));
		assert.equal(r.body.name, 'w');
		if ((await waits(S.url)).parks.load > 0) break;
	}
	const bad = await postJSON(`${S.url}/v1/adapters`, { name: 'x', file: 'missing.gguf' }, { Authorization: `Bearer ${KEY}` });
	assert.equal(bad.status, 400);
	await assertWaitsSettled(assert, S.url, ['work', 'engine', 'load']);
});

// Waits until some request is parked for kind.
async function parkedFor(kind) {
	for (let i = 0; i < 500; i++) {
		if ((await waits(S.url)).parked[kind] > 0) return true;
		await sleep(10);
	}
	return false;
}

for (const stream of [false, true]) {
	test(`a client that leaves while its ${stream ? 'streamed' : 'non-streamed'} request waits for the engine ends it: lane freed, nothing parked`, async () => {
		const body = { prompt: 'Once upon a time', max_tokens: 100000, ignore_eos: true, stream };
		// node:http, not fetch: an aborted fetch of Node.js 18 may keep its socket open, and a client still connected has not left
		const req = http.request(`${S.url}/v1/completions`, { method: 'POST', headers: auth });
		const closed = new Promise((resolve) => req.on('close', resolve));
		req.on('error', () => {});
		req.on('response', (res) => res.on('data', () => {}).on('error', () => {}));
		req.end(JSON.stringify(body));
		assert.ok(await parkedFor('engine'), 'the request waits for the engine');
		req.destroy();
		await closed;
		assert.ok(await waitIdle(S.url) >= 0, 'its lane is free again');
		await assertWaitsSettled(assert, S.url, ['engine']);
		let log = '';
		for (let i = 0; i < 200 && !/POST \/v1\/completions \d+ cancelled/.test(log); i++) {
			await sleep(10);
			log = S.log();
		}
		assert.match(log, /POST \/v1\/completions \d+ cancelled/);
	});
}

test('the server stops cleanly after all of it', async () => {
	S.proc.kill('SIGTERM');
	const { code, signal } = await S.exited;
	assert.equal(signal, null);
	assert.equal(code, 0, S.log().slice(-2000));
});
