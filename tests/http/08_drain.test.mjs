// Drain: with streams running (and queued) on stories260K, SIGTERM makes /health say
// draining and new requests get 503 with Retry-After in each API's shape, while every
// accepted stream finishes normally; the process then exits 0 on its own.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { startServer, STORIES, KEY, postSSE, postJSON, getJSON, sleep } from './lib.mjs';

test('SIGTERM drains: streams finish, new requests get 503, exit 0', async (t) => {
	// a drain deadline far past the streams' end, so they finish however slow the machine
	const srv = await startServer(['-m', STORIES, '--api-key', KEY, '--lanes', '2'], { LANES_DRAIN_S: '600' });
	t.after(() => srv.proc.exitCode === null && srv.proc.kill('SIGKILL'));
	const url = srv.url;
	const ends = [];
	const mark = (name) => (r) => (ends.push({ name, at: Date.now() }), r);
	const gen = { max_tokens: 300, ignore_eos: true, stream: true };
	const streams = [
		postSSE(`${url}/v1/chat/completions`, { messages: [{ role: 'user', content: 'Once' }], ...gen }).then(mark('chat')),
		postSSE(`${url}/v1/completions`, { prompt: 'Once', ...gen }).then(mark('completions')),
		postSSE(`${url}/v1/messages`, { model: 'stories260K', messages: [{ role: 'user', content: 'Once' }], ...gen }, { 'x-api-key': KEY }).then(mark('messages')),
		postSSE(`${url}/v1/responses`, { input: 'Once', max_output_tokens: 300, ignore_eos: true, stream: true }).then(mark('responses')),
	];
	// all four accepted: two on lanes, two queued
	let s;
	for (let i = 0; i < 4000; i++) {
		s = (await getJSON(`${url}/slots`)).body;
		if (s.lanes.filter((l) => l.phase !== 'idle').length === 2 && s.queue_depth === 2) break;
		await sleep(1);
	}
	assert.equal(s.queue_depth, 2, 'two streams queued behind the two lanes');
	srv.proc.kill('SIGTERM');
	let h;
	for (let i = 0; i < 3000; i++) {
		h = await getJSON(`${url}/health`);
		if (h.status === 503) break;
		await sleep(10);
	}
	assert.equal(h.status, 503);
	assert.deepEqual(h.body, { status: 'draining' });
	// new requests: 503 + Retry-After, in each API's shape
	const o = await postJSON(`${url}/v1/chat/completions`, { messages: [{ role: 'user', content: 'x' }], max_tokens: 2 });
	assert.equal(o.status, 503);
	assert.ok(Number(o.headers.get('retry-after')) >= 1);
	assert.equal(o.body.error.type, 'server_error');
	assert.match(o.body.error.message, /draining/);
	const a = await postJSON(`${url}/v1/messages`, { model: 'stories260K', max_tokens: 2, messages: [{ role: 'user', content: 'x' }] }, { 'x-api-key': KEY });
	assert.equal(a.status, 503);
	assert.ok(Number(a.headers.get('retry-after')) >= 1);
	assert.equal(a.body.type, 'error');
	assert.equal(a.body.error.type, 'overloaded_error');
	const r = await postJSON(`${url}/v1/responses`, { input: 'x', max_output_tokens: 2 });
	assert.equal(r.status, 503);
	assert.ok(r.headers.get('retry-after'));
	assert.equal(r.body.error.type, 'server_error');
	// every accepted stream finishes normally
	const [chat, cmpl, msgs, resp] = await Promise.all(streams);
	const { code, signal } = await srv.exited;
	const exitAt = Date.now();
	assert.equal(chat.events.at(-1).data, '[DONE]');
	assert.equal(chat.events.at(-2).data.choices[0].finish_reason, 'length');
	assert.equal(cmpl.events.at(-1).data, '[DONE]');
	assert.equal(cmpl.events.at(-2).data.choices[0].finish_reason, 'length');
	assert.equal(msgs.events.at(-1).event, 'message_stop');
	assert.equal(msgs.events.at(-2).data.delta.stop_reason, 'max_tokens');
	assert.equal(msgs.events.at(-2).data.usage.output_tokens, 300);
	assert.equal(resp.events.at(-1).event, 'response.incomplete');
	assert.equal(resp.events.at(-1).data.response.usage.output_tokens, 300);
	assert.equal(code, 0, srv.log());
	assert.equal(signal, null);
	for (const e of ends) assert.ok(e.at <= exitAt, `${e.name} ended before the exit`);
	assert.match(srv.log(), /drained/);
});
