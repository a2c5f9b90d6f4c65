// gpt-oss's harmony format end to end: a gpt-oss-shaped model under gpt-oss's own template
// (tests/data/templates), both families picked from it; the analysis channel as the thinking and
// the final channel as the answer, no channel markers in either; a required tool call in the
// commentary channel read back as a call (OpenAI tool_calls, Anthropic tool_use); streamed = whole;
// tool turns sent back render, an Anthropic thinking block as the analysis before the call.
// No vocabulary in ../shared has the harmony special tokens, so the model is `lanes gen --shape
// gpt-oss-test` over Qwen2's vocabulary: the markers are text, which is what the scans read.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { spawnSync } from 'node:child_process';
import OpenAI from 'openai';
import Anthropic from '@anthropic-ai/sdk';
import { startServer, BIN, KEY, SHARED, TMP } from './lib.mjs';

const TEMPLATE = path.resolve('tests/data/templates/openai-gpt-oss-120b.jinja');
const MARKERS = /<\|(start|channel|message|end|constrain|call|return)\|>/;
const user = [{ role: 'user', content: 'What is the weather in Paris?' }];
const tools = [{ type: 'function', function: { name: 'get_weather', description: 'Weather in a city',
	parameters: { type: 'object', properties: { city: { type: 'string', maxLength: 4 } }, required: ['city'], additionalProperties: false } } }];

let srv, oai;
before(async () => {
	const model = path.join(TMP, 'gpt-oss-test.gguf');
	if (!fs.existsSync(model)) {
		const r = spawnSync(BIN, ['gen', '--shape', 'gpt-oss-test', '--type', 'Q8_0', '--vocab', path.join(SHARED, 'vocab/ggml-vocab-qwen2.gguf'), '-o', model], { stdio: 'inherit' });
		if (r.status !== 0) throw new Error('lanes gen failed');
	}
	srv = await startServer(['-m', model, '--api-key', KEY, '--chat-template', TEMPLATE, '--lanes', '2', '--ctx', '4096']);
	oai = new OpenAI({ baseURL: `${srv.url}/v1`, apiKey: KEY, maxRetries: 0 });
});
after(() => srv && srv.proc.kill('SIGKILL'));

// An OpenAI chat streamed through the official client, gathered as the reply would be.
async function streamed(body) {
	let reasoning = '', content = '', finish = null;
	const calls = [];
	for await (const ch of await oai.chat.completions.create({ ...body, stream: true })) {
		for (const c of ch.choices) {
			reasoning += c.delta.reasoning_content || '';
			content += c.delta.content || '';
			for (const t of c.delta.tool_calls || []) {
				calls[t.index] ??= { name: '', arguments: '' };
				calls[t.index].name += t.function?.name || '';
				calls[t.index].arguments += t.function?.arguments || '';
			}
			if (c.finish_reason) finish = c.finish_reason;
		}
	}
	return { reasoning, content, calls, finish };
}

test('the template picks the harmony families', () => {
	assert.match(srv.log(), /reasoning: harmony/);
});

test('the analysis channel is reasoning_content, what follows it the content; a spent budget ends the analysis', async () => {
	// a grammar opens the analysis in the prompt (a random model never writes its header)
	const schema = { type: 'object', properties: { blue: { type: 'boolean' } }, required: ['blue'], additionalProperties: false };
	const body = { model: 'm', messages: user, max_tokens: 60, seed: 7, thinking_budget: 5, logprobs: true,
		response_format: { type: 'json_schema', json_schema: { name: 'a', schema, strict: true } } };
	const r = await oai.chat.completions.create(body);
	const c = r.choices[0], toks = c.logprobs.content.map((x) => x.token);
	assert.ok(toks.slice(5).join('').startsWith('<|end|>'), toks.join('|'));
	assert.equal(typeof JSON.parse(c.message.content).blue, 'boolean', c.message.content);
	assert.ok(c.message.reasoning_content.length > 0, JSON.stringify(c.message));
	assert.ok(!MARKERS.test(c.message.reasoning_content) && !MARKERS.test(c.message.content || ''), JSON.stringify(c.message));
	const s = await streamed(body);
	assert.deepEqual([s.reasoning, s.content, s.finish], [c.message.reasoning_content, c.message.content, c.finish_reason]);
});

test('tool_choice required: a commentary message to functions.get_weather is a tool call, streamed = whole', async () => {
	const body = { model: 'm', messages: user, tools, tool_choice: 'required', max_tokens: 400, seed: 3, thinking_budget: 4 };
	const r = await oai.chat.completions.create(body);
	const c = r.choices[0];
	assert.equal(c.finish_reason, 'tool_calls', JSON.stringify(c));
	assert.equal(c.message.tool_calls.length, 1);
	const fn = c.message.tool_calls[0].function;
	assert.ok(!c.message.content, JSON.stringify(c.message));
	assert.equal(fn.name, 'get_weather');
	assert.equal(typeof JSON.parse(fn.arguments).city, 'string');
	assert.ok(!MARKERS.test(c.message.reasoning_content) && !MARKERS.test(c.message.content || ''), JSON.stringify(c.message));
	const s = await streamed(body);
	assert.deepEqual(s.calls, [{ name: fn.name, arguments: fn.arguments }]);
	assert.equal(s.reasoning, c.message.reasoning_content);
	assert.equal(s.finish, 'tool_calls');
	// the call and its result sent back render through the template
	const back = await oai.chat.completions.create({ model: 'm', tools, max_tokens: 3, messages: [...user,
		{ role: 'assistant', content: '', tool_calls: c.message.tool_calls },
		{ role: 'tool', tool_call_id: c.message.tool_calls[0].id, content: 'sunny' }] });
	assert.equal(back.object, 'chat.completion');
});

test('Anthropic: a thinking block then a tool_use block, streamed = whole; both sent back render as the analysis and the call', async () => {
	const ant = new Anthropic({ baseURL: srv.url, apiKey: KEY, maxRetries: 0 });
	// the model's window is 256 tokens: a budget below budget_tokens' least (1024) through the extension
	const body = { model: 'm', max_tokens: 150, messages: user, seed: 5, thinking_budget: 2,
		tools: [{ name: 'get_weather', description: 'Weather in a city', input_schema: tools[0].function.parameters }], tool_choice: { type: 'any' } };
	const m = await ant.messages.create(body);
	assert.deepEqual(m.content.map((b) => b.type), ['thinking', 'tool_use'], JSON.stringify(m.content));
	assert.equal(m.stop_reason, 'tool_use');
	assert.equal(m.content[1].name, 'get_weather');
	assert.equal(typeof m.content[1].input.city, 'string');
	assert.ok(!MARKERS.test(m.content[0].thinking), m.content[0].thinking);
	const s = await ant.messages.stream(body).finalMessage();
	const noId = (c) => c.map(({ id, ...b }) => b);
	assert.deepEqual(noId(s.content), noId(m.content));
	const turn = (content) => ({ model: 'm', max_tokens: 1, messages: [...user, { role: 'assistant', content },
		{ role: 'user', content: [{ type: 'tool_result', tool_use_id: m.content[1].id, content: 'sunny' }] }] });
	const back = await ant.messages.create(turn(m.content)), bare = await ant.messages.create(turn([m.content[1]]));
	// the whole prompt: input_tokens leaves out what the prefix cache gave
	const prompt = (u) => u.input_tokens + (u.cache_read_input_tokens || 0);
	assert.ok(prompt(back.usage) > prompt(bare.usage) + 4, 'the thinking renders as the analysis before the call');
});

test('the template reads chat_template_kwargs (model_identity, builtin_tools); effort none closes the analysis', async () => {
	const tokens = async (extra) => (await oai.chat.completions.create({ model: 'm', messages: user, max_tokens: 1, ...extra })).usage.prompt_tokens;
	const plain = await tokens({});
	assert.ok(await tokens({ chat_template_kwargs: { builtin_tools: ['python'] } }) > plain + 50);
	assert.notEqual(await tokens({ chat_template_kwargs: { model_identity: 'You are Lanes, a test model of some length.' } }), plain);
	// effort none: the prompt ends with an empty analysis message
	assert.ok(await tokens({ reasoning_effort: 'none' }) > plain);
});
