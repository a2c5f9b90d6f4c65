// What other servers' clients send: hint fields accepted, ignored and named (refused with
// --strict-params), llama-server's and vLLM's aliases (n_predict, repetition_penalty) with
// their meaning, and chat_template_kwargs / reasoning_effort reaching the chat template.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { startServer, postJSON, STORIES, KEY, TMP } from './lib.mjs';

let srv, strict;
before(async () => {
	const tmpl = path.join(TMP, 'compat.jinja');
	fs.writeFileSync(tmpl, '{% for m in messages %}{{ m.content }}{% endfor %}{% if shout %} LOUD LOUD LOUD{% endif %}' +
		'{% if reasoning_effort is defined %} effort {{ reasoning_effort }}{% endif %}');
	srv = await startServer(['-m', STORIES, '--api-key', KEY, '--chat-template', tmpl]);
	strict = await startServer(['-m', STORIES, '--api-key', KEY, '--strict-params']);
});
after(() => [srv, strict].forEach((s) => s && s.proc.kill('SIGKILL')));

const chat = (u, extra) => postJSON(`${u}/v1/chat/completions`, { messages: [{ role: 'user', content: 'Once upon a time' }], max_tokens: 4, ...extra });
const cmpl = (u, extra) => postJSON(`${u}/v1/completions`, { prompt: 'Once upon a time', ...extra });

test('hint fields are accepted, change nothing and are named; --strict-params refuses each by name', async () => {
	const plain = await cmpl(srv.url, { max_tokens: 8, seed: 4 });
	for (const hint of [{ prompt_cache_key: 'thread-1' }, { cache_prompt: true }, { safety_identifier: 'u1' }, { prompt_cache_retention: '24h' }, { id_slot: 0 }]) {
		const r = await cmpl(srv.url, { max_tokens: 8, seed: 4, ...hint });
		assert.equal(r.status, 200, JSON.stringify(r.body));
		assert.equal(r.body.choices[0].token_sha, plain.body.choices[0].token_sha, Object.keys(hint)[0]);
		assert.equal(r.headers.get('x-lanes-ignored'), Object.keys(hint)[0]);
		const c = await chat(srv.url, hint);
		assert.equal(c.status, 200);
		const s = await cmpl(strict.url, { max_tokens: 2, ...hint });
		assert.equal(s.status, 400);
		assert.equal(s.body.error.param, Object.keys(hint)[0]);
		assert.match(s.body.error.message, /--strict-params/);
	}
	const m = await postJSON(`${srv.url}/v1/messages`, { model: 'stories260K', max_tokens: 2, messages: [{ role: 'user', content: 'x' }], prompt_cache_key: 'k' });
	assert.equal(m.status, 200);
});

test('n_predict and repetition_penalty mean what they mean on llama-server and vLLM', async () => {
	const n = await cmpl(srv.url, { n_predict: 5, ignore_eos: true });
	assert.equal(n.status, 200);
	assert.equal(n.body.usage.completion_tokens, 5);
	const unlimited = await cmpl(srv.url, { n_predict: -1, ignore_eos: true, stream: false, prompt: Array(500).fill(1) });
	assert.equal(unlimited.status, 200);
	assert.equal(unlimited.body.choices[0].finish_reason, 'length');
	for (const bad of [0, -2, 1.5, 'ten']) {
		const r = await cmpl(srv.url, { n_predict: bad });
		assert.equal(r.status, 400);
		assert.equal(r.body.error.param, 'n_predict');
	}
	const viaAlias = await cmpl(srv.url, { max_tokens: 24, seed: 9, repetition_penalty: 1.5 });
	const viaOwn = await cmpl(srv.url, { max_tokens: 24, seed: 9, repeat_penalty: 1.5 });
	assert.equal(viaAlias.body.choices[0].token_sha, viaOwn.body.choices[0].token_sha);
	const bad = await cmpl(srv.url, { max_tokens: 2, repetition_penalty: 0 });
	assert.equal(bad.status, 400);
	assert.equal(bad.body.error.param, 'repetition_penalty');
});

test('chat_template_kwargs and reasoning_effort reach the chat template', async () => {
	const base = (await chat(srv.url, {})).body.usage.prompt_tokens;
	const loud = await chat(srv.url, { chat_template_kwargs: { shout: true } });
	assert.equal(loud.status, 200);
	assert.ok(loud.body.usage.prompt_tokens > base, `${loud.body.usage.prompt_tokens} > ${base}`);
	const effort = await chat(srv.url, { reasoning_effort: 'high' });
	assert.ok(effort.body.usage.prompt_tokens > base);
	const quiet = await chat(srv.url, { chat_template_kwargs: { shout: false } });
	assert.equal(quiet.body.usage.prompt_tokens, base);
	for (const bad of [[1], 'x', { messages: [] }]) {
		const r = await chat(srv.url, { chat_template_kwargs: bad });
		assert.equal(r.status, 400);
		assert.equal(r.body.error.param, 'chat_template_kwargs');
	}
});

test('a model name that matches nothing means the one model; --strict-model answers 404', async () => {
	for (const [p, body] of [
		['/v1/chat/completions', { model: 'gpt-4o', messages: [{ role: 'user', content: 'x' }], max_tokens: 1 }],
		['/v1/completions', { model: 'gpt-3.5-turbo-instruct', prompt: 'x', max_tokens: 1 }],
		['/v1/embeddings', { model: 'text-embedding-3-small', input: 'x' }],
	]) {
		const r = await postJSON(`${srv.url}${p}`, body);
		assert.equal(r.status, 200, `${p}: ${JSON.stringify(r.body)}`);
		assert.equal(r.body.model, 'stories260K');
	}
	const m = await postJSON(`${srv.url}/v1/messages`, { model: 'claude-opus-4', max_tokens: 1, messages: [{ role: 'user', content: 'x' }] });
	assert.equal(m.status, 200);
	// lookups by name stay exact
	assert.equal((await fetch(`${srv.url}/v1/models/gpt-4o`)).status, 404);
	const exact = await startServer(['-m', STORIES, '--api-key', KEY, '--strict-model']);
	try {
		const r = await postJSON(`${exact.url}/v1/chat/completions`, { model: 'gpt-4o', messages: [{ role: 'user', content: 'x' }] });
		assert.equal(r.status, 404);
		assert.equal(r.body.error.code, 'model_not_found');
		const a = await postJSON(`${exact.url}/v1/messages`, { model: 'claude-opus-4', max_tokens: 1, messages: [{ role: 'user', content: 'x' }] });
		assert.equal(a.status, 404);
		assert.equal(a.body.error.type, 'not_found_error');
		const o = await postJSON(`${exact.url}/api/chat`, { model: 'llama3', messages: [{ role: 'user', content: 'x' }] });
		assert.equal(o.status, 404);
		assert.match(o.body.error, /not found/);
		assert.equal((await postJSON(`${exact.url}/v1/chat/completions`, { model: 'stories260K', messages: [{ role: 'user', content: 'x' }], max_tokens: 1 })).status, 200);
	} finally {
		exact.proc.kill('SIGKILL');
	}
});

test('clear refusals: batch prompts, tool messages, unknown content parts, compressed bodies', async () => {
	const b = await cmpl(srv.url, { prompt: ['one', 'two', 'three'], max_tokens: 1 });
	assert.equal(b.status, 400);
	assert.match(b.body.error.message, /batch prompts are not supported: 3 prompts/);
	const b2 = await cmpl(srv.url, { prompt: [[1, 2], [3, 4]], max_tokens: 1 });
	assert.match(b2.body.error.message, /batch prompts are not supported: 2 prompts/);
	const t = await chat(srv.url, { messages: [{ role: 'user', content: 'x' }, { role: 'function', name: 'f', content: '42' }] });
	assert.equal(t.status, 400);
	assert.equal(t.body.error.param, 'messages[1].role');
	assert.match(t.body.error.message, /'function' is not supported/);
	// a part type no API documents (images are placeholders: tests/http/34_compat)
	const i = await chat(srv.url, { messages: [{ role: 'user', content: [{ type: 'hologram', hologram: {} }] }] });
	assert.equal(i.status, 400);
	assert.equal(i.body.error.param, 'messages[0].content[0]');
	assert.match(i.body.error.message, /'hologram' is not supported/);
	const a = await postJSON(`${srv.url}/v1/messages`, {
		model: 'stories260K', max_tokens: 1, messages: [{ role: 'user', content: [{ type: 'hologram', source: {} }] }],
	});
	assert.equal(a.status, 400);
	assert.match(a.body.error.message, /'hologram' is not supported/);
	const z = await fetch(`${srv.url}/v1/completions`, {
		method: 'POST', headers: { Authorization: `Bearer ${KEY}`, 'Content-Type': 'application/json', 'Content-Encoding': 'gzip' },
		body: JSON.stringify({ prompt: 'x' }),
	});
	assert.equal(z.status, 415);
	assert.match((await z.json()).error.message, /Content-Encoding gzip/);
});

test('the access log counts the tokens a cancelled stream generated', async () => {
	const ac = new AbortController();
	const r = await fetch(`${srv.url}/v1/completions`, {
		method: 'POST', signal: ac.signal, headers: { Authorization: `Bearer ${KEY}`, 'Content-Type': 'application/json' },
		body: JSON.stringify({ prompt: 'Once upon a time', max_tokens: 2000, ignore_eos: true, stream: true }),
	});
	const reader = r.body.getReader();
	let got = 0;
	while (got < 4) {
		const { value } = await reader.read();
		got += (new TextDecoder().decode(value).match(/^data: /gm) || []).length;
	}
	ac.abort();
	let line;
	for (let i = 0; i < 600 && !line; i++) {
		await new Promise((res) => setTimeout(res, 50));
		line = srv.log().split('\n').find((l) => /POST \/v1\/completions 200 cancelled/.test(l));
	}
	assert.ok(line, 'a cancelled line in the log');
	const n = Number(line.match(/generated=(\d+)/)[1]);
	assert.ok(n >= 3, line);
});

test('typical_p is a sampler: repeatable for a seed, off at 1, its range refused outside (0, 1]', async () => {
	const a = await cmpl(srv.url, { max_tokens: 24, seed: 5, typical_p: 0.3, temperature: 1.5 });
	assert.equal(a.status, 200, JSON.stringify(a.body));
	const b = await cmpl(srv.url, { max_tokens: 24, seed: 5, typical_p: 0.3, temperature: 1.5 });
	assert.equal(a.body.choices[0].token_sha, b.body.choices[0].token_sha);
	const off = await cmpl(srv.url, { max_tokens: 24, seed: 5, typical_p: 1, temperature: 1.5 });
	const none = await cmpl(srv.url, { max_tokens: 24, seed: 5, temperature: 1.5 });
	assert.equal(off.body.choices[0].token_sha, none.body.choices[0].token_sha);
	for (const bad of [0, 1.5, -1, 'x']) {
		const r = await cmpl(srv.url, { max_tokens: 1, typical_p: bad });
		assert.equal(r.status, 400, String(bad));
		assert.equal(r.body.error.param, 'typical_p');
	}
	const o = await postJSON(`${srv.url}/api/generate`, { model: 'stories260K', prompt: 'x', stream: false, options: { typical_p: 0.5, num_predict: 2 } });
	assert.equal(o.status, 200);
});
