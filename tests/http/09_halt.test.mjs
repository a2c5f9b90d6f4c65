// Halt: on a larger `lanes gen` model (slow enough) with LANES_DRAIN_S=1 and long generations
// on all three APIs (streamed and not, and a long prompt still filling), every request ends
// with its API's halt error — none hangs, none looks finished — and the process exits 0.
// A second signal halts at once.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import Anthropic from '@anthropic-ai/sdk';
import { startServer, bigModel, KEY, postSSE, postJSON, getJSON, sleep } from './lib.mjs';

const REASON = 'server restarting: retry shortly';
const OAI_ERR = { error: { message: REASON, type: 'server_error' } };
const ANT_ERR = { type: 'error', error: { type: 'api_error', message: REASON } };

function ids(n) {
	const out = [];
	let x = 7;
	for (let i = 0; i < n; i++) (x = (Math.imul(x, 1664525) + 1013904223) >>> 0), out.push(3 + (x % 500));
	return out;
}

// A request's promise with its failure kept as a value: a connection the server closes is
// reported by the test that reads it, never as an unhandled rejection while the test waits.
const settled = (p) => p.catch((e) => ({ failed: `${e}${e.cause ? ` (${e.cause})` : ''}` }));

// Starts one request of each kind; resolves when every stream has its first event.
function launch(url, opts = {}) {
	const gen = { max_tokens: 1500, ignore_eos: true };
	const msg = [{ role: 'user', content: 'Once upon a time' }];
	const ak = { 'x-api-key': KEY };
	const started = [];
	// a stream counts as started at its first event (or when it ends, whatever it was)
	const stream = (path, body, headers) => {
		let r;
		started.push(new Promise((res) => (r = res)));
		return settled(postSSE(`${url}${path}`, body, headers, () => r())).finally(() => r());
	};
	const reqs = {
		...(opts.prefill ? { prefill: opts.prefill } : {}),
		chatStream: stream('/v1/chat/completions', { messages: msg, ...gen, stream: true }, {}),
		chat: settled(postJSON(`${url}/v1/chat/completions`, { messages: msg, ...gen })),
		msgStream: stream('/v1/messages', { model: 'big', messages: msg, ...gen, stream: true }, ak),
		msg: settled(postJSON(`${url}/v1/messages`, { model: 'big', messages: msg, ...gen }, ak)),
		respStream: stream('/v1/responses', { input: 'Once', max_output_tokens: 1500, ignore_eos: true, stream: true }, {}),
		resp: settled(postJSON(`${url}/v1/responses`, { input: 'Once', max_output_tokens: 1500, ignore_eos: true })),
	};
	const n = Object.keys(reqs).length + (opts.extra || 0);
	return { reqs, started: Promise.all(started).then(() => accepted(url, n)) };
}

// Waits until n requests hold a lane, wait in the queue or have ended.
async function accepted(url, n) {
	for (let i = 0; i < 5000; i++) {
		const t = await (await fetch(`${url}/metrics`)).text();
		const v = (name) => Number((t.split('\n').find((l) => l.startsWith(name + ' ')) || ' 0').split(' ')[1]);
		const ended = ['finished', 'failed', 'cancelled'].reduce((a, o) => a + v(`lanes_requests_total{outcome="${o}"}`), 0);
		if (v('lanes_lanes_busy') + v('lanes_queue_depth') + ended >= n) return (await getJSON(`${url}/slots`)).body;
		await sleep(2);
	}
	throw new Error(`fewer than ${n} requests were accepted`);
}

function checkHalted(res) {
	const { chatStream, chat, msgStream, msg, respStream, resp, prefill } = res;
	// every reply came whole: none had its connection closed under it
	for (const [name, r] of Object.entries(res)) assert.equal(r.failed, undefined, name);
	for (const [name, r] of Object.entries({ chat, resp, prefill })) {
		if (!r) continue;
		assert.equal(r.status, 500, name);
		assert.deepEqual(r.body, OAI_ERR, name);
	}
	assert.equal(msg.status, 500);
	assert.deepEqual(msg.body, ANT_ERR);
	// OpenAI stream: a final error event, never a finish_reason or [DONE]
	assert.equal(chatStream.status, 200);
	assert.deepEqual(chatStream.events.at(-1).data, OAI_ERR);
	assert.ok(chatStream.events.every((e) => e.data !== '[DONE]' && !(e.data.choices || []).some((c) => c.finish_reason)));
	// Anthropic stream: event: error, never message_delta/message_stop
	assert.equal(msgStream.events.at(-1).event, 'error');
	assert.deepEqual(msgStream.events.at(-1).data, ANT_ERR);
	assert.ok(msgStream.events.every((e) => !['message_stop', 'message_delta', 'content_block_stop'].includes(e.event)));
	// Responses stream: response.failed with the error, never completed or incomplete
	const last = respStream.events.at(-1);
	assert.equal(last.event, 'response.failed');
	assert.equal(last.data.response.status, 'failed');
	assert.deepEqual(last.data.response.error, { code: 'server_error', message: REASON });
	assert.ok(respStream.events.every((e) => !['response.completed', 'response.incomplete', 'response.output_item.done'].includes(e.event)));
}

const serve = async (t, env) => {
	const srv = await startServer(['-m', bigModel(), '--alias', 'big', '--api-key', KEY], env);
	t.after(() => srv.proc.exitCode === null && srv.proc.kill('SIGKILL'));
	return srv;
};

test('halt after LANES_DRAIN_S=1: every request ends with its API error, exit 0', async (t) => {
	const srv = await serve(t, { LANES_DRAIN_S: '1' });
	// a long prompt first: it is still filling when the halt comes
	const prefill = settled(postJSON(`${srv.url}/v1/completions`, { prompt: ids(2000), max_tokens: 8 }));
	for (let i = 0; i < 5000; i++) {
		const s = (await getJSON(`${srv.url}/slots`)).body;
		if (s.lanes.some((l) => l.phase === 'filling' && l.filled_tokens > 0)) break;
		await sleep(2);
	}
	const { reqs, started } = launch(srv.url, { prefill, extra: 3 });
	// the official clients see the halt as errors too
	const oai = new OpenAI({ baseURL: `${srv.url}/v1`, apiKey: KEY, maxRetries: 0 });
	const ant = new Anthropic({ baseURL: srv.url, apiKey: KEY, maxRetries: 0 });
	const sdkChat = (async () => {
		for await (const _ of await oai.chat.completions.create({ messages: [{ role: 'user', content: 'x' }], max_tokens: 1500, ignore_eos: true, stream: true }));
	})().then(() => 'finished', (e) => e);
	const sdkMsg = ant.messages.stream({ model: 'big', max_tokens: 1500, ignore_eos: true, messages: [{ role: 'user', content: 'x' }] })
		.finalMessage().then(() => 'finished', (e) => e);
	const sdkResp = oai.responses.stream({ input: 'x', max_output_tokens: 1500, ignore_eos: true }).finalResponse().then((r) => r, (e) => e);
	const busy = await started;
	assert.ok(busy.lanes.some((l) => l.phase !== 'idle') && busy.queue_depth > 0, 'lanes busy and requests queued');
	srv.proc.kill('SIGTERM');
	let filling = false;
	for (let i = 0; i < 5000; i++) {
		const s = await getJSON(`${srv.url}/slots`).catch(() => null);
		if (!s || s.body.lanes.every((l) => l.phase !== 'filling')) break;
		filling = s.body.lanes.find((l) => l.prompt_tokens === 2000 && l.filled_tokens < 2000) !== undefined;
		await sleep(5);
	}
	assert.ok(filling, 'the long prompt was still filling during the drain');
	const names = Object.keys(reqs);
	const res = Object.fromEntries((await Promise.all(Object.values(reqs))).map((r, i) => [names[i], r]));
	checkHalted(res);
	const e1 = await sdkChat;
	assert.ok(e1 instanceof OpenAI.APIError, String(e1));
	assert.match(e1.message, /server restarting: retry shortly/);
	const e2 = await sdkMsg;
	assert.ok(e2 instanceof Anthropic.APIError, String(e2));
	assert.match(String(e2.message), /server restarting: retry shortly/);
	const r3 = await sdkResp;
	assert.ok(r3 instanceof Error || r3.status === 'failed', `responses.stream() must not complete: ${r3 && r3.status}`);
	const { code } = await srv.exited;
	assert.equal(code, 0, srv.log());
	assert.match(srv.log(), /drain deadline passed with \d+ requests open: halting/);
	assert.doesNotMatch(srv.log(), /still open after the halt/);
});

test('a second signal halts at once', async (t) => {
	const srv = await serve(t, { LANES_DRAIN_S: '600' });
	const { reqs, started } = launch(srv.url);
	await started;
	srv.proc.kill('SIGTERM');
	// the second signal only once the first has landed: else it would begin the 600 s drain itself
	for (let i = 0; i < 3000 && (await getJSON(`${srv.url}/health`)).status !== 503; i++) await sleep(10);
	srv.proc.kill('SIGINT');
	const names = Object.keys(reqs);
	const res = Object.fromEntries((await Promise.all(Object.values(reqs))).map((r, i) => [names[i], r]));
	checkHalted(res);
	const { code } = await srv.exited;
	assert.equal(code, 0, srv.log());
	// the second signal halted: the 600 s drain's deadline never came
	assert.match(srv.log(), /Interrupt: halting/);
	assert.doesNotMatch(srv.log(), /drain deadline passed|still open after the halt/);
});
