// Responses kept by the server: store (the default) then previous_response_id, which answers
// with the tokens of the same conversation sent whole; GET, DELETE and input_items; 404s in
// OpenAI's shape; least recently used out past --responses-store; store: false and
// --responses-store 0 keep nothing; --strict-params names store only where nothing is kept.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import { mainServer, startServer, postJSON, readSSE, getJSON, STORIES, KEY } from './lib.mjs';

let url, client, small, off;
before(async () => {
	[{ url }, small, off] = await Promise.all([
		mainServer(),
		startServer(['-m', STORIES, '--api-key', KEY, '--responses-store', '2', '--strict-params']),
		startServer(['-m', STORIES, '--api-key', KEY, '--responses-store', '0', '--strict-params']),
	]);
	client = new OpenAI({ baseURL: `${url}/v1`, apiKey: KEY, maxRetries: 0 });
});
after(() => [small, off].forEach((s) => s && s.proc.kill('SIGKILL')));

const MODEL = 'stories260K';
const auth = { Authorization: `Bearer ${KEY}` };
const get = (base, id, rest = '') => getJSON(`${base}/v1/responses/${id}${rest}`, { headers: auth });
const del = (base, id) => getJSON(`${base}/v1/responses/${id}`, { method: 'DELETE', headers: auth });
const create = (base, body) => postJSON(`${base}/v1/responses`, { max_output_tokens: 4, ...body });

test('previous_response_id continues a kept response with the tokens of the conversation sent whole', async () => {
	const first = await client.responses.create({ model: MODEL, input: 'Once upon a time', instructions: 'Tell a story.', max_output_tokens: 12, seed: 5 });
	assert.equal(first.store, true, 'kept by default, as OpenAI does');
	const next = await client.responses.create({ model: MODEL, previous_response_id: first.id, input: [{ role: 'user', content: 'And then' }], max_output_tokens: 12, seed: 7 });
	assert.equal(next.previous_response_id, first.id);
	assert.equal(next.instructions, null, 'instructions are not carried over');
	// the same conversation sent whole, without the first request's instructions
	const whole = await client.responses.create({
		model: MODEL, store: false, max_output_tokens: 12, seed: 7,
		input: [{ role: 'user', content: 'Once upon a time' }, ...first.output, { role: 'user', content: 'And then' }],
	});
	assert.equal(next.token_sha, whole.token_sha);
	assert.equal(next.output_text, whole.output_text);
	assert.equal(next.usage.input_tokens, whole.usage.input_tokens);
	// a chain of three: the second's kept conversation holds the first's
	const third = await client.responses.create({ model: MODEL, previous_response_id: next.id, input: 'Then', max_output_tokens: 6, seed: 9 });
	const whole3 = await client.responses.create({
		model: MODEL, store: false, max_output_tokens: 6, seed: 9,
		input: [{ role: 'user', content: 'Once upon a time' }, ...first.output, { role: 'user', content: 'And then' }, ...next.output, { role: 'user', content: 'Then' }],
	});
	assert.equal(third.token_sha, whole3.token_sha);
});

test('a streamed response is kept too, and GET returns it; a streamed continuation matches the whole one', async () => {
	const stream = client.responses.stream({ model: MODEL, input: 'Once upon a time', max_output_tokens: 8, seed: 3 });
	const fin = await stream.finalResponse();
	const got = await client.responses.retrieve(fin.id);
	assert.equal(got.id, fin.id);
	assert.equal(got.output_text, fin.output_text);
	assert.equal(got.token_sha, fin.token_sha);
	const r = await fetch(`${url}/v1/responses`, {
		method: 'POST', headers: { ...auth, 'Content-Type': 'application/json' },
		body: JSON.stringify({ previous_response_id: fin.id, input: 'Next', max_output_tokens: 8, seed: 4, stream: true }),
	});
	const events = await readSSE(r);
	const streamed = events.at(-1).data.response;
	const whole = await create(url, { input: [{ role: 'user', content: 'Once upon a time' }, ...fin.output, { role: 'user', content: 'Next' }], max_output_tokens: 8, seed: 4, store: false });
	assert.equal(streamed.token_sha, whole.body.token_sha);
	assert.equal(streamed.previous_response_id, fin.id);
});

test('GET, input_items, DELETE; unknown ids are 404s in OpenAI shape; the key gate applies', async () => {
	const a = await create(url, { input: 'Once', seed: 1 });
	const b = await create(url, { input: [{ role: 'user', content: 'More' }], previous_response_id: a.body.id, seed: 2 });
	const got = await get(url, b.body.id);
	assert.equal(got.status, 200);
	assert.deepEqual(got.body, b.body);
	const items = await get(url, b.body.id, '/input_items?order=asc');
	assert.equal(items.body.object, 'list');
	assert.deepEqual(items.body.data.map((i) => i.role), ['user', 'assistant', 'user']);
	assert.ok(items.body.data.every((i) => typeof i.id === 'string'));
	assert.equal(items.body.first_id, items.body.data[0].id);
	const desc = await get(url, b.body.id, '/input_items?limit=2');
	assert.deepEqual(desc.body.data.map((i) => i.id), items.body.data.slice(1).reverse().map((i) => i.id), 'newest first by default');
	assert.equal(desc.body.has_more, true);
	const rest = await get(url, b.body.id, `/input_items?limit=2&after=${desc.body.last_id}`);
	assert.deepEqual(rest.body.data.map((i) => i.id), [items.body.data[0].id]);
	assert.equal(rest.body.has_more, false);
	assert.equal((await fetch(`${url}/v1/responses/${a.body.id}`)).status, 401);
	const gone = await del(url, a.body.id);
	assert.deepEqual(gone.body, { id: a.body.id, object: 'response', deleted: true });
	for (const r of [await get(url, a.body.id), await del(url, a.body.id)]) {
		assert.equal(r.status, 404);
		assert.equal(r.body.error.type, 'invalid_request_error');
		assert.match(r.body.error.message, /not found/);
	}
	const cont = await create(url, { input: 'x', previous_response_id: a.body.id });
	assert.equal(cont.status, 404);
	assert.deepEqual(cont.body, {
		error: { message: `Previous response with id '${a.body.id}' not found.`, type: 'invalid_request_error', param: 'previous_response_id', code: 'previous_response_not_found' },
	});
	// b holds its own copy of a's conversation: deleting a leaves it whole
	assert.equal((await create(url, { input: 'x', previous_response_id: b.body.id, store: false })).status, 200);
	const bad = await create(url, { input: 'x', previous_response_id: 7 });
	assert.equal(bad.status, 400);
	assert.equal(bad.body.error.param, 'previous_response_id');
});

test('store: false keeps nothing', async () => {
	const r = await create(url, { input: 'Once', store: false });
	assert.equal(r.status, 200);
	assert.equal(r.body.store, false);
	assert.equal((await get(url, r.body.id)).status, 404);
});

test('--responses-store 2: the least recently used goes first; store: true passes --strict-params where it is kept', async () => {
	const a = await create(small.url, { input: 'a', store: true });
	assert.equal(a.status, 200, JSON.stringify(a.body));
	assert.equal(a.headers.get('x-lanes-ignored'), null);
	const b = await create(small.url, { input: 'b' });
	assert.equal((await get(small.url, a.body.id)).status, 200, 'a is now the most recently used');
	const c = await create(small.url, { input: 'c' });
	assert.equal((await get(small.url, b.body.id)).status, 404, 'b was the least recently used');
	assert.equal((await get(small.url, a.body.id)).status, 200);
	assert.equal((await get(small.url, c.body.id)).status, 200);
	const d = await create(small.url, { input: 'd', previous_response_id: b.body.id });
	assert.equal(d.status, 404);
	assert.equal(d.body.error.code, 'previous_response_not_found');
});

test('--responses-store 0: nothing is kept, and store: true is what --strict-params refuses', async () => {
	const plain = await create(off.url, { input: 'a' });
	assert.equal(plain.status, 200);
	assert.equal(plain.body.store, false);
	assert.equal((await get(off.url, plain.body.id)).status, 404);
	const asked = await create(off.url, { input: 'a', store: true });
	assert.equal(asked.status, 400);
	assert.equal(asked.body.error.param, 'store');
	const prev = await create(off.url, { input: 'a', previous_response_id: plain.body.id });
	assert.equal(prev.status, 404);
});
