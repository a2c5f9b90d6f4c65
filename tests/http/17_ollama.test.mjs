// Ollama's API with the official `ollama` npm client: list, show, ps, version; chat and
// generate streamed (NDJSON) and not, with text equal to the OpenAI endpoints' for the same
// seed and options; embed; Ollama's {"error"} shape; the options lanes cannot honour refused.
import { test, before } from 'node:test';
import assert from 'node:assert/strict';
import { Ollama } from 'ollama';
import { mainServer, postJSON, KEY } from './lib.mjs';

let url, ollama;
before(async () => {
	({ url } = await mainServer());
	ollama = new Ollama({ host: url, headers: { Authorization: `Bearer ${KEY}` } });
});

const opts = { temperature: 0.8, top_k: 40, top_p: 0.9, seed: 7, num_predict: 24, repeat_penalty: 1 };
const oai = { temperature: 0.8, top_k: 40, top_p: 0.9, seed: 7, max_tokens: 24 };
const user = (content) => [{ role: 'user', content }];

test('list, show, ps and version describe the one model', async () => {
	const list = await ollama.list();
	assert.equal(list.models.length, 1);
	const m = list.models[0];
	assert.equal(m.name, 'stories260K:latest');
	assert.equal(m.details.format, 'gguf');
	assert.equal(m.details.family, 'llama');
	assert.equal(m.details.quantization_level, 'F32');
	assert.ok(m.size > 0);
	assert.match(m.modified_at, /^\d{4}-\d\d-\d\dT/);
	const show = await ollama.show({ model: 'stories260K' });
	assert.equal(show.model_info['general.architecture'], 'llama');
	assert.ok(show.model_info['llama.context_length'] > 0);
	assert.ok(show.capabilities.includes('completion'));
	assert.deepEqual(show.details, m.details);
	const ps = await ollama.ps();
	assert.equal(ps.models[0].name, 'stories260K:latest');
	assert.ok(ps.models[0].context_length > 0);
	assert.match((await ollama.version()).version, /^\d+\.\d+\.\d+$/);
	await assert.rejects(ollama.show({ model: 'llama3' }), (e) => e.status_code === 404 && /not found/.test(e.error));
});

test('chat: one object and the NDJSON stream give the OpenAI endpoint\'s text for the same seed', async () => {
	const want = (await postJSON(`${url}/v1/chat/completions`, { messages: user('Once upon a time'), ...oai })).body.choices[0];
	const r = await ollama.chat({ model: 'stories260K', messages: user('Once upon a time'), stream: false, options: opts });
	assert.equal(r.message.role, 'assistant');
	assert.equal(r.message.content, want.message.content);
	assert.equal(r.done, true);
	assert.equal(r.done_reason, want.finish_reason === 'length' ? 'length' : 'stop');
	assert.equal(r.eval_count, 24);
	assert.ok(r.prompt_eval_count >= 0 && r.total_duration > 0 && r.eval_duration >= 0, JSON.stringify(r));
	assert.match(r.created_at, /^\d{4}-\d\d-\d\dT[\d:.]+Z$/);
	let text = '', parts = 0, last;
	for await (const p of await ollama.chat({ model: 'stories260K:latest', messages: user('Once upon a time'), stream: true, options: opts })) {
		parts++;
		if (!p.done) text += p.message.content;
		last = p;
	}
	assert.equal(text, want.message.content);
	assert.ok(parts > 2, `${parts} lines`);
	assert.equal(last.done, true);
	assert.equal(last.eval_count, 24);
});

test('generate: the prompt through the chat template, or raw as a completion; empty loads', async () => {
	const viaChat = (await postJSON(`${url}/v1/chat/completions`, { messages: user('The cat'), ...oai })).body.choices[0].message.content;
	const g = await ollama.generate({ model: 'stories260K', prompt: 'The cat', stream: false, options: opts });
	assert.equal(g.response, viaChat);
	const cmpl = (await postJSON(`${url}/v1/completions`, { prompt: 'Once upon a time', ...oai })).body.choices[0].text;
	let text = '';
	for await (const p of await ollama.generate({ model: 'stories260K', prompt: 'Once upon a time', raw: true, stream: true, options: opts }))
		text += p.response;
	assert.equal(text, cmpl);
	// without "stream", Ollama's API streams: one JSON object per line
	const r = await fetch(`${url}/api/generate`, {
		method: 'POST', headers: { Authorization: `Bearer ${KEY}` },
		body: JSON.stringify({ model: 'stories260K', prompt: 'Once upon a time', raw: true, options: opts }),
	});
	assert.equal(r.headers.get('content-type'), 'application/x-ndjson');
	const lines = (await r.text()).trim().split('\n').map((l) => JSON.parse(l));
	assert.ok(lines.length > 2);
	assert.equal(lines.filter((l) => !l.done).map((l) => l.response).join(''), cmpl);
	assert.equal(lines.at(-1).done, true);
	const load = await ollama.generate({ model: 'stories260K', prompt: '', stream: false });
	assert.equal(load.done, true);
	assert.equal(load.done_reason, 'load');
});

test('embed: normalized vectors equal /v1/embeddings; the legacy endpoint is not normalized', async () => {
	const e = await ollama.embed({ model: 'stories260K', input: ['Once upon a time', 'The cat sat'] });
	assert.equal(e.embeddings.length, 2);
	const o = (await postJSON(`${url}/v1/embeddings`, { input: ['Once upon a time', 'The cat sat'], encoding_format: 'float' })).body;
	assert.deepEqual(e.embeddings, o.data.map((d) => d.embedding));
	assert.equal(e.prompt_eval_count, o.usage.prompt_tokens);
	const legacy = await ollama.embeddings({ model: 'stories260K', prompt: 'Once upon a time' });
	const n = Math.hypot(...legacy.embedding);
	assert.ok(Math.abs(n - 1) > 1e-3, `length ${n}`);
	const cos = legacy.embedding.reduce((s, x, i) => s + x * e.embeddings[0][i], 0) / n;
	assert.ok(Math.abs(cos - 1) < 1e-5);
});

test('errors in Ollama\'s shape; what lanes cannot honour is named or refused, runner tuning ignored', async () => {
	const bad = [
		[{ messages: user('x') }, /model is required/],
		[{ model: 'stories260K', messages: [] }, /messages/],
		[{ model: 'stories260K', messages: [{ role: 'robot', content: 'x' }] }, /role 'robot' is not supported/],
		[{ model: 'stories260K', messages: [{ role: 'user', content: 'x', tool_calls: [{ function: { name: 'f' } }] }] }, /only assistant turns make tool calls/],
		[{ model: 'stories260K', messages: [{ role: 'user', content: 'x', images: [7] }] }, /images\[0\] must be a base64 string/],
		[{ model: 'stories260K', messages: user('x'), format: 'yaml' }, /format/],
		[{ model: 'stories260K', messages: user('x'), options: { temperature: 'hot' } }, /options.temperature/],
		[{ model: 'stories260K', messages: user('x'), options: { num_predict: 0 } }, /num_predict/],
		[{ model: 'stories260K', messages: user('x'), options: { mirostat: 'on' } }, /mirostat/],
		[{ model: 'stories260K', messages: user('x'), options: { nonsense: 1 } }, /nonsense/],
	];
	for (const [body, re] of bad) {
		const r = await postJSON(`${url}/api/chat`, body);
		assert.equal(r.status, 400, JSON.stringify(body));
		assert.deepEqual(Object.keys(r.body), ['error']);
		assert.match(r.body.error, re);
	}
	// a lookup by name is exact; a generation takes any name for the one model
	const any = await postJSON(`${url}/api/chat`, { model: 'llama3', messages: user('x'), stream: false, options: { num_predict: 1 } });
	assert.equal(any.status, 200);
	const ok = await postJSON(`${url}/api/chat`, {
		model: 'stories260K', messages: user('x'), stream: false, keep_alive: '5m',
		options: { num_ctx: 4096, num_thread: 8, num_predict: 2, mirostat: 0, typical_p: 1 },
	});
	assert.equal(ok.status, 200, JSON.stringify(ok.body));
	assert.equal(ok.body.eval_count, 2);
	assert.equal(ok.headers.get('x-lanes-ignored'), null, 'runner tuning cannot change a reply: not named');
	// tfs_z and images lanes cannot honour: the reply comes, and the header names them
	const named = await postJSON(`${url}/api/chat`, {
		model: 'stories260K', messages: [{ role: 'user', content: 'x', images: ['aGk='] }], stream: false, options: { num_predict: 2, tfs_z: 0.5 },
	});
	assert.equal(named.status, 200, JSON.stringify(named.body));
	assert.equal(named.headers.get('x-lanes-ignored'), 'options.tfs_z,images');
	const nokey = await fetch(`${url}/api/chat`, { method: 'POST', body: JSON.stringify({ model: 'stories260K', messages: user('x') }) });
	assert.equal(nokey.status, 401);
	assert.ok((await nokey.json()).error);
});
