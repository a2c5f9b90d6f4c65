// The official @anthropic-ai/sdk client against POST /v1/messages: messages streamed and
// not, max_tokens, stop sequences, system prompts, prefill, and typed errors.
import { test, before } from 'node:test';
import assert from 'node:assert/strict';
import Anthropic from '@anthropic-ai/sdk';
import { mainServer, postJSON, KEY } from './lib.mjs';

let url, client;
before(async () => {
	({ url } = await mainServer());
	client = new Anthropic({ baseURL: url, apiKey: KEY, maxRetries: 0 });
});

const MODEL = 'stories260K';
const user = (content) => [{ role: 'user', content }];

test('messages: reply shape and usage equal to the tokenizer counts', async () => {
	const m = await client.messages.create({ model: MODEL, max_tokens: 32, system: 'You tell stories.', messages: user('Once upon a time'), temperature: 0 });
	assert.equal(m.type, 'message');
	assert.equal(m.role, 'assistant');
	assert.match(m.id, /^msg_/);
	assert.equal(m.model, MODEL);
	assert.equal(m.content.length, 1);
	assert.equal(m.content[0].type, 'text');
	assert.equal(typeof m.content[0].text, 'string');
	assert.ok(['end_turn', 'max_tokens'].includes(m.stop_reason));
	assert.equal(m.stop_sequence, null);
	const ids = (await postJSON(`${url}/tokenize`, { messages: [{ role: 'system', content: 'You tell stories.' }, ...user('Once upon a time')] })).body.tokens;
	assert.equal(m.usage.input_tokens + m.usage.cache_read_input_tokens + m.usage.cache_creation_input_tokens, ids.length);
	if (m.stop_reason === 'max_tokens') assert.equal(m.usage.output_tokens, 32);
	// system as text blocks renders the same prompt
	const b = await client.messages.create({ model: MODEL, max_tokens: 32, system: [{ type: 'text', text: 'You tell stories.' }], messages: [{ role: 'user', content: [{ type: 'text', text: 'Once upon a time' }] }], temperature: 0 });
	assert.equal(b.content[0].text, m.content[0].text);
	assert.equal(b.usage.input_tokens + b.usage.cache_read_input_tokens, ids.length);
});

test('messages: max_tokens ends with stop_reason max_tokens', async () => {
	const m = await client.messages.create({ model: MODEL, max_tokens: 7, messages: user('Tom ran'), ignore_eos: true });
	assert.equal(m.stop_reason, 'max_tokens');
	assert.equal(m.usage.output_tokens, 7);
});

test('messages: streamed events in order, text equal to the reply with the same seed', async () => {
	const body = { model: MODEL, max_tokens: 40, messages: user('The cat sat'), seed: 21, temperature: 0.9 };
	const whole = await client.messages.create(body);
	const types = [];
	let text = '';
	const raw = await client.messages.create({ ...body, stream: true });
	let delta = null;
	for await (const ev of raw) {
		types.push(ev.type);
		if (ev.type === 'content_block_delta') text += ev.delta.text;
		if (ev.type === 'message_delta') delta = ev;
	}
	assert.equal(text, whole.content[0].text);
	assert.equal(types[0], 'message_start');
	assert.equal(types[1], 'content_block_start');
	assert.deepEqual(types.slice(-3), ['content_block_stop', 'message_delta', 'message_stop']);
	assert.ok(types.slice(2, -3).every((t) => t === 'content_block_delta'));
	assert.equal(delta.delta.stop_reason, whole.stop_reason);
	assert.equal(delta.usage.output_tokens, whole.usage.output_tokens);
	// the helper: text events and the final message
	const s = client.messages.stream(body);
	let t2 = '';
	s.on('text', (d) => (t2 += d));
	const fin = await s.finalMessage();
	assert.equal(t2, whole.content[0].text);
	assert.equal(fin.content[0].text, whole.content[0].text);
	assert.equal(fin.stop_reason, whole.stop_reason);
	assert.equal(fin.usage.output_tokens, whole.usage.output_tokens);
	// the prefix cache may differ between the two runs: the prompt they add up to does not
	assert.equal(fin.usage.input_tokens + fin.usage.cache_read_input_tokens, whole.usage.input_tokens + whole.usage.cache_read_input_tokens);
});

test('messages: stop sequences, streamed and not', async () => {
	const base = { model: MODEL, max_tokens: 80, messages: user('Once upon a time'), temperature: 0 };
	const full = (await client.messages.create(base)).content[0].text;
	const words = full.split(' ').filter((w) => w.length >= 3);
	assert.ok(words.length > 3, full);
	const stop = words[Math.floor(words.length / 2)];
	const m = await client.messages.create({ ...base, stop_sequences: ['qqqzz', stop] });
	assert.equal(m.stop_reason, 'stop_sequence');
	assert.equal(m.stop_sequence, stop);
	assert.equal(m.content[0].text, full.slice(0, full.indexOf(stop)));
	const fin = await client.messages.stream({ ...base, stop_sequences: [stop] }).finalMessage();
	assert.equal(fin.stop_reason, 'stop_sequence');
	assert.equal(fin.stop_sequence, stop);
	assert.equal(fin.content[0].text, m.content[0].text);
});

test('messages: a final assistant turn is continued (prefill)', async () => {
	const full = (await client.messages.create({ model: MODEL, max_tokens: 30, messages: user('Once upon a time'), temperature: 0 })).content[0].text;
	const cut = full.slice(0, 10);
	const m = await client.messages.create({ model: MODEL, max_tokens: 30, temperature: 0, messages: [...user('Once upon a time'), { role: 'assistant', content: cut }] });
	assert.equal(typeof m.content[0].text, 'string');
	assert.ok(m.usage.input_tokens > 0);
});

test('messages: typed errors in Anthropic shape', async () => {
	let e = await client.messages.create({ model: MODEL, messages: user('hi') }).catch((x) => x);
	assert.ok(e instanceof Anthropic.BadRequestError, String(e));
	assert.equal(e.error.type, 'error');
	assert.equal(e.error.error.type, 'invalid_request_error');
	assert.match(e.error.error.message, /max_tokens/);
	e = await client.messages.create({ model: MODEL, max_tokens: 5, messages: user('hi'), temperature: 1.5 }).catch((x) => x);
	assert.ok(e instanceof Anthropic.BadRequestError);
	assert.match(e.message, /temperature/);
	// an image this model cannot see is read as a placeholder, and named
	const img = await client.messages.create({ model: MODEL, max_tokens: 2, messages: [{ role: 'user', content: [{ type: 'image', source: {} }] }] }).withResponse();
	assert.equal(img.data.type, 'message');
	assert.equal(img.response.headers.get('x-lanes-ignored'), 'image');
	e = await client.messages.create({ model: MODEL, max_tokens: 5, messages: user('hi'), tools: [{ type: 'web_search_20250305', name: 'web_search' }] }).catch((x) => x);
	assert.ok(e instanceof Anthropic.BadRequestError);
	assert.match(e.message, /tools/);
	const any = await client.messages.create({ model: 'claude-opus-4', max_tokens: 2, messages: user('hi') });
	assert.equal(any.model, MODEL, 'one model served: any name means it');
	const bad = new Anthropic({ baseURL: url, apiKey: 'nope', maxRetries: 0 });
	e = await bad.messages.create({ model: MODEL, max_tokens: 5, messages: user('hi') }).catch((x) => x);
	assert.ok(e instanceof Anthropic.AuthenticationError, String(e));
	assert.equal(e.error.error.type, 'authentication_error');
	// metadata is accepted; its user_id is kept nowhere, and the header says so
	const ok = await client.messages.create({ model: MODEL, max_tokens: 4, messages: user('hi'), metadata: { user_id: 'u1' } }).withResponse();
	assert.equal(ok.data.type, 'message');
	assert.equal(ok.response.headers.get('x-lanes-ignored'), 'metadata');
});

test('countTokens equals the usage.input_tokens (with the cached tokens) of the same request; paths under /v1/messages answer in Anthropic\'s shape', async () => {
	const req = { model: MODEL, system: 'You tell stories.', messages: [...user('Once upon a time'), { role: 'assistant', content: 'There' }] };
	const count = await client.messages.countTokens(req);
	const m = await client.messages.create({ ...req, max_tokens: 4 });
	assert.equal(count.input_tokens, m.usage.input_tokens + m.usage.cache_read_input_tokens);
	assert.deepEqual(Object.keys(count), ['input_tokens']);
	const e = await client.messages.countTokens({ model: MODEL, messages: [] }).catch((x) => x);
	assert.ok(e instanceof Anthropic.BadRequestError);
	const other = await client.messages.countTokens({ model: 'claude-3-opus', messages: user('x') });
	assert.ok(other.input_tokens > 0);
	const r = await postJSON(`${url}/v1/messages/batches`, {});
	assert.equal(r.status, 404);
	assert.equal(r.body.type, 'error');
	assert.equal(r.body.error.type, 'not_found_error');
	const o = await postJSON(`${url}/api/push`, { model: 'x' });
	assert.equal(o.status, 404);
	assert.deepEqual(Object.keys(o.body), ['error']);
});

test('streamed usage carries the same fields as the reply: message_start and message_delta name cache_read_input_tokens', async () => {
	const body = { model: MODEL, max_tokens: 6, seed: 11, system: 'You tell stories.', messages: user('Once upon a time there was a cat') };
	const reply = await client.messages.create(body); // warms the prefix cache for the stream
	const again = await client.messages.create(body);
	assert.ok(again.usage.cache_read_input_tokens > 0, 'the second request reads its prefix from the cache');
	let start, delta;
	for await (const ev of await client.messages.create({ ...body, stream: true })) {
		if (ev.type === 'message_start') start = ev.message.usage;
		if (ev.type === 'message_delta') delta = ev.usage;
	}
	assert.deepEqual(Object.keys(start).sort(), Object.keys(reply.usage).sort());
	assert.deepEqual(Object.keys(delta).sort(), Object.keys(reply.usage).sort());
	assert.equal(delta.cache_read_input_tokens, again.usage.cache_read_input_tokens);
	assert.equal(delta.input_tokens, again.usage.input_tokens);
	assert.equal(delta.output_tokens, again.usage.output_tokens);
	// message_start goes out before the hit is known: the whole prompt, which the delta splits
	assert.equal(start.input_tokens + start.cache_read_input_tokens, delta.input_tokens + delta.cache_read_input_tokens);
});

test('usage adds up as Anthropic counts it: input_tokens leave out the cached tokens, the three sum to the prompt', async () => {
	const system = 'You tell long stories about a cat and a dog who live in a small house by the sea. '.repeat(6);
	const body = { model: MODEL, max_tokens: 4, seed: 5, system, messages: user('Tell me about the dog and the boat') };
	const ids = (await postJSON(`${url}/tokenize`, { messages: [{ role: 'system', content: system }, ...user('Tell me about the dog and the boat')] })).body.tokens;
	await client.messages.create(body); // the prefix goes into the cache
	const again = await client.messages.create(body);
	const u = again.usage;
	assert.ok(u.cache_read_input_tokens > 0, 'the second identical prompt reads its prefix from the cache');
	assert.equal(u.cache_creation_input_tokens, 0);
	assert.equal(u.input_tokens + u.cache_read_input_tokens, ids.length);
	assert.ok(u.input_tokens < ids.length, 'the cached tokens are not counted twice');
	// the SDK's stream helper adds message_start and message_delta up the same way
	const m = await client.messages.stream(body).finalMessage();
	assert.equal(m.usage.input_tokens + m.usage.cache_read_input_tokens, ids.length);
	assert.ok(m.usage.cache_read_input_tokens > 0);
	// OpenAI's prompt_tokens and Responses' input_tokens include the cached ones
	const o = (await postJSON(`${url}/v1/chat/completions`, { messages: [{ role: 'system', content: system }, ...user('Tell me about the dog and the boat')], max_tokens: 4 })).body.usage;
	assert.equal(o.prompt_tokens, ids.length);
	assert.ok(o.prompt_tokens_details.cached_tokens > 0);
	const r = (await postJSON(`${url}/v1/responses`, { instructions: system, input: 'Tell me about the dog and the boat', max_output_tokens: 4 })).body.usage;
	assert.equal(r.input_tokens, ids.length);
	assert.ok(r.input_tokens_details.cached_tokens > 0);
});
