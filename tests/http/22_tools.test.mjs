// Structured outputs and tool calls through the official clients on stories260K (no tool
// template: the fallback's Hermes <tool_call> calls, as plain text): calls that validate against
// their tool's schema, a round trip with the tool's result, streamed calls equal to whole
// ones, zod's parse helper, Anthropic tool_use and Responses function_call items, and the
// 400s for bad schemas and grammars. The grammar forbids ending before a document is whole,
// so only a length cut can leave one unparseable: such replies are said and not counted.
import { test, before } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import Anthropic from '@anthropic-ai/sdk';
import Ajv from 'ajv';
import { z } from 'zod';
import { zodResponseFormat } from 'openai/helpers/zod';
import { mainServer, postJSON, KEY, samplesUnderGrammars, grammarTest } from './lib.mjs';

let url, oai, ant, constrains;
before(async () => {
	({ url } = await mainServer());
	oai = new OpenAI({ baseURL: `${url}/v1`, apiKey: KEY, maxRetries: 0 });
	ant = new Anthropic({ baseURL: url, apiKey: KEY, maxRetries: 0 });
	constrains = await samplesUnderGrammars(url);
});
// Tests of constrained output need the lane host's constrained sampling.
const ctest = grammarTest(test, () => constrains);
// a reply cut by max_tokens cannot be checked: under these bounded schemas it should not happen
const cut = () => assert.fail('the reply was cut by max_tokens');

const ajv = new Ajv({ strict: false });
const WEATHER = {
	type: 'object',
	properties: { city: { type: 'string', maxLength: 12 }, unit: { enum: ['c', 'f'] } },
	required: ['city', 'unit'],
	additionalProperties: false,
};
const ADD = { type: 'object', properties: { a: { type: 'integer', minimum: 0, maximum: 99 }, b: { type: 'integer', minimum: 0, maximum: 99 } }, required: ['a', 'b'], additionalProperties: false };
const TOOLS = [
	{ type: 'function', function: { name: 'get_weather', description: 'Weather in a city', parameters: WEATHER } },
	{ type: 'function', function: { name: 'add', description: 'Adds two numbers', parameters: ADD } },
];
const SCHEMAS = { get_weather: WEATHER, add: ADD };
const msgs = [{ role: 'user', content: 'What is the weather in Paris?' }];
const MAX = 400;

function checkCall(call) {
	assert.equal(call.type, 'function');
	assert.match(call.id, /^call_/);
	assert.ok(SCHEMAS[call.function.name], `unknown tool ${call.function.name}`);
	const args = JSON.parse(call.function.arguments);
	assert.ok(ajv.validate(SCHEMAS[call.function.name], args), JSON.stringify(ajv.errors));
	return args;
}

ctest('chat: tool_choice required returns calls whose arguments validate', async () => {
	let counted = 0;
	for (const seed of [1, 2, 3]) {
		const r = await oai.chat.completions.create({ messages: msgs, tools: TOOLS, tool_choice: 'required', max_tokens: MAX, seed, parallel_tool_calls: seed !== 3 ? false : undefined });
		const ch = r.choices[0];
		if (ch.finish_reason === 'length') {
			console.log(`seed ${seed}: cut by length, not counted`);
			continue;
		}
		counted++;
		assert.equal(ch.finish_reason, 'tool_calls');
		assert.equal(ch.message.content, null);
		assert.ok(ch.message.tool_calls.length >= 1);
		for (const c of ch.message.tool_calls) checkCall(c);
	}
	assert.ok(counted > 0, 'every reply was cut by length');
});

ctest('chat: a named tool_choice calls that tool', async () => {
	const r = await oai.chat.completions.create({
		messages: msgs, tools: TOOLS, tool_choice: { type: 'function', function: { name: 'add' } }, max_tokens: MAX, seed: 4,
		parallel_tool_calls: false,
	});
	const ch = r.choices[0];
	if (ch.finish_reason === 'length') return cut();
	assert.equal(ch.message.tool_calls.length, 1);
	assert.equal(ch.message.tool_calls[0].function.name, 'add');
	checkCall(ch.message.tool_calls[0]);
});

ctest('chat: streamed tool calls assemble to the non-streamed call (same seed)', async () => {
	const body = { messages: msgs, tools: TOOLS, tool_choice: 'required', max_tokens: MAX, seed: 7, parallel_tool_calls: false };
	const whole = await oai.chat.completions.create(body);
	const stream = await oai.chat.completions.create({ ...body, stream: true });
	const calls = [];
	let finish = null;
	for await (const chunk of stream) {
		const d = chunk.choices[0]?.delta;
		if (chunk.choices[0]?.finish_reason) finish = chunk.choices[0].finish_reason;
		for (const tc of d?.tool_calls ?? []) {
			if (tc.id) {
				assert.equal(tc.type, 'function');
				assert.equal(typeof tc.function.name, 'string');
				calls[tc.index] = { id: tc.id, name: tc.function.name, arguments: tc.function.arguments ?? '' };
			} else {
				calls[tc.index].arguments += tc.function.arguments;
			}
		}
	}
	assert.equal(finish, whole.choices[0].finish_reason);
	if (finish === 'length') return cut();
	assert.deepEqual(calls.map((c) => [c.name, c.arguments]), whole.choices[0].message.tool_calls.map((c) => [c.function.name, c.function.arguments]));
});

ctest('chat: a round trip renders the call and its result, and the next turn answers', async () => {
	const r = await oai.chat.completions.create({ messages: msgs, tools: TOOLS, tool_choice: 'required', max_tokens: MAX, seed: 1, parallel_tool_calls: false });
	const m = r.choices[0].message;
	if (r.choices[0].finish_reason === 'length') return cut();
	const next = [...msgs, m, ...m.tool_calls.map((c) => ({ role: 'tool', tool_call_id: c.id, content: '{"temp": 21}' }))];
	const r2 = await oai.chat.completions.create({ messages: next, tools: TOOLS, tool_choice: 'none', max_tokens: 8, seed: 1 });
	assert.equal(typeof r2.choices[0].message.content, 'string');
	assert.equal(r2.choices[0].message.tool_calls, undefined);
	// the tool turns reach the prompt: it is longer than the conversation without them
	const r3 = await oai.chat.completions.create({ messages: msgs, max_tokens: 1 });
	assert.ok(r2.usage.prompt_tokens > r3.usage.prompt_tokens + 5);
});

ctest('chat: response_format json_schema and json_object replies parse and validate', async () => {
	const schema = { type: 'object', properties: { name: { type: 'string', maxLength: 10 }, age: { type: 'integer', minimum: 0, maximum: 120 } }, required: ['name', 'age'], additionalProperties: false };
	for (const seed of [1, 2]) {
		const r = await oai.chat.completions.create({
			messages: msgs, max_tokens: MAX, seed, response_format: { type: 'json_schema', json_schema: { name: 'person', schema, strict: true } },
		});
		if (r.choices[0].finish_reason === 'length') { cut(); continue; }
		const doc = JSON.parse(r.choices[0].message.content);
		assert.ok(ajv.validate(schema, doc), JSON.stringify(ajv.errors));
	}
	const r = await oai.chat.completions.create({ messages: msgs, max_tokens: MAX, seed: 3, response_format: { type: 'json_object' } });
	if (r.choices[0].finish_reason !== 'length') assert.equal(typeof JSON.parse(r.choices[0].message.content), 'object');
});

ctest('chat: completions.parse with zodResponseFormat gives the parsed object', async () => {
	const Pet = z.object({ kind: z.enum(['cat', 'dog']), legs: z.number().int().min(0).max(8) });
	const r = await oai.chat.completions.parse({ model: 'stories260K', messages: msgs, max_tokens: MAX, seed: 5, response_format: zodResponseFormat(Pet, 'pet') }).catch((x) => x);
	if (r instanceof Error && /length limit/.test(r.message)) return cut();
	if (r instanceof Error) throw r;
	const p = r.choices[0].message.parsed;
	assert.ok(['cat', 'dog'].includes(p.kind));
	assert.ok(Number.isInteger(p.legs));
});

// Tools and a format together (the Agents SDK sends both for every agent with an output type):
// each reply is a call that validates or the format's JSON that validates, on chat, Responses and messages,
// the same whether it runs alone or beside others; a grammar of the client's own still cannot join calls.
ctest('tools and a response format together: a call or the format, solo = concurrent', async () => {
	const REPORT = { type: 'object', properties: { sunny: { type: 'boolean' }, city: { type: 'string', maxLength: 10 } }, required: ['sunny', 'city'], additionalProperties: false };
	const chat = (seed) => oai.chat.completions.create({ messages: msgs, tools: TOOLS, parallel_tool_calls: false, max_tokens: MAX, seed, response_format: { type: 'json_schema', json_schema: { name: 'report', schema: REPORT, strict: true } } });
	const solo = [];
	for (const seed of [1, 2, 3, 4, 5, 6]) {
		const ch = (await chat(seed)).choices[0];
		if (ch.finish_reason === 'length') cut();
		if (ch.message.tool_calls?.length) {
			assert.equal(ch.finish_reason, 'tool_calls');
			ch.message.tool_calls.forEach(checkCall);
		} else {
			assert.ok(ajv.validate(REPORT, JSON.parse(ch.message.content)), ch.message.content);
		}
		solo.push(JSON.stringify(ch.message));
	}
	const together = await Promise.all([1, 2, 3, 4, 5, 6].map(chat));
	assert.deepEqual(together.map((r) => JSON.stringify(r.choices[0].message).replace(/"call_[0-9a-f]+"/g, '')), solo.map((m) => m.replace(/"call_[0-9a-f]+"/g, '')));
	const rtools = TOOLS.map((t) => ({ type: 'function', name: t.function.name, description: t.function.description, parameters: t.function.parameters }));
	for (const seed of [1, 2]) {
		const r = await oai.responses.create({ input: 'What is the weather in Paris?', tools: rtools, parallel_tool_calls: false, max_output_tokens: MAX, seed, text: { format: { type: 'json_schema', name: 'report', schema: REPORT, strict: true } } });
		assert.equal(r.status, 'completed');
		const call = r.output.find((o) => o.type === 'function_call');
		if (call) assert.ok(ajv.validate(SCHEMAS[call.name], JSON.parse(call.arguments)), call.arguments);
		else assert.ok(ajv.validate(REPORT, JSON.parse(r.output_text)), r.output_text);
	}
	const atools = TOOLS.map((t) => ({ name: t.function.name, description: t.function.description, input_schema: t.function.parameters }));
	for (const seed of [1, 2]) {
		const m = await postJSON(`${url}/v1/messages`, { model: 'm', max_tokens: MAX, seed, messages: msgs, tools: atools, tool_choice: { type: 'auto', disable_parallel_tool_use: true }, output_format: { type: 'json_schema', schema: REPORT } }, { 'x-api-key': KEY });
		assert.equal(m.status, 200, JSON.stringify(m.body));
		const use = m.body.content.find((b) => b.type === 'tool_use');
		if (use) assert.ok(ajv.validate(SCHEMAS[use.name], use.input), JSON.stringify(use.input));
		else assert.ok(ajv.validate(REPORT, JSON.parse(m.body.content[0].text)), m.body.content[0].text);
	}
	const e = await oai.chat.completions.create({ messages: msgs, max_tokens: 4, tools: TOOLS, grammar: 'root ::= "a"' }).catch((x) => x);
	assert.equal(e.status, 400);
	assert.equal(e.param, 'grammar');
});

test('chat: bad schemas and grammars are 400s naming the parameter, hostile ones quickly', async () => {
	let e = await oai.chat.completions.create({ messages: msgs, max_tokens: 4, response_format: { type: 'json_schema', json_schema: { name: 'x', schema: { type: 'object', patternProperties: { a: {} } } } } }).catch((x) => x);
	assert.equal(e.status, 400);
	assert.equal(e.param, 'response_format.json_schema.schema');
	assert.match(e.message, /patternProperties/);
	e = await oai.chat.completions.create({ messages: msgs, max_tokens: 4, grammar: 'root ::= "a" |\n  ( "b" ' }).catch((x) => x);
	assert.equal(e.status, 400);
	assert.equal(e.param, 'grammar');
	assert.match(e.message, /line \d+, column \d+/);
	// deep nesting, then a schema of about 1 MB
	let deep = { type: 'string' };
	for (let i = 0; i < 1500; i++) deep = { type: 'array', items: deep };
	const wide = { type: 'object', properties: Object.fromEntries(Array.from({ length: 30000 }, (_, i) => [`property_${i}`, { type: 'string', enum: ['a', 'b'] }])) };
	for (const schema of [deep, wide]) {
		const r = await postJSON(`${url}/v1/chat/completions`, { messages: msgs, max_tokens: 4, response_format: { type: 'json_schema', json_schema: { name: 'h', schema } } }, { Authorization: `Bearer ${KEY}` });
		assert.equal(r.status, 400, JSON.stringify(r.body).slice(0, 300));
		assert.equal(r.body.error.param, 'response_format.json_schema.schema');
	}
	e = await oai.chat.completions.create({ messages: msgs, max_tokens: 4, tools: TOOLS, tool_choice: { type: 'function', function: { name: 'nope' } } }).catch((x) => x);
	assert.equal(e.status, 400);
	assert.equal(e.param, 'tool_choice');
});

ctest('anthropic: tool_choice any gives a tool_use block whose input validates, streamed the same', async () => {
	const tools = TOOLS.map((t) => ({ name: t.function.name, description: t.function.description, input_schema: t.function.parameters }));
	const body = { model: 'stories260K', max_tokens: MAX, messages: [{ role: 'user', content: 'Weather in Rome?' }], tools, tool_choice: { type: 'any', disable_parallel_tool_use: true }, metadata: {} };
	const m = await ant.messages.create({ ...body, seed: 2 });
	if (m.stop_reason === 'max_tokens') return cut();
	assert.equal(m.stop_reason, 'tool_use');
	const uses = m.content.filter((b) => b.type === 'tool_use');
	assert.ok(uses.length >= 1);
	for (const u of uses) {
		assert.match(u.id, /^toolu_/);
		assert.ok(ajv.validate(SCHEMAS[u.name], u.input), JSON.stringify(ajv.errors));
	}
	const s = await ant.messages.stream({ ...body, seed: 2 }).finalMessage();
	assert.equal(s.stop_reason, 'tool_use');
	assert.deepEqual(s.content.filter((b) => b.type === 'tool_use').map((b) => [b.name, b.input]), uses.map((b) => [b.name, b.input]));
	// the round trip: tool_use in the assistant turn, tool_result in the user turn
	const r2 = await ant.messages.create({
		model: 'stories260K', max_tokens: 8, tools, tool_choice: { type: 'none' },
		messages: [...body.messages, { role: 'assistant', content: m.content }, { role: 'user', content: uses.map((u) => ({ type: 'tool_result', tool_use_id: u.id, content: '21 C' })) }],
	});
	assert.equal(r2.content[0].type, 'text');
});

ctest('responses: function_call items and their stream events', async () => {
	const tools = TOOLS.map((t) => ({ type: 'function', name: t.function.name, description: t.function.description, parameters: t.function.parameters }));
	const body = { model: 'stories260K', input: 'Weather in Oslo?', tools, tool_choice: 'required', max_output_tokens: MAX, seed: 3, parallel_tool_calls: false };
	const r = await oai.responses.create(body);
	if (r.status === 'incomplete') return cut();
	const calls = r.output.filter((o) => o.type === 'function_call');
	assert.ok(calls.length >= 1);
	for (const c of calls) {
		assert.match(c.call_id, /^call_/);
		assert.equal(c.status, 'completed');
		assert.ok(ajv.validate(SCHEMAS[c.name], JSON.parse(c.arguments)), JSON.stringify(ajv.errors));
	}
	const types = new Set();
	const args = {};
	const stream = await oai.responses.create({ ...body, stream: true });
	let done;
	for await (const ev of stream) {
		types.add(ev.type);
		if (ev.type === 'response.function_call_arguments.delta') args[ev.output_index] = (args[ev.output_index] ?? '') + ev.delta;
		if (ev.type === 'response.function_call_arguments.done') assert.equal(ev.arguments, args[ev.output_index] ?? '');
		if (ev.type === 'response.completed') done = ev.response;
	}
	for (const t of ['response.output_item.added', 'response.function_call_arguments.delta', 'response.function_call_arguments.done', 'response.output_item.done'])
		assert.ok(types.has(t), t);
	assert.deepEqual(done.output.filter((o) => o.type === 'function_call').map((o) => [o.name, o.arguments]), calls.map((o) => [o.name, o.arguments]));
	// the result goes back as a function_call_output item
	const r2 = await oai.responses.create({
		model: 'stories260K', max_output_tokens: 8, tools, tool_choice: 'none',
		input: [{ role: 'user', content: 'Weather in Oslo?' }, ...calls.map((c) => ({ type: 'function_call', call_id: c.call_id, name: c.name, arguments: c.arguments })),
			...calls.map((c) => ({ type: 'function_call_output', call_id: c.call_id, output: '5 C' }))],
	});
	assert.equal(r2.output[0].type, 'message');
	// text.format json_schema
	const r3 = await oai.responses.create({ model: 'stories260K', input: 'x', max_output_tokens: MAX, seed: 1, text: { format: { type: 'json_schema', name: 'w', schema: WEATHER, strict: true } } });
	if (r3.status !== 'incomplete') assert.ok(ajv.validate(WEATHER, JSON.parse(r3.output_text)));
});

ctest('ollama: format json and a schema constrain the reply', async () => {
	for (const format of ['json', WEATHER]) {
		const r = await postJSON(`${url}/api/chat`, { model: 'stories260K', messages: msgs, stream: false, format, options: { num_predict: MAX, seed: 1 } });
		assert.equal(r.status, 200);
		// any JSON object has unbounded strings, which a story model fills: only the schema must finish
		if (r.body.done_reason === 'length' && format === 'json') continue;
		if (r.body.done_reason === 'length') { cut(); continue; }
		const doc = JSON.parse(r.body.message.content);
		if (format !== 'json') assert.ok(ajv.validate(WEATHER, doc), JSON.stringify(ajv.errors));
	}
	const r = await postJSON(`${url}/api/chat`, { model: 'stories260K', messages: msgs, stream: false, format: { type: 'object', patternProperties: {} } });
	assert.equal(r.status, 400);
	assert.match(r.body.error, /patternProperties/);
});
