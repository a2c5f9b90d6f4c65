// The official openai client against POST /v1/responses: responses.create streamed and not,
// responses.stream() and its final response, incomplete replies, kept responses, and the refused features.
import { test, before } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import { mainServer, postJSON, KEY } from './lib.mjs';

let url, client;
before(async () => {
	({ url } = await mainServer());
	client = new OpenAI({ baseURL: `${url}/v1`, apiKey: KEY, maxRetries: 0 });
});

const MODEL = 'stories260K';

test('responses.create: shape, output_text, usage', async () => {
	const r = await client.responses.create({ model: MODEL, input: 'Once upon a time', instructions: 'Tell a story.', max_output_tokens: 32, temperature: 0 });
	assert.equal(r.object, 'response');
	assert.match(r.id, /^resp_/);
	assert.ok(['completed', 'incomplete'].includes(r.status));
	assert.equal(r.output.length, 1);
	const item = r.output[0];
	assert.equal(item.type, 'message');
	assert.equal(item.role, 'assistant');
	assert.equal(item.content[0].type, 'output_text');
	assert.equal(r.output_text, item.content[0].text);
	assert.equal(r.instructions, 'Tell a story.');
	const ids = (await postJSON(`${url}/tokenize`, { messages: [{ role: 'system', content: 'Tell a story.' }, { role: 'user', content: 'Once upon a time' }] })).body.tokens;
	assert.equal(r.usage.input_tokens, ids.length);
	assert.equal(r.usage.total_tokens, r.usage.input_tokens + r.usage.output_tokens);
	// input as a list of messages with parts gives the same prompt
	const r2 = await client.responses.create({ model: MODEL, instructions: 'Tell a story.', max_output_tokens: 32, temperature: 0,
		input: [{ role: 'user', content: [{ type: 'input_text', text: 'Once upon a time' }] }] });
	assert.equal(r2.output_text, r.output_text);
});

test('responses.create: max_output_tokens gives an incomplete response', async () => {
	const r = await client.responses.create({ model: MODEL, input: 'Tom ran', max_output_tokens: 6, ignore_eos: true });
	assert.equal(r.status, 'incomplete');
	assert.equal(r.incomplete_details.reason, 'max_output_tokens');
	assert.equal(r.usage.output_tokens, 6);
});

test('responses.create streamed: the full event sequence with sequence numbers', async () => {
	const body = { model: MODEL, input: 'The cat sat', max_output_tokens: 40, temperature: 0.9, seed: 8 };
	const whole = await client.responses.create(body);
	const events = [];
	for await (const ev of await client.responses.create({ ...body, stream: true })) events.push(ev);
	const types = events.map((e) => e.type);
	const fin = whole.status === 'completed' ? 'response.completed' : 'response.incomplete';
	assert.deepEqual(types.slice(0, 4), ['response.created', 'response.in_progress', 'response.output_item.added', 'response.content_part.added']);
	assert.deepEqual(types.slice(-4), ['response.output_text.done', 'response.content_part.done', 'response.output_item.done', fin]);
	assert.ok(types.slice(4, -4).every((t) => t === 'response.output_text.delta'));
	assert.deepEqual(events.map((e) => e.sequence_number), events.map((_, i) => i));
	const text = events.filter((e) => e.type === 'response.output_text.delta').map((e) => e.delta).join('');
	assert.equal(text, whole.output_text);
	assert.equal(events.at(-1).response.output[0].content[0].text, whole.output_text);
	assert.equal(events.at(-1).response.usage.output_tokens, whole.usage.output_tokens);
});

test('responses.stream(): deltas and the final response', async () => {
	const body = { model: MODEL, input: 'One day', max_output_tokens: 40, temperature: 0.9, seed: 9 };
	const whole = await client.responses.create(body);
	const s = client.responses.stream(body);
	let text = '';
	s.on('response.output_text.delta', (e) => (text += e.delta));
	const fin = await s.finalResponse();
	assert.equal(text, whole.output_text);
	assert.equal(fin.output_text, whole.output_text);
	assert.equal(fin.status, whole.status);
	assert.equal(fin.id.startsWith('resp_'), true);
	assert.equal(fin.usage.output_tokens, whole.usage.output_tokens);
});

test('responses: store: true is kept, not named; an unknown previous_response_id is a 404; server tools are named', async () => {
	const stored = await client.responses.create({ model: MODEL, input: 'x', store: true, max_output_tokens: 2 }).withResponse();
	assert.equal(stored.data.status, 'incomplete');
	assert.equal(stored.data.store, true);
	assert.equal(stored.response.headers.get('x-lanes-ignored'), null, 'it is kept: nothing to name');
	assert.equal((await client.responses.retrieve(stored.data.id)).id, stored.data.id);
	let e = await client.responses.create({ model: MODEL, input: 'x', previous_response_id: 'resp_1' }).catch((x) => x);
	assert.ok(e instanceof OpenAI.NotFoundError);
	assert.equal(e.param, 'previous_response_id');
	assert.equal(e.code, 'previous_response_not_found');
	// a hosted tool runs on OpenAI's side: named, the request runs without it
	const hosted = await client.responses.create({ model: MODEL, input: 'x', tools: [{ type: 'web_search' }], max_output_tokens: 2, store: false }).withResponse();
	assert.equal(hosted.response.headers.get('x-lanes-ignored'), 'tools.web_search');
	const any = await client.responses.create({ model: 'gpt-5', input: 'x', max_output_tokens: 2 });
	assert.equal(any.model, MODEL, 'one model served: any name means it');
	e = await client.responses.create({ model: MODEL, input: [{ type: 'function_call_output', output: 'x' }] }).catch((x) => x);
	assert.ok(e instanceof OpenAI.BadRequestError);
	assert.match(e.message, /call_id/);
	const ok = await client.responses.create({ model: MODEL, input: 'x', store: false, max_output_tokens: 2 });
	assert.equal(ok.store, false);
});

test('responses: the temperature and top_p a client sent come back as written (0.8, not 0.80000000000000004)', async () => {
	const headers = { 'Content-Type': 'application/json', Authorization: `Bearer ${KEY}` };
	const body = { model: MODEL, input: 'Once', max_output_tokens: 2, temperature: 0.8, top_p: 0.9 };
	const text = await (await fetch(`${url}/v1/responses`, { method: 'POST', headers, body: JSON.stringify(body) })).text();
	assert.match(text, /"temperature":0\.8,/, text);
	assert.match(text, /"top_p":0\.9,/, text);
	const stream = await (await fetch(`${url}/v1/responses`, { method: 'POST', headers, body: JSON.stringify({ ...body, stream: true }) })).text();
	assert.match(stream, /"temperature":0\.8,/);
	assert.doesNotMatch(stream, /0\.8000000|0\.9000000/);
});
