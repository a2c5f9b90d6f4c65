// A fast stream's writes: the tokens that come within --stream-flush-ms of the stream's last
// write go out in one write, each still its own SSE event, in order, with the text a
// non-streamed request of the same seed gets; the first token is never held.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import http from 'node:http';
import { startServer, STORIES } from './lib.mjs';

async function server(t, args) {
	const srv = await startServer(['-m', STORIES, '--threads', '2', ...args]);
	t.after(() => srv.proc.exitCode === null && srv.proc.kill('SIGKILL'));
	return srv;
}

// One request: the body's reads as the client saw them, and the whole body.
function post(port, path, body) {
	const data = JSON.stringify(body);
	return new Promise((resolve, reject) => {
		const req = http.request(
			{ host: '127.0.0.1', port, path, method: 'POST', headers: { 'Content-Type': 'application/json', 'Content-Length': Buffer.byteLength(data) } },
			(res) => {
				const reads = [];
				res.on('data', (d) => reads.push(d.toString()));
				res.on('end', () => resolve({ status: res.statusCode, reads, text: reads.join('') }));
				res.on('error', reject);
			},
		);
		req.on('error', reject);
		req.end(data);
	});
}

// every event's data (after its "event:" line, where the API names its events)
const events = (text) =>
	text.split('\n\n').map((e) => e.split('\n').find((l) => l.startsWith('data: {'))).filter(Boolean).map((l) => JSON.parse(l.slice(6)));

test('with --stream-flush-ms 1000 a fast stream goes out in a few writes, one event per token, the same text', async (t) => {
	const srv = await server(t, ['--stream-flush-ms', '1000']);
	const req = { prompt: 'Once upon a time', max_tokens: 96, ignore_eos: true, seed: 7, temperature: 0.8 };
	const plain = await post(srv.port, '/v1/completions', req);
	assert.equal(plain.status, 200);
	const want = JSON.parse(plain.text).choices[0].text;
	const s = await post(srv.port, '/v1/completions', { ...req, stream: true, stream_options: { include_usage: true } });
	assert.equal(s.status, 200);
	const ev = events(s.text);
	const usage = ev.find((e) => e.usage)?.usage;
	assert.equal(usage?.completion_tokens, 96);
	// stories260K makes 96 tokens in well under a second: after the first, all wait for the end
	assert.ok(s.reads.length <= 4, `96 tokens came in ${s.reads.length} reads`);
	assert.ok(s.reads[0].includes('data: {') && !s.reads[0].includes('[DONE]'), 'the first token went out alone, at once');
	const texts = ev.filter((e) => e.choices?.length).map((e) => e.choices[0].text);
	assert.ok(texts.length >= 90, `one event per token (${texts.length} text events)`);
	assert.equal(texts.join(''), want);
	assert.ok(s.text.trimEnd().endsWith('data: [DONE]'));
});

test('chat and Anthropic streams held the same way keep their event order and text', async (t) => {
	const srv = await server(t, ['--stream-flush-ms', '1000']);
	const msgs = [{ role: 'user', content: 'Tell me a story' }];
	const base = { messages: msgs, max_tokens: 64, seed: 3, temperature: 0.7 };
	const plain = JSON.parse((await post(srv.port, '/v1/chat/completions', base)).text).choices[0].message.content;
	const chat = await post(srv.port, '/v1/chat/completions', { ...base, stream: true });
	const deltas = events(chat.text).map((e) => e.choices[0]?.delta?.content ?? '').join('');
	assert.equal(deltas, plain);
	assert.ok(chat.reads.length <= 4, `the chat stream came in ${chat.reads.length} reads`);
	const a = await post(srv.port, '/v1/messages', { ...base, model: 'x', stream: true });
	const kinds = a.text.split('\n\n').filter((e) => e.startsWith('event: ')).map((e) => e.split('\n')[0].slice(7));
	assert.equal(kinds[0], 'message_start');
	assert.equal(kinds.at(-1), 'message_stop');
	const atext = events(a.text).filter((e) => e.type === 'content_block_delta').map((e) => e.delta.text).join('');
	assert.equal(atext, plain);
});
