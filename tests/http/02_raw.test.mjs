// Raw sockets against lanes serve: malformed and oversized bodies, half-sent requests, slow
// readers, and clients that vanish mid-request (their lanes must be freed at once).
import { test, before } from 'node:test';
import assert from 'node:assert/strict';
import net from 'node:net';
import { mainServer, rawExchange, httpRequest, statusOf, bodyOf, metric, waitIdle, postJSON, getJSON, sleep } from './lib.mjs';

let url, port;
before(async () => ({ url, port } = await mainServer()));

const chat = (extra = {}) => ({ messages: [{ role: 'user', content: 'Once upon a time' }], ...extra });
const cancelled = () => metric(url, 'lanes_requests_total{outcome="cancelled"}');

test('malformed JSON, a non-object body and wrong types get 400 in OpenAI shape', async () => {
	let r = await rawExchange(port, httpRequest('POST', '/v1/chat/completions', '{"messages": [ {"role": "user", "content": "x"} '));
	assert.equal(statusOf(r.text), 400);
	let b = JSON.parse(bodyOf(r.text));
	assert.equal(b.error.type, 'invalid_request_error');
	assert.match(b.error.message, /malformed JSON/);
	r = await rawExchange(port, httpRequest('POST', '/v1/completions', '[1, 2, 3]'));
	assert.equal(statusOf(r.text), 400);
	assert.match(JSON.parse(bodyOf(r.text)).error.message, /JSON object/);
	r = await rawExchange(port, httpRequest('POST', '/v1/completions', { prompt: 'x', stream: 'yes' }));
	b = JSON.parse(bodyOf(r.text));
	assert.equal(statusOf(r.text), 400);
	assert.equal(b.error.param, 'stream');
	r = await rawExchange(port, httpRequest('POST', '/v1/completions', { prompt: 'x', logit_bias: { 99999: 5 } }));
	assert.equal(statusOf(r.text), 400);
	assert.equal(JSON.parse(bodyOf(r.text)).error.param, 'logit_bias');
	r = await rawExchange(port, httpRequest('POST', '/v1/completions', { prompt: [1, 2, -4] }));
	assert.equal(JSON.parse(bodyOf(r.text)).error.param, 'prompt[2]');
	r = await rawExchange(port, httpRequest('POST', '/v1/completions', ''));
	assert.equal(statusOf(r.text), 400);
	r = await rawExchange(port, 'THIS IS NOT HTTP\r\n\r\n');
	assert.ok(statusOf(r.text) >= 400 || r.text === '', r.text.slice(0, 80));
	r = await rawExchange(port, httpRequest('GET', '/v1/nothing-here'));
	assert.equal(statusOf(r.text), 404);
	r = await rawExchange(port, httpRequest('DELETE', '/v1/completions'));
	assert.equal(statusOf(r.text), 405);
});

test('a body over --max-body gets 413, with a length or chunked', async () => {
	const head =
		'POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n' +
		'Authorization: Bearer test-key\r\nContent-Length: 9000000\r\n\r\n';
	let r = await rawExchange(port, [head, '{"messages": ['], { keepOpen: true, timeoutMs: 3000 });
	assert.equal(statusOf(r.text), 413);
	assert.equal(JSON.parse(bodyOf(r.text)).error.code, 'request_too_large');
	// chunked: the server reads to the end, then answers 413
	const piece = Buffer.alloc(1 << 20, 'a');
	const chunks = ['POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nAuthorization: Bearer test-key\r\nTransfer-Encoding: chunked\r\n\r\n'];
	for (let i = 0; i < 9; i++) chunks.push(`${piece.length.toString(16)}\r\n`, piece, '\r\n');
	chunks.push('0\r\n\r\n');
	r = await rawExchange(port, chunks, { timeoutMs: 10000 });
	assert.equal(statusOf(r.text), 413);
	assert.equal((await getJSON(`${url}/health`)).status, 200);
});

test('half-sent requests hold no one up and leave nothing behind', async () => {
	const half = net.connect(port, '127.0.0.1');
	await new Promise((r) => half.on('connect', r));
	half.on('error', () => {});
	half.write('POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 200\r\nAuthorization: Bearer test-key\r\n\r\n{"messa');
	const headersOnly = net.connect(port, '127.0.0.1');
	headersOnly.on('error', () => {});
	headersOnly.write('POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Le');
	await sleep(100);
	// others are served meanwhile
	const r = await postJSON(`${url}/v1/completions`, { prompt: 'The sun', max_tokens: 8 });
	assert.equal(r.status, 200);
	assert.equal((await getJSON(`${url}/health`)).status, 200);
	half.destroy();
	headersOnly.destroy();
	await sleep(50);
	assert.ok((await waitIdle(url)) >= 0);
	assert.equal((await postJSON(`${url}/v1/completions`, { prompt: 'The moon', max_tokens: 4 })).status, 200);
});

test('a slow reader gets every byte and never stalls the engine', async () => {
	// two choices hold two of the four lanes; the other two stay free for the request below
	const body = JSON.stringify(chat({ max_tokens: 400, n: 2, ignore_eos: true, stream: true, logprobs: true, top_logprobs: 20 }));
	const s = net.connect(port, '127.0.0.1');
	s.on('error', () => {});
	await new Promise((r) => s.on('connect', r));
	const parts = [];
	s.on('data', (d) => parts.push(d));
	s.write(httpRequest('POST', '/v1/chat/completions', body));
	await sleep(30);
	s.pause(); // stop reading: the server's socket buffer fills
	await sleep(800);
	// the engine is not blocked by the stalled socket: another request completes
	let ended = false;
	s.once('end', () => (ended = true));
	const other = await postJSON(`${url}/v1/completions`, { prompt: 'A bird', max_tokens: 16, temperature: 0 });
	assert.equal(other.status, 200);
	assert.equal(other.body.usage.completion_tokens, 16);
	assert.ok(!ended && !Buffer.concat(parts).toString('latin1').includes('[DONE]'), 'the slow stream is still unread');
	const ending = new Promise((r) => (ended ? r() : s.once('end', r)));
	s.resume();
	await ending;
	s.destroy();
	const text = Buffer.concat(parts).toString('utf8');
	assert.equal(statusOf(text), 200);
	assert.ok(text.includes('data: [DONE]'), 'the stream ends with [DONE]');
	const finishes = text.match(/"finish_reason":"length"/g) || [];
	assert.equal(finishes.length, 2);
});

test('a client vanishing mid-stream frees its lane at once (cancelled, not finished)', async () => {
	const before = await cancelled();
	const s = net.connect(port, '127.0.0.1');
	s.on('error', () => {});
	await new Promise((r) => s.on('connect', r));
	const first = new Promise((r) => s.once('data', r));
	s.write(httpRequest('POST', '/v1/chat/completions', chat({ max_tokens: 2000, ignore_eos: true, stream: true })));
	await first;
	let busy = false;
	for (let i = 0; i < 3000 && !busy; i++) {
		busy = (await getJSON(`${url}/slots`)).body.lanes.some((l) => l.generated_tokens > 0);
		if (!busy) await sleep(5);
	}
	assert.ok(busy, 'the stream holds a lane');
	s.destroy();
	const ms = await waitIdle(url, 10000);
	assert.ok(ms >= 0, 'the lane was freed');
	assert.equal(await cancelled(), before + 1);
});

test('a client vanishing while waiting for a whole reply cancels it too', async () => {
	const before = await cancelled();
	const s = net.connect(port, '127.0.0.1');
	s.on('error', () => {});
	await new Promise((r) => s.on('connect', r));
	s.write(httpRequest('POST', '/v1/completions', { prompt: 'Once', max_tokens: 2000, ignore_eos: true }));
	for (let i = 0; i < 3000; i++) {
		const lanes = (await getJSON(`${url}/slots`)).body.lanes;
		if (lanes.some((l) => l.generated_tokens > 0)) break;
		await sleep(5);
	}
	s.destroy();
	assert.ok((await waitIdle(url, 10000)) >= 0);
	assert.equal(await cancelled(), before + 1);
});
