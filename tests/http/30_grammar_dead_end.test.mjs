// A grammar that cannot go on is never a 500: ambiguity the compiler finds after some text is
// the client's 400 (GBNF and JSON Schema, in every API that takes one), and a grammar that
// allows no token mid-generation (every allowed token banned by logit_bias, or ambiguity past
// what compile explores) ends as each API's length finish with "lanes_stop_reason":
// "grammar_dead_end", streamed and not, with the text so far all sent and no error event.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import path from 'node:path';
import { startServer, postJSON, postSSE, SHARED, KEY } from './lib.mjs';

let srv, url, oai;
before(async () => {
	// a random-weight model with stories260K's vocabulary and a context room for the tool prompt
	srv = await startServer(['-m', path.join(SHARED, 'models/ref-llama-Q4_0.gguf'), '--api-key', KEY, '--lanes', '2', '--ctx', '8192']);
	url = srv.url;
	oai = new OpenAI({ baseURL: `${url}/v1`, apiKey: KEY, maxRetries: 0 });
});
after(() => srv && srv.proc.kill('SIGKILL'));

const user = [{ role: 'user', content: 'Once upon a time' }];
const DEAD = 'grammar_dead_end';

// Ambiguity that doubles with each "x" (or "["), found by compile a few bytes in.
const LATE_GBNF = 'root ::= "Answer: " a\na ::= "x" a "y" | "x" a "y" | ""\n';
const v = { anyOf: [{ type: 'array', items: { $ref: '#/$defs/v' } }, { type: 'array', items: { $ref: '#/$defs/v' } }, { type: 'integer' }] };
const LATE_SCHEMA = { type: 'object', properties: { answer: { $ref: '#/$defs/v' } }, required: ['answer'], $defs: { v } };

// Nine nested arrays, each matched two ways (512 parses), around a 100-character string, the
// spaces they allow costing compile more than it explores for a grammar this size; the digit
// after the string would need more than 4096 parses (512 times ten digits and two spaces), so
// the text dead-ends right after the string and any spaces.
const LONG = 'once upon a time '.repeat(6).slice(0, 100);
const defs = { d0: { type: 'array', prefixItems: [{ const: LONG }, { enum: [0, 1, 2, 3, 4, 5, 6, 7, 8, 9] }], minItems: 2, maxItems: 2 } };
for (let k = 1; k <= 9; k++) {
	const arr = { type: 'array', prefixItems: [{ $ref: `#/$defs/d${k - 1}` }], minItems: 1, maxItems: 1 };
	defs[`d${k}`] = { anyOf: [arr, { ...arr }] };
}
const HIDDEN = { type: 'object', properties: { a: { $ref: '#/$defs/d9' } }, required: ['a'], additionalProperties: false, $defs: defs };
const MAX = 1500;
// the text a dead end leaves: whole up to the string, then nothing but spaces
const deadText = (t) => {
	assert.match(t, /^\{\s*"a"\s*:(\s*\[){10}\s*"/, t.slice(0, 80));
	assert.ok(t.includes(JSON.stringify(LONG)), `the string is all there: ${t.slice(-80)}`);
	assert.match(t.slice(t.indexOf(JSON.stringify(LONG)) + LONG.length + 2), /^\s*$/);
};

// NDJSON lines of a streamed Ollama reply.
async function postNDJSON(path, body) {
	const r = await fetch(`${url}${path}`, { method: 'POST', headers: { 'Content-Type': 'application/json', Authorization: `Bearer ${KEY}` }, body: JSON.stringify(body) });
	assert.equal(r.status, 200);
	return (await r.text()).split('\n').filter((l) => l).map((l) => JSON.parse(l));
}

test('late ambiguity is a 400 at compile time in every API, streamed or not, never a 500', async () => {
	const late = /is too ambiguous: after ".*(Answer: x|\[\[\[\[).*" a match would follow more than 4096 parses at once \(max_stacks\)/;
	for (const stream of [false, true]) {
		let r = await postJSON(`${url}/v1/chat/completions`, { messages: user, max_tokens: 8, grammar: LATE_GBNF, stream });
		assert.equal(r.status, 400, JSON.stringify(r.body));
		assert.equal(r.body.error.param, 'grammar');
		assert.match(r.body.error.message, /^grammar: line 2, column 1: rule 'a' /);
		assert.match(r.body.error.message, late);
		r = await postJSON(`${url}/v1/completions`, { prompt: 'x', max_tokens: 8, grammar: LATE_GBNF, stream });
		assert.equal(r.status, 400, JSON.stringify(r.body));
		r = await postJSON(`${url}/v1/chat/completions`, {
			messages: user, max_tokens: 8, stream, response_format: { type: 'json_schema', json_schema: { name: 'late', schema: LATE_SCHEMA } },
		});
		assert.equal(r.status, 400, JSON.stringify(r.body));
		assert.equal(r.body.error.param, 'response_format.json_schema.schema');
		assert.match(r.body.error.message, late);
		r = await postJSON(`${url}/v1/responses`, { input: 'x', max_output_tokens: 16, stream, text: { format: { type: 'json_schema', name: 'late', schema: LATE_SCHEMA } } });
		assert.equal(r.status, 400, JSON.stringify(r.body));
		assert.match(r.body.error.message, late);
		r = await postJSON(`${url}/api/chat`, { model: 'ref-llama-Q4_0', messages: user, stream, format: LATE_SCHEMA });
		assert.equal(r.status, 400, JSON.stringify(r.body));
		assert.match(r.body.error, late);
		r = await postJSON(`${url}/v1/messages`, {
			model: 'ref-llama-Q4_0', max_tokens: 16, stream, messages: user,
			tools: [{ name: 'f', description: 'd', input_schema: LATE_SCHEMA }], tool_choice: { type: 'tool', name: 'f' },
		});
		assert.equal(r.status, 400, JSON.stringify(r.body));
		assert.match(r.body.error.message, late);
	}
	// the SDK sees the 400 as the client's error
	const e = await oai.chat.completions.create({ messages: user, max_tokens: 8, grammar: LATE_GBNF }).catch((x) => x);
	assert.equal(e.status, 400);
});

test('logit_bias banning every token the grammar allows: a length finish naming the dead end, streamed too', async () => {
	// after "Hi" only the byte 0x01 may follow, and its one token (<0x01>, id 4) is banned
	const body = { max_tokens: 20, grammar: 'root ::= "Hi" [\\x01]', logit_bias: { 4: -100 }, seed: 3 };
	const c = await oai.chat.completions.create({ messages: user, ...body });
	assert.equal(c.choices[0].finish_reason, 'length');
	assert.equal(c.choices[0].lanes_stop_reason, DEAD);
	assert.equal(c.choices[0].message.content, 'Hi');
	assert.ok(c.usage.completion_tokens >= 1 && c.usage.completion_tokens < 20);
	const p = await postJSON(`${url}/v1/completions`, { prompt: 'Once', ...body });
	assert.equal(p.status, 200, JSON.stringify(p.body));
	assert.equal(p.body.choices[0].finish_reason, 'length');
	assert.equal(p.body.choices[0].lanes_stop_reason, DEAD);
	assert.equal(p.body.choices[0].text, 'Hi');
	for (const [path, req, textOf] of [
		['/v1/chat/completions', { messages: user }, (ch) => ch.delta.content || ''],
		['/v1/completions', { prompt: 'Once' }, (ch) => ch.text || ''],
	]) {
		const s = await postSSE(`${url}${path}`, { ...req, ...body, stream: true });
		assert.equal(s.status, 200);
		assert.ok(!s.events.some((e) => e.data && e.data.error), `no error event: ${JSON.stringify(s.events)}`);
		assert.equal(s.events.at(-1).data, '[DONE]');
		const chunks = s.events.filter((e) => e.data && e.data.choices);
		const last = chunks.at(-1).data.choices[0];
		assert.equal(last.finish_reason, 'length');
		assert.equal(last.lanes_stop_reason, DEAD);
		assert.equal(chunks.map((e) => (e.data.choices[0] ? textOf(e.data.choices[0]) : '')).join(''), 'Hi');
	}
	// other finishes do not name one
	const plain = await oai.chat.completions.create({ messages: user, max_tokens: 3 });
	assert.equal(plain.choices[0].finish_reason, 'length');
	assert.equal(plain.choices[0].lanes_stop_reason, undefined);
});

test('ambiguity past what compile explores: the dead end in every API, streamed and not, with the text whole so far', async () => {
	// the schema compiles: its dead end lies past the exploration
	const oaiFormat = { type: 'json_schema', json_schema: { name: 'hidden', schema: HIDDEN } };
	const c = await postJSON(`${url}/v1/chat/completions`, { messages: user, max_tokens: MAX, response_format: oaiFormat, seed: 1 });
	assert.equal(c.status, 200, JSON.stringify(c.body).slice(0, 300));
	assert.equal(c.body.choices[0].finish_reason, 'length');
	assert.equal(c.body.choices[0].lanes_stop_reason, DEAD);
	assert.ok(c.body.usage.completion_tokens < MAX);
	deadText(c.body.choices[0].message.content);
	const cs = await postSSE(`${url}/v1/chat/completions`, { messages: user, max_tokens: MAX, response_format: oaiFormat, seed: 1, stream: true });
	assert.ok(!cs.events.some((e) => e.data && e.data.error));
	const fin = cs.events.filter((e) => e.data && e.data.choices && e.data.choices[0] && e.data.choices[0].finish_reason).at(-1).data.choices[0];
	assert.deepEqual([fin.finish_reason, fin.lanes_stop_reason], ['length', DEAD]);

	const resp = { input: 'Once upon a time', max_output_tokens: MAX, text: { format: { type: 'json_schema', name: 'hidden', schema: HIDDEN } } };
	const r = await postJSON(`${url}/v1/responses`, resp);
	assert.equal(r.status, 200, JSON.stringify(r.body).slice(0, 300));
	assert.equal(r.body.status, 'incomplete');
	assert.deepEqual(r.body.incomplete_details, { reason: 'max_output_tokens', lanes_stop_reason: DEAD });
	deadText(r.body.output[0].content[0].text);
	const rs = await postSSE(`${url}/v1/responses`, { ...resp, stream: true });
	assert.ok(!rs.events.some((e) => e.event === 'response.failed' || e.event === 'error'), rs.events.map((e) => e.event).join());
	const inc = rs.events.find((e) => e.event === 'response.incomplete');
	assert.ok(inc, rs.events.map((e) => e.event).join());
	assert.deepEqual(inc.data.response.incomplete_details, { reason: 'max_output_tokens', lanes_stop_reason: DEAD });

	const oll = { model: 'ref-llama-Q4_0', messages: user, format: HIDDEN, options: { num_predict: MAX } };
	const o = await postJSON(`${url}/api/chat`, { ...oll, stream: false });
	assert.equal(o.status, 200, JSON.stringify(o.body).slice(0, 300));
	assert.deepEqual([o.body.done, o.body.done_reason, o.body.lanes_stop_reason], [true, 'length', DEAD]);
	deadText(o.body.message.content);
	const lines = await postNDJSON('/api/chat', { ...oll, stream: true });
	assert.ok(!lines.some((l) => l.error));
	assert.deepEqual([lines.at(-1).done, lines.at(-1).done_reason, lines.at(-1).lanes_stop_reason], [true, 'length', DEAD]);
	deadText(lines.map((l) => l.message.content).join(''));

	// a forced tool call whose input dead-ends: not tool_use, since the call is not whole
	const ant = {
		model: 'ref-llama-Q4_0', max_tokens: MAX, messages: user,
		tools: [{ name: 'f', description: 'd', input_schema: HIDDEN }], tool_choice: { type: 'tool', name: 'f' },
	};
	const a = await postJSON(`${url}/v1/messages`, ant);
	assert.equal(a.status, 200, JSON.stringify(a.body).slice(0, 300));
	assert.deepEqual([a.body.stop_reason, a.body.lanes_stop_reason], ['max_tokens', DEAD]);
	const as = await postSSE(`${url}/v1/messages`, { ...ant, stream: true });
	assert.ok(!as.events.some((e) => e.event === 'error'), as.events.map((e) => e.event).join());
	const delta = as.events.find((e) => e.event === 'message_delta');
	assert.deepEqual([delta.data.delta.stop_reason, delta.data.delta.lanes_stop_reason], ['max_tokens', DEAD]);
	assert.equal(as.events.at(-1).event, 'message_stop');
});
