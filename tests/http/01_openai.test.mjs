// The official openai client against lanes serve (stories260K): chat and completions,
// streamed and not, usage against the tokenizer, n choices and seeds, stop sequences,
// logprobs, and bad requests as the SDK's typed errors.
import { test, before } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import { mainServer, postJSON, KEY } from './lib.mjs';

let url, client;
before(async () => {
	({ url } = await mainServer());
	client = new OpenAI({ baseURL: `${url}/v1`, apiKey: KEY, maxRetries: 0 });
});

const user = (content) => [{ role: 'user', content }];
const tokenize = async (body) => (await postJSON(`${url}/tokenize`, body)).body.tokens;

test('models: one entry with the context length; retrieve and 404', async () => {
	const list = await client.models.list();
	assert.equal(list.data.length, 1);
	assert.equal(list.data[0].id, 'stories260K');
	assert.ok(list.data[0].context_length >= 256);
	const one = await client.models.retrieve('stories260K');
	assert.equal(one.id, 'stories260K');
	await assert.rejects(client.models.retrieve('gpt-4'), OpenAI.NotFoundError);
});

test('chat: reply shape, usage equals the tokenizer counts', async () => {
	const r = await client.chat.completions.create({ model: 'stories260K', messages: user('Once upon a time'), max_tokens: 24, temperature: 0 });
	assert.equal(r.object, 'chat.completion');
	assert.match(r.id, /^chatcmpl-/);
	assert.equal(r.model, 'stories260K');
	assert.equal(r.choices.length, 1);
	const c = r.choices[0];
	assert.equal(c.index, 0);
	assert.equal(c.message.role, 'assistant');
	assert.equal(typeof c.message.content, 'string');
	assert.ok(['stop', 'length'].includes(c.finish_reason));
	assert.match(c.token_sha, /^[0-9a-f]{64}$/);
	// the prompt: the user's text (the model has no template, nor ChatML's tokens) tokenized as the tokenizer does
	const ids = await tokenize({ content: 'Once upon a time', add_special: true, parse_special: true });
	assert.equal(r.usage.prompt_tokens, ids.length);
	assert.equal((await tokenize({ messages: user('Once upon a time') })).length, ids.length);
	if (c.finish_reason === 'length') assert.equal(r.usage.completion_tokens, 24);
	assert.equal(r.usage.total_tokens, r.usage.prompt_tokens + r.usage.completion_tokens);
});

test('chat: logprobs count the generated tokens and spell the text', async () => {
	const r = await client.chat.completions.create({
		messages: user('Lily went to the park'), max_tokens: 20, logprobs: true, top_logprobs: 3, seed: 7,
	});
	const c = r.choices[0];
	const lp = c.logprobs.content;
	assert.equal(lp.length, r.usage.completion_tokens);
	const bytes = Buffer.from(lp.flatMap((e) => e.bytes));
	assert.equal(bytes.toString('utf8'), c.message.content);
	for (const e of lp) {
		assert.ok(e.logprob <= 0);
		assert.equal(e.top_logprobs.length, 3);
		assert.ok(e.top_logprobs[0].logprob >= e.top_logprobs[1].logprob);
		assert.ok(e.top_logprobs[0].logprob >= e.logprob - 1e-6);
	}
});

test('chat: streamed text equals the reply with the same seed; usage chunk', async () => {
	const body = { messages: user('The cat sat'), max_tokens: 40, seed: 11, temperature: 0.9 };
	const whole = await client.chat.completions.create(body);
	const stream = await client.chat.completions.create({ ...body, stream: true, stream_options: { include_usage: true } });
	let text = '', finish = null, usage = null, sha = null, role = null;
	for await (const ch of stream) {
		if (ch.usage) usage = ch.usage;
		for (const c of ch.choices) {
			if (c.delta.role) role = c.delta.role;
			if (c.delta.content) text += c.delta.content;
			if (c.finish_reason) (finish = c.finish_reason), (sha = c.token_sha);
		}
	}
	assert.equal(role, 'assistant');
	assert.equal(text, whole.choices[0].message.content);
	assert.equal(finish, whole.choices[0].finish_reason);
	assert.equal(sha, whole.choices[0].token_sha);
	assert.equal(usage.prompt_tokens, whole.usage.prompt_tokens);
	assert.equal(usage.completion_tokens, whole.usage.completion_tokens);
	assert.equal(usage.total_tokens, whole.usage.total_tokens);
});

test('chat: n = 2 gives two different choices, reproducible with the seed', async () => {
	const body = { messages: user('One day'), max_tokens: 32, n: 2, temperature: 1.0, seed: 1234 };
	const a = await client.chat.completions.create(body);
	assert.equal(a.choices.length, 2);
	assert.deepEqual(a.choices.map((c) => c.index), [0, 1]);
	assert.notEqual(a.choices[0].message.content, a.choices[1].message.content);
	const b = await client.chat.completions.create(body);
	assert.deepEqual(b.choices.map((c) => c.message.content), a.choices.map((c) => c.message.content));
	// without a seed the server draws one per request and reports it
	const { seed: _s, ...noSeed } = body;
	const c = await client.chat.completions.create(noSeed);
	assert.equal(typeof c.seed, 'number');
	assert.notEqual(c.choices[0].message.content, c.choices[1].message.content);
	const d = await client.chat.completions.create({ ...noSeed, seed: c.seed });
	assert.deepEqual(d.choices.map((x) => x.message.content), c.choices.map((x) => x.message.content));
	// streamed, both choices arrive by index
	const s = await client.chat.completions.create({ ...body, stream: true });
	const texts = ['', ''];
	for await (const ch of s) for (const x of ch.choices) texts[x.index] += x.delta.content || '';
	assert.deepEqual(texts, a.choices.map((x) => x.message.content));
});

test('chat: draft is accepted and changes nothing', async () => {
	const body = { messages: user('Tom had a ball'), max_tokens: 24, seed: 5 };
	const a = await client.chat.completions.create({ ...body, draft: true });
	const b = await client.chat.completions.create({ ...body, draft: false });
	assert.equal(a.choices[0].token_sha, b.choices[0].token_sha);
});

test('chat: a stop sequence ends the text before it, streamed and not', async () => {
	const base = { messages: user('Once upon a time'), max_tokens: 80, temperature: 0 };
	const full = (await client.chat.completions.create(base)).choices[0].message.content;
	const words = full.split(' ').filter((w) => w.length >= 3);
	assert.ok(words.length > 3, `need some words in: ${full}`);
	const stop = words[Math.floor(words.length / 2)];
	const at = full.indexOf(stop);
	const r = await client.chat.completions.create({ ...base, stop: [stop, 'zzzzqq'] });
	assert.equal(r.choices[0].message.content, full.slice(0, at));
	assert.equal(r.choices[0].finish_reason, 'stop');
	const s = await client.chat.completions.create({ ...base, stop, stream: true });
	let text = '', finish;
	for await (const ch of s) for (const c of ch.choices) (text += c.delta.content || ''), c.finish_reason && (finish = c.finish_reason);
	assert.equal(text, full.slice(0, at));
	assert.equal(finish, 'stop');
});

test('completions: text, usage, echo, logprobs, stream', async () => {
	const prompt = 'Once upon a time';
	const r = await client.completions.create({ model: 'stories260K', prompt, max_tokens: 16, temperature: 0, logprobs: 2 });
	assert.equal(r.object, 'text_completion');
	const ids = await tokenize({ content: prompt, add_special: true });
	assert.equal(r.usage.prompt_tokens, ids.length);
	assert.equal(r.usage.completion_tokens, 16);
	assert.equal(r.choices[0].finish_reason, 'length');
	const lp = r.choices[0].logprobs;
	assert.equal(lp.tokens.length, 16);
	assert.equal(lp.tokens.join(''), r.choices[0].text);
	assert.equal(lp.top_logprobs[0] && Object.keys(lp.top_logprobs[0]).length, 2);
	// the default max_tokens is 16, as OpenAI's
	const d = await client.completions.create({ prompt, temperature: 0 });
	assert.equal(d.choices[0].text, r.choices[0].text);
	const e = await client.completions.create({ prompt, max_tokens: 16, temperature: 0, echo: true });
	assert.equal(e.choices[0].text, prompt + r.choices[0].text);
	// ids as the prompt
	const byIds = await client.completions.create({ prompt: ids, max_tokens: 16, temperature: 0 });
	assert.equal(byIds.choices[0].text, r.choices[0].text);
	const s = await client.completions.create({ prompt, max_tokens: 16, temperature: 0, stream: true, stream_options: { include_usage: true } });
	let text = '', usage = null, finish = null;
	for await (const ch of s) {
		if (ch.usage) usage = ch.usage;
		for (const c of ch.choices) (text += c.text), c.finish_reason && (finish = c.finish_reason);
	}
	assert.equal(text, r.choices[0].text);
	assert.equal(finish, 'length');
	assert.equal(usage.completion_tokens, 16);
});

test('completions: n = 2 with a seed, and stop', async () => {
	const a = await client.completions.create({ prompt: 'The dog', max_tokens: 24, n: 2, seed: 99 });
	assert.notEqual(a.choices[0].text, a.choices[1].text);
	const b = await client.completions.create({ prompt: 'The dog', max_tokens: 24, n: 2, seed: 99 });
	assert.deepEqual(b.choices.map((c) => c.text), a.choices.map((c) => c.text));
	const full = (await client.completions.create({ prompt: 'The dog', max_tokens: 48, temperature: 0 })).choices[0].text;
	const stop = full.split(' ').filter((w) => w.length >= 3)[2];
	const s = await client.completions.create({ prompt: 'The dog', max_tokens: 48, temperature: 0, stop });
	assert.equal(s.choices[0].text, full.slice(0, full.indexOf(stop)));
	assert.equal(s.choices[0].finish_reason, 'stop');
});

test('typed errors: 400 naming the field, 404 model, 401 key, unsupported parameters', async () => {
	const m = user('hi');
	let e = await client.chat.completions.create({ messages: m, temperature: 5 }).catch((x) => x);
	assert.ok(e instanceof OpenAI.BadRequestError, String(e));
	assert.equal(e.status, 400);
	assert.equal(e.param, 'temperature');
	assert.match(e.message, /temperature/);
	e = await client.chat.completions.create({ messages: m, max_tokens: 'ten' }).catch((x) => x);
	assert.ok(e instanceof OpenAI.BadRequestError);
	assert.equal(e.param, 'max_tokens');
	e = await client.chat.completions.create({ messages: m, n: 0 }).catch((x) => x);
	assert.ok(e instanceof OpenAI.BadRequestError);
	assert.equal(e.param, 'n');
	e = await client.chat.completions.create({ messages: [{ role: 'user' }] }).catch((x) => x);
	assert.ok(e instanceof OpenAI.BadRequestError);
	assert.equal(e.param, 'messages[0].content');
	// one model served: any name means it (as llama-server; --strict-model for the 404)
	const any = await client.chat.completions.create({ model: 'gpt-4o', messages: m, max_tokens: 2 });
	assert.equal(any.model, 'stories260K');
	e = await client.chat.completions.create({ messages: m, tools: [{ type: 'custom', custom: { name: 'f' } }] }).catch((x) => x);
	assert.ok(e instanceof OpenAI.BadRequestError);
	assert.match(e.message, /tools/);
	e = await client.chat.completions.create({ messages: m, response_format: { type: 'xml' } }).catch((x) => x);
	assert.ok(e instanceof OpenAI.BadRequestError);
	assert.match(e.message, /response_format/);
	// fields no reference documents; audio is documented: accepted, and named
	e = await client.chat.completions.create({ messages: m, frobnicate: 1, wibble: {}, audio: {} }).catch((x) => x);
	assert.ok(e instanceof OpenAI.BadRequestError);
	assert.match(e.message, /unsupported parameters: frobnicate, wibble$/);
	e = await client.completions.create({ prompt: 'x'.repeat(20000), max_tokens: 10 }).catch((x) => x);
	assert.ok(e instanceof OpenAI.BadRequestError);
	assert.equal(e.code, 'context_length_exceeded');
	e = await client.completions.create({ prompt: 'x', max_tokens: 0 }).catch((x) => x);
	assert.ok(e instanceof OpenAI.BadRequestError);
	assert.equal(e.param, 'max_tokens');
	const bad = new OpenAI({ baseURL: `${url}/v1`, apiKey: 'wrong', maxRetries: 0 });
	e = await bad.chat.completions.create({ messages: m }).catch((x) => x);
	assert.ok(e instanceof OpenAI.AuthenticationError, String(e));
	// control reads stay open without a key
	assert.equal((await fetch(`${url}/health`)).status, 200);
	assert.equal((await fetch(`${url}/v1/models`)).status, 200);
});

test('control reads: /slots shape, /metrics names and counters', async () => {
	const s = (await (await fetch(`${url}/slots`)).json());
	assert.equal(typeof s.sequence, 'number');
	assert.equal(typeof s.clock_us, 'number');
	assert.equal(typeof s.queue_depth, 'number');
	assert.ok(s.lanes.length >= 1);
	for (const l of s.lanes) {
		assert.deepEqual(Object.keys(l).sort(), ['draft_acceptance', 'draft_acceptance_by_position', 'draft_k', 'filled_tokens', 'generated_tokens', 'id', 'phase', 'prompt_tokens']);
		assert.ok(['idle', 'filling', 'live'].includes(l.phase));
	}
	const scrape = async () => {
		const t = await (await fetch(`${url}/metrics`)).text();
		const v = {};
		for (const line of t.split('\n')) if (line && !line.startsWith('#')) v[line.split(' ')[0]] = Number(line.split(' ')[1]);
		return v;
	};
	const a = await scrape();
	for (const name of ['lanes_requests_total{outcome="finished"}', 'lanes_requests_total{outcome="cancelled"}',
		'lanes_requests_total{outcome="failed"}', 'lanes_requests_total{outcome="rejected"}', 'lanes_prompt_tokens_total',
		'lanes_generated_tokens_total', 'lanes_queue_depth', 'lanes_lanes_busy', 'lanes_kv_pages_used', 'lanes_kv_pages_free',
		'lanes_prefix_cache_hit_tokens_total'])
		assert.ok(name in a, name);
	for (const h of ['lanes_round_seconds', 'lanes_forward_seconds', 'lanes_time_to_first_token_seconds', 'lanes_inter_token_seconds'])
		for (const suffix of ['_bucket{le="+Inf"}', '_sum', '_count']) assert.ok(h + suffix in a, h + suffix);
	// undrafted, so every token after the first costs one forward pass
	const r = await client.completions.create({ prompt: 'A frog', max_tokens: 12, ignore_eos: true, draft: false });
	await client.chat.completions.create({ messages: user('x'), temperature: 9 }).catch(() => {});
	// the snapshot is published at the round boundary and the histograms are sampled: wait for both
	let b;
	for (let i = 0; i < 3000; i++) {
		b = await scrape();
		if (b['lanes_lanes_busy'] === 0 && b['lanes_forward_seconds_count'] >= a['lanes_forward_seconds_count'] + 12) break;
		await new Promise((res) => setTimeout(res, 10));
	}
	assert.equal(b['lanes_requests_total{outcome="finished"}'], a['lanes_requests_total{outcome="finished"}'] + 1);
	assert.equal(b['lanes_requests_total{outcome="rejected"}'], a['lanes_requests_total{outcome="rejected"}'] + 1);
	assert.equal(b['lanes_generated_tokens_total'], a['lanes_generated_tokens_total'] + r.usage.completion_tokens);
	assert.equal(b['lanes_time_to_first_token_seconds_count'], a['lanes_time_to_first_token_seconds_count'] + 1);
	assert.equal(b['lanes_inter_token_seconds_count'], a['lanes_inter_token_seconds_count'] + 11);
	assert.ok(b['lanes_forward_seconds_count'] >= a['lanes_forward_seconds_count'] + 12);
	assert.equal(b['lanes_lanes_busy'], 0);
});
