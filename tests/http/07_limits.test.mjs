// Limits as typed errors: a full queue is 429 (OpenAI paths) or 529 overloaded_error
// (/v1/messages) with Retry-After; a body over --max-body is 413 in each API's shape; a model
// that does not load ends the process with 1.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import Anthropic from '@anthropic-ai/sdk';
import fs from 'node:fs';
import path from 'node:path';
import { spawn } from 'node:child_process';
import { startServer, STORIES, KEY, BIN, TMP, getJSON, sleep, waitIdle, metric, rawExchange, httpRequest, bodyOf } from './lib.mjs';

let srv, oai, ant;
before(async () => {
	srv = await startServer(['-m', STORIES, '--api-key', KEY, '--lanes', '1', '--queue', '0', '--max-body', '4096']);
	oai = new OpenAI({ baseURL: `${srv.url}/v1`, apiKey: KEY, maxRetries: 0 });
	ant = new Anthropic({ baseURL: srv.url, apiKey: KEY, maxRetries: 0 });
});
after(() => srv && srv.proc.kill('SIGKILL'));

test('queue full: 429 with Retry-After (OpenAI), 529 overloaded_error (Anthropic)', async () => {
	const ctl = new AbortController();
	const long = fetch(`${srv.url}/v1/completions`, {
		method: 'POST', signal: ctl.signal,
		headers: { 'Content-Type': 'application/json', Authorization: `Bearer ${KEY}` },
		body: JSON.stringify({ prompt: 'Once', max_tokens: 2000, ignore_eos: true, stream: true }),
	}).then((r) => r.body.getReader().read()).catch(() => {});
	for (let i = 0; i < 2000; i++) {
		if ((await getJSON(`${srv.url}/slots`)).body.lanes[0].generated_tokens > 0) break;
		await sleep(2);
	}
	const rejected = await metric(srv.url, 'lanes_requests_total{outcome="rejected"}');
	let e = await oai.chat.completions.create({ messages: [{ role: 'user', content: 'hi' }], max_tokens: 4 }).catch((x) => x);
	assert.ok(e instanceof OpenAI.RateLimitError, String(e));
	assert.equal(e.headers.get('retry-after'), '1');
	e = await oai.responses.create({ input: 'hi', max_output_tokens: 4 }).catch((x) => x);
	assert.ok(e instanceof OpenAI.RateLimitError, String(e));
	e = await ant.messages.create({ model: 'stories260K', max_tokens: 4, messages: [{ role: 'user', content: 'hi' }] }).catch((x) => x);
	assert.equal(e.status, 529, String(e));
	assert.ok(e instanceof Anthropic.APIError);
	assert.equal(e.error.error.type, 'overloaded_error');
	assert.equal(e.headers.get('retry-after'), '1');
	// the status line itself names the overload, as Anthropic's does, and the reply is whole
	const raw = (await rawExchange(srv.port, httpRequest('POST', '/v1/messages',
		{ model: 'stories260K', max_tokens: 4, messages: [{ role: 'user', content: 'hi' }] }))).text;
	assert.match(raw, /^HTTP\/1\.1 529 Overloaded\r\n/, raw);
	assert.match(raw, /\r\nRetry-After: 1\r\n/i, raw);
	const body = bodyOf(raw);
	assert.equal(Number(raw.match(/\r\nContent-Length: (\d+)\r\n/i)[1]), Buffer.byteLength(body));
	assert.equal(JSON.parse(body).error.type, 'overloaded_error');
	assert.equal(await metric(srv.url, 'lanes_requests_total{outcome="rejected"}'), rejected + 4);
	ctl.abort();
	await long;
	assert.ok((await waitIdle(srv.url)) >= 0);
});

test('a body over --max-body: 413 in each shape', async () => {
	const big = 'x'.repeat(5000);
	let e = await oai.chat.completions.create({ messages: [{ role: 'user', content: big }] }).catch((x) => x);
	assert.equal(e.status, 413, String(e));
	assert.ok(e instanceof OpenAI.APIError);
	assert.equal(e.code, 'request_too_large');
	e = await ant.messages.create({ model: 'stories260K', max_tokens: 4, messages: [{ role: 'user', content: big }] }).catch((x) => x);
	assert.equal(e.status, 413);
	assert.equal(e.error.type, 'error');
	assert.equal(e.error.error.type, 'request_too_large');
});

test('a model that does not load: the process says why, once, before it listens, and exits 1', async () => {
	const bad = path.join(TMP, 'not-a-model.gguf');
	fs.writeFileSync(bad, 'GGUF but not really');
	const proc = spawn(BIN, ['serve', '-m', bad, '--port', '0'], { stdio: ['ignore', 'ignore', 'pipe'] });
	let log = '';
	proc.stderr.on('data', (d) => (log += d));
	const code = await new Promise((r) => proc.on('close', r));
	assert.equal(code, 1);
	assert.doesNotMatch(log, /listening on/);
	assert.equal(log, `lanes serve: ${bad}: offset 0: truncated: 19 bytes is too short for a GGUF header\n`);
});
