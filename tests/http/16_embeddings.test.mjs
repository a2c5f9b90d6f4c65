// POST /v1/embeddings with the official openai client: strings, lists, token ids, base64
// (the client's default) and floats, dimensions; a text's vector is the same alone or in a
// batch of 64, bit for bit; --pooling and --embeddings; bad requests answered clearly.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import { mainServer, startServer, postJSON, STORIES, KEY } from './lib.mjs';

let url, client;
const servers = [];
before(async () => {
	({ url } = await mainServer());
	client = new OpenAI({ baseURL: `${url}/v1`, apiKey: KEY, maxRetries: 0 });
});
after(() => servers.forEach((s) => s.proc.kill('SIGKILL')));

const dot = (a, b) => a.reduce((s, x, i) => s + x * b[i], 0);
const norm = (a) => Math.sqrt(dot(a, a));
const raw = (body, u = url) => postJSON(`${u}/v1/embeddings`, body);

test('a string and a list of strings: unit vectors of the model width, usage counts the tokens', async () => {
	const one = await client.embeddings.create({ model: 'stories260K', input: 'Once upon a time' });
	assert.equal(one.object, 'list');
	assert.equal(one.model, 'stories260K');
	assert.equal(one.data.length, 1);
	assert.equal(one.data[0].object, 'embedding');
	assert.equal(one.data[0].index, 0);
	const v = one.data[0].embedding;
	assert.equal(v.length, 64);
	assert.ok(Math.abs(norm(v) - 1) < 1e-5, `norm ${norm(v)}`);
	const tokens = (await postJSON(`${url}/tokenize`, { content: 'Once upon a time', add_special: true, parse_special: false })).body.tokens;
	assert.equal(one.usage.prompt_tokens, tokens.length);
	assert.equal(one.usage.total_tokens, tokens.length);

	const list = await client.embeddings.create({ model: 'stories260K', input: ['Once upon a time', 'The cat sat', 'Once upon a time'] });
	assert.deepEqual(list.data.map((d) => d.index), [0, 1, 2]);
	const [a, b, c] = list.data.map((d) => d.embedding);
	assert.deepEqual(a, v, 'the same text alone and in a list');
	assert.deepEqual(c, a);
	assert.ok(Math.abs(dot(a, c) - 1) < 1e-6, 'a text with itself: cosine 1');
	assert.ok(dot(a, b) < 0.999, `two different texts: cosine ${dot(a, b)} < 1`);
	const cat = (await postJSON(`${url}/tokenize`, { content: 'The cat sat', add_special: true, parse_special: false })).body.tokens;
	assert.equal(list.usage.prompt_tokens, 2 * tokens.length + cat.length);
});

test('token ids, one list or many, equal the text they encode', async () => {
	const ids = (await postJSON(`${url}/tokenize`, { content: 'The cat sat', add_special: true, parse_special: false })).body.tokens;
	const text = (await client.embeddings.create({ model: 'stories260K', input: 'The cat sat' })).data[0].embedding;
	const one = (await client.embeddings.create({ model: 'stories260K', input: ids })).data[0].embedding;
	assert.deepEqual(one, text);
	const many = await client.embeddings.create({ model: 'stories260K', input: [ids, ids.slice(0, 2)] });
	assert.deepEqual(many.data[0].embedding, text);
	assert.equal(many.usage.prompt_tokens, ids.length + 2);
});

test('float and base64 carry the same float32 values; dimensions truncates and renormalizes', async () => {
	const f = await raw({ input: 'Once upon a time', encoding_format: 'float' });
	assert.equal(f.status, 200);
	const b = await raw({ input: 'Once upon a time', encoding_format: 'base64' });
	assert.equal(typeof b.body.data[0].embedding, 'string');
	const buf = Buffer.from(b.body.data[0].embedding, 'base64');
	const fromB64 = Array.from(new Float32Array(buf.buffer, buf.byteOffset, buf.length / 4));
	assert.deepEqual(fromB64, f.body.data[0].embedding.map((x) => Math.fround(x)));
	const d = await client.embeddings.create({ model: 'stories260K', input: 'Once upon a time', dimensions: 16 });
	const v = d.data[0].embedding;
	assert.equal(v.length, 16);
	assert.ok(Math.abs(norm(v) - 1) < 1e-5);
	const full = f.body.data[0].embedding.slice(0, 16);
	assert.ok(Math.abs(dot(v, full) / norm(full) - 1) < 1e-5, 'the same direction as the first 16 values');
});

test('a text gives the same bits alone and in a batch of 64', async () => {
	const texts = Array.from({ length: 64 }, (_, i) => `Once upon a time there was a ${['cat', 'dog', 'bird', 'fish'][i % 4]} number ${i}`);
	const batch = await raw({ input: texts, encoding_format: 'base64' });
	assert.equal(batch.status, 200, JSON.stringify(batch.body));
	assert.equal(batch.body.data.length, 64);
	for (const i of [0, 1, 17, 42, 63]) {
		const solo = await raw({ input: texts[i], encoding_format: 'base64' });
		assert.equal(solo.body.data[0].embedding, batch.body.data[i].embedding, `text ${i}`);
	}
	// and concurrent with generations
	const [again] = await Promise.all([
		raw({ input: texts[5], encoding_format: 'base64' }),
		postJSON(`${url}/v1/completions`, { prompt: 'Once upon a time', max_tokens: 32 }),
		postJSON(`${url}/v1/completions`, { prompt: 'The cat', max_tokens: 32 }),
	]);
	assert.equal(again.body.data[0].embedding, batch.body.data[5].embedding);
});

test('bad requests: 400 naming the field, 404 for another model, 401 without the key', async () => {
	const cases = [
		[{}, 'input'],
		[{ input: '' }, 'input'],
		[{ input: [] }, 'input'],
		[{ input: ['ok', ''] }, 'input[1]'],
		[{ input: ['ok', 3.5] }, 'input[1]'],
		[{ input: [1, 2, 999999] }, 'input'],
		[{ input: 'x', encoding_format: 'int8' }, 'encoding_format'],
		[{ input: 'x', dimensions: 0 }, 'dimensions'],
		[{ input: 'x', dimensions: 65 }, 'dimensions'],
		[{ input: 'x', dimensions: 'all' }, 'dimensions'],
		[{ input: 'x', pooling: 'mean' }, 'pooling'],
		[{ input: Array(100).fill('x') }, 'input'],
	];
	for (const [body, param] of cases) {
		const r = await raw(body);
		assert.equal(r.status, 400, JSON.stringify(body));
		assert.equal(r.body.error.type, 'invalid_request_error');
		assert.equal(r.body.error.param, param, `${JSON.stringify(body).slice(0, 60)}: ${r.body.error.message}`);
	}
	assert.match((await raw({ input: Array(100).fill('x') })).body.error.message, /100 items.*at most 68/);
	const m = await raw({ input: 'x', model: 'text-embedding-3-small' });
	assert.equal(m.status, 200, 'one model served: any name means it');
	const k = await fetch(`${url}/v1/embeddings`, { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify({ input: 'x' }) });
	assert.equal(k.status, 401);
});

test('--pooling mean differs from last; --embeddings refuses generation', async () => {
	const srv = await startServer(['-m', STORIES, '--pooling', 'mean', '--embeddings']);
	servers.push(srv);
	const mean = await raw({ input: 'Once upon a time' }, srv.url);
	assert.equal(mean.status, 200);
	const last = await raw({ input: 'Once upon a time' });
	assert.ok(Math.abs(norm(mean.body.data[0].embedding) - 1) < 1e-5);
	assert.notDeepEqual(mean.body.data[0].embedding, last.body.data[0].embedding);
	const g = await postJSON(`${srv.url}/v1/completions`, { prompt: 'x', max_tokens: 1 });
	assert.equal(g.status, 400);
	assert.match(g.body.error.message, /embeddings only/);
});

test('--pooling none: a unit vector per token, each the same as the last-token pooling of its prefix', async () => {
	const srv = await startServer(['-m', STORIES, '--pooling', 'none']);
	servers.push(srv);
	const ids = (await postJSON(`${url}/tokenize`, { content: 'Once upon a time', add_special: true, parse_special: false })).body.tokens;
	const r = await raw({ input: ids }, srv.url);
	assert.equal(r.status, 200, JSON.stringify(r.body));
	const vs = r.body.data[0].embedding;
	assert.equal(vs.length, ids.length);
	for (const v of vs) assert.ok(Math.abs(norm(v) - 1) < 1e-5);
	// causal attention: token i's state is the last-token embedding of the first i + 1 ids
	for (const i of [0, ids.length - 1]) {
		const last = await raw({ input: ids.slice(0, i + 1) });
		assert.deepEqual(vs[i], last.body.data[0].embedding, `token ${i}`);
	}
	const b = await raw({ input: 'x', encoding_format: 'base64' }, srv.url);
	assert.equal(b.status, 400);
	assert.equal(b.body.error.param, 'encoding_format');
});

test('a reply that could not fit --max-output-bytes is refused before any work, naming input', async () => {
	const srv = await startServer(['-m', STORIES, '--pooling', 'none', '--max-output-bytes', '65536']);
	servers.push(srv);
	const long = Array.from({ length: 100 }, (_, i) => 1 + (i % 50)); // 100 tokens x 64 values x ~24 bytes
	const r = await raw({ input: long }, srv.url);
	assert.equal(r.status, 400);
	assert.equal(r.body.error.param, 'input');
	assert.match(r.body.error.message, /--max-output-bytes/);
	const short = await raw({ input: long.slice(0, 10) }, srv.url);
	assert.equal(short.status, 200);
	assert.equal(short.body.data[0].embedding.length, 10);
});
