// The request contract's bounds as each API states them: one validator with a table per API
// (temperature 0..2 on OpenAI paths, 0..1 on /v1/messages), errors naming the API's own field.
import { test, before } from 'node:test';
import assert from 'node:assert/strict';
import { mainServer, postJSON } from './lib.mjs';

let url;
before(async () => ({ url } = await mainServer()));

const msgs = [{ role: 'user', content: 'Once' }];
const paths = {
	chat: (extra) => postJSON(`${url}/v1/chat/completions`, { messages: msgs, max_tokens: 2, ...extra }),
	completions: (extra) => postJSON(`${url}/v1/completions`, { prompt: 'Once', max_tokens: 2, ...extra }),
	responses: (extra) => postJSON(`${url}/v1/responses`, { input: 'Once', max_output_tokens: 2, ...extra }),
	messages: (extra) => postJSON(`${url}/v1/messages`, { model: 'stories260K', messages: msgs, max_tokens: 2, ...extra }),
};

// 400 naming param on OpenAI paths; on /v1/messages the field in Anthropic's message.
async function refused(path, extra, param) {
	const r = await paths[path](extra);
	assert.equal(r.status, 400, `${path} ${JSON.stringify(extra)}: ${JSON.stringify(r.body)}`);
	if (path === 'messages') {
		assert.equal(r.body.error.type, 'invalid_request_error');
		assert.ok(r.body.error.message.includes(param), r.body.error.message);
	} else {
		assert.equal(r.body.error.param, param, JSON.stringify(r.body));
		assert.ok(r.body.error.message.includes(param.split('.')[0]), r.body.error.message);
	}
	return r.body;
}

async function accepted(path, extra) {
	const r = await paths[path](extra);
	assert.equal(r.status, 200, `${path} ${JSON.stringify(extra)}: ${JSON.stringify(r.body)}`);
	return r.body;
}

test('temperature: 0..2 on OpenAI paths, 0..1 on /v1/messages', async () => {
	for (const p of ['chat', 'completions', 'responses']) {
		await accepted(p, { temperature: 1.5 });
		await accepted(p, { temperature: 2 });
		await refused(p, { temperature: 2.5 }, 'temperature');
	}
	await accepted('messages', { temperature: 1 });
	const b = await refused('messages', { temperature: 1.5 }, 'temperature');
	assert.match(b.error.message, /between 0 and 1/);
	await refused('chat', { temperature: -0.1 }, 'temperature');
});

test('top_p must be above 0 and at most 1 on every path', async () => {
	for (const p of Object.keys(paths)) {
		await refused(p, { top_p: 0 }, 'top_p');
		await refused(p, { top_p: 1.5 }, 'top_p');
		await accepted(p, { top_p: 0.5 });
	}
});

test('max tokens 0 is refused under the API\'s own name', async () => {
	await refused('chat', { max_tokens: 0 }, 'max_tokens');
	await refused('chat', { max_tokens: undefined, max_completion_tokens: 0 }, 'max_completion_tokens');
	await refused('completions', { max_tokens: 0 }, 'max_tokens');
	const b = await refused('responses', { max_output_tokens: 0 }, 'max_output_tokens');
	assert.doesNotMatch(b.error.message, /\bmax_tokens\b/);
	await refused('messages', { max_tokens: 0 }, 'max_tokens');
	// a prompt past the context names the prompt's field, with OpenAI's code
	const r = await paths.responses({ input: 'Once upon a time '.repeat(2000), max_output_tokens: 2 });
	assert.equal(r.status, 400);
	assert.equal(r.body.error.param, 'input');
	assert.equal(r.body.error.code, 'context_length_exceeded');
});

test('max_tokens past the window ends there with the length reason, the same tokens as asking for what fits', async () => {
	const ctx = (await (await fetch(`${url}/v1/models`)).json()).data[0].context_length;
	const ids = (await postJSON(`${url}/tokenize`, { content: 'Once upon a time' })).body.tokens;
	const fits = ctx - ids.length;
	const big = await accepted('completions', { prompt: ids, max_tokens: 32000, ignore_eos: true, seed: 3 });
	const exact = await accepted('completions', { prompt: ids, max_tokens: fits, ignore_eos: true, seed: 3 });
	assert.equal(big.choices[0].finish_reason, 'length');
	assert.equal(big.usage.completion_tokens, fits);
	assert.equal(big.choices[0].token_sha, exact.choices[0].token_sha);
	assert.equal(big.choices[0].text, exact.choices[0].text);
	// Anthropic clients send 8,192-32,000 routinely: the reply ends with stop_reason max_tokens
	const m = await accepted('messages', { max_tokens: 32000, ignore_eos: true });
	assert.equal(m.stop_reason, 'max_tokens');
	const resp = await accepted('responses', { max_output_tokens: 32000, ignore_eos: true });
	assert.equal(resp.status, 'incomplete');
	assert.equal(resp.incomplete_details.reason, 'max_output_tokens');
});

test('the other bounds: penalties, top_logprobs, logit_bias, stop counts, n', async () => {
	await refused('chat', { presence_penalty: 2.5 }, 'presence_penalty');
	await refused('completions', { frequency_penalty: -3 }, 'frequency_penalty');
	await refused('chat', { repeat_penalty: 0 }, 'repeat_penalty');
	await refused('chat', { min_p: 1.5 }, 'min_p');
	await refused('responses', { top_k: -1 }, 'top_k');
	await refused('chat', { logprobs: true, top_logprobs: 21 }, 'top_logprobs');
	await refused('completions', { logprobs: 21 }, 'logprobs');
	await refused('chat', { logit_bias: { 5: 101 } }, 'logit_bias');
	await refused('chat', { logit_bias: { 5: 'x' } }, 'logit_bias');
	await refused('chat', { logit_bias: { 'not-a-token': 1 } }, 'logit_bias');
	// -100 bans a token: with every token but one banned, that one comes out
	const keep = 100;
	const all = {};
	for (let i = 0; i < 512; i++) if (i !== keep) all[i] = -100;
	const text = (await accepted('completions', { prompt: [1, 2], max_tokens: 3, seed: 5, logit_bias: all })).choices[0].text;
	const one = (await postJSON(`${url}/detokenize`, { tokens: [keep, keep, keep] })).body.content;
	assert.equal(text.trim(), one.trim());
	await refused('chat', { logit_bias: { 5: -100.5 } }, 'logit_bias');
	const many = Array.from({ length: 17 }, (_, i) => `s${i}`);
	await refused('chat', { stop: many }, 'stop');
	await refused('messages', { stop_sequences: many }, 'stop_sequences');
	await refused('messages', { stop_sequences: 'x' }, 'stop_sequences');
	await accepted('messages', { stop_sequences: many.slice(0, 16) });
	// a stop string too long is refused naming its field, in every shape it can take
	const long = 'a'.repeat(1025);
	await refused('chat', { stop: long }, 'stop');
	await refused('completions', { stop: ['x', long] }, 'stop');
	await refused('messages', { stop_sequences: [long] }, 'stop_sequences');
	await accepted('chat', { stop: 'a'.repeat(1024) });
	await refused('chat', { n: 33 }, 'n');
	await refused('completions', { best_of: 33 }, 'best_of');
	// best_of above n is documented: n completions run, and best_of is named as not honoured
	const best = await paths.completions({ n: 2, best_of: 3 });
	assert.equal(best.status, 200);
	assert.equal(best.headers.get('x-lanes-ignored'), 'best_of');
});

test('nested fields are read from their own table', async () => {
	await refused('chat', { stream: true, stream_options: { include_usage: 'yes' } }, 'stream_options.include_usage');
	await refused('chat', { stream_options: { frob: 1 } }, 'stream_options.frob');
	await refused('chat', { messages: [{ role: 'user', content: 'x', frob: 1 }] }, 'messages[0].frob');
	await refused('responses', { input: [{ role: 'user', content: 'x', frob: 1 }] }, 'input[0].frob');
});
