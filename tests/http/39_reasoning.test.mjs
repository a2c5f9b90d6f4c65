// Reasoning models: the thinking apart from the answer in every API, streamed = whole, with the
// official clients; budgets that end the thinking at exactly the budget (the lane forces the close
// marker), the same tokens solo, concurrent, cached, drafted and in pieces; signatures that let a
// thinking block come back; thinking off through the template's switch; grammars after the thinking.
// The model is a generated one with Qwen2's vocabulary under real templates: DeepSeek-R1's (the
// prompt opens the section), a Qwen3-style one (a switch), Command R7B's.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import OpenAI from 'openai';
import Anthropic from '@anthropic-ai/sdk';
import { Ollama } from 'ollama';
import { startServer, agentModel, postJSON, KEY, SHARED, TMP } from './lib.mjs';

const R1 = path.join(SHARED, 'chat-templates/llama-cpp-deepseek-r1.jinja');
const R7B = path.join(SHARED, 'chat-templates/CohereForAI-c4ai-command-r7b-12-2024-tool_use.jinja');
// Qwen3's shape: the model opens the section itself; enable_thinking=false closes an empty one
const QWEN3 = `{%- for m in messages %}<|im_start|>{{ m.role }}
{% if m.role == 'assistant' and '</think>' in m.content %}{{ m.content.split('</think>')[-1] }}{% else %}{{ m.content }}{% endif %}<|im_end|>
{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant
{% if enable_thinking is defined and enable_thinking is false %}<think>

</think>

{% endif %}{% endif %}`;

const MARKERS = /<think>|<\/think>|START_THINKING|END_THINKING/;
let r1, pieces, qwen, r7b, oai, ant;
before(async () => {
	const model = agentModel();
	const qt = path.join(TMP, 'qwen3-style.jinja');
	fs.writeFileSync(qt, QWEN3);
	const common = ['-m', model, '--api-key', KEY, '--ctx', '16384'];
	[r1, pieces, qwen, r7b] = await Promise.all([
		startServer([...common, '--chat-template', R1, '--lanes', '4']),
		startServer([...common, '--chat-template', R1, '--lanes', '1', '--piece', '3']),
		startServer([...common, '--chat-template', qt, '--lanes', '1']),
		startServer([...common, '--chat-template', R7B, '--lanes', '1']),
	]);
	oai = new OpenAI({ baseURL: `${r1.url}/v1`, apiKey: KEY, maxRetries: 0 });
	ant = new Anthropic({ baseURL: r1.url, apiKey: KEY, maxRetries: 0 });
});
after(() => [r1, pieces, qwen, r7b].forEach((s) => s && s.proc.kill('SIGKILL')));

const user = [{ role: 'user', content: 'Why is the sky blue?' }];

// An OpenAI chat streamed through the official client, gathered as the reply would be.
async function streamed(client, body) {
	let reasoning = '', content = '', finish = null, sha = null, usage = null;
	for await (const ch of await client.chat.completions.create({ ...body, stream: true, stream_options: { include_usage: true } })) {
		if (ch.usage) usage = ch.usage;
		for (const c of ch.choices) {
			reasoning += c.delta.reasoning_content || '';
			content += c.delta.content || '';
			if (c.finish_reason) finish = c.finish_reason, sha = c.token_sha;
		}
	}
	return { reasoning, content, finish, sha, usage };
}

test('OpenAI chat: the thinking in reasoning_content, ended by the lane exactly at the budget; streamed = whole', async () => {
	const body = { model: 'm', messages: user, max_tokens: 20, ignore_eos: true, seed: 7, thinking_budget: 6, logprobs: true };
	const r = await oai.chat.completions.create(body);
	const c = r.choices[0], toks = c.logprobs.content.map((x) => x.token);
	assert.ok(!toks.slice(0, 6).join('').includes('</think>'), toks.join('|'));
	assert.ok(toks.slice(6).join('').startsWith('</think>\n\n'), `the close marker is the 7th token on: ${toks.join('|')}`);
	assert.equal(typeof c.message.reasoning_content, 'string');
	assert.ok(!MARKERS.test(c.message.reasoning_content) && !MARKERS.test(c.message.content), JSON.stringify(c.message));
	assert.equal(c.finish_reason, 'length');
	const th = r.usage.completion_tokens_details.reasoning_tokens;
	assert.ok(th >= 6 && th < r.usage.completion_tokens, JSON.stringify(r.usage));
	const s = await streamed(oai, body);
	assert.deepEqual([s.reasoning, s.content, s.finish, s.sha], [c.message.reasoning_content, c.message.content, c.finish_reason, c.token_sha]);
	assert.equal(s.usage.completion_tokens_details.reasoning_tokens, th);
	// a budget of 0 closes the section at once; effort none closes it in the prompt
	const zero = await oai.chat.completions.create({ ...body, thinking_budget: 0 });
	assert.ok(zero.choices[0].logprobs.content.map((x) => x.token).join('').startsWith('</think>'));
	assert.equal(zero.choices[0].message.reasoning_content, '');
	const none = await oai.chat.completions.create({ ...body, thinking_budget: undefined, reasoning_effort: 'none' });
	assert.equal(none.choices[0].message.reasoning_content, undefined);
	assert.equal(none.usage.completion_tokens_details.reasoning_tokens, 0);
	assert.ok(none.usage.prompt_tokens > r.usage.prompt_tokens, 'the empty section is in the prompt');
});

test('thinking cut by max_tokens is thinking, with finish_reason length, streamed and whole', async () => {
	const body = { model: 'm', messages: user, max_tokens: 5, ignore_eos: true, seed: 3, thinking_budget: 50 };
	const r = await oai.chat.completions.create(body);
	const m = r.choices[0].message;
	assert.equal(r.choices[0].finish_reason, 'length');
	assert.equal(m.content, '');
	assert.ok(m.reasoning_content.length > 0 && !MARKERS.test(m.reasoning_content));
	const s = await streamed(oai, body);
	assert.deepEqual([s.reasoning, s.content, s.finish], [m.reasoning_content, '', 'length']);
});

test('a budgeted request gives the same tokens solo, concurrent, cached, undrafted and in pieces', async () => {
	const body = { model: 'm', messages: user, max_tokens: 18, ignore_eos: true, seed: 11, temperature: 0.9, thinking_budget: 5 };
	const sha = async (url, b = body) => {
		const r = await postJSON(`${url}/v1/chat/completions`, b, { Authorization: `Bearer ${KEY}` });
		assert.equal(r.status, 200, JSON.stringify(r.body));
		return r.body.choices[0].token_sha;
	};
	const solo = await sha(r1.url);
	const together = await Promise.all([0, 1, 2, 3].map(() => sha(r1.url)));
	assert.deepEqual(together, [solo, solo, solo, solo]);
	assert.equal(await sha(r1.url), solo, 'cached');
	assert.equal(await sha(r1.url, { ...body, draft: false }), solo, 'undrafted');
	assert.equal(await sha(pieces.url), solo, 'prompt in pieces of 3');
	assert.notEqual(await sha(r1.url, { ...body, thinking_budget: 4 }), solo, 'the budget is part of the request');
});

test('Anthropic: a thinking block with its signature, streamed = whole; sent back it is accepted, edited it is refused', async () => {
	const body = { model: 'm', max_tokens: 1030, messages: user, thinking: { type: 'enabled', budget_tokens: 1024 }, ignore_eos: true, seed: 5 };
	const m = await ant.messages.create(body);
	assert.equal(m.content[0].type, 'thinking');
	assert.ok(m.content[0].thinking.length > 0 && m.content[0].signature.length > 0);
	assert.equal(m.content[1].type, 'text');
	assert.ok(!MARKERS.test(m.content[0].thinking) && !MARKERS.test(m.content[1].text));
	const s = await ant.messages.stream(body).finalMessage();
	assert.deepEqual(s.content, m.content);
	const turn = (content) => ({ model: 'm', max_tokens: 4, messages: [...user, { role: 'assistant', content }, { role: 'user', content: 'And at night?' }] });
	const back = await ant.messages.create(turn(m.content));
	assert.equal(back.type, 'message');
	const edited = [{ ...m.content[0], thinking: m.content[0].thinking + '!' }, m.content[1]];
	await assert.rejects(ant.messages.create(turn(edited)), (e) => e.status === 400 && /signature/.test(e.message));
	await assert.rejects(ant.messages.create({ ...body, max_tokens: 1500, thinking: { type: 'enabled', budget_tokens: 2048 } }),
		(e) => e.status === 400 && /budget_tokens/.test(e.message));
	const off = await ant.messages.create({ ...body, max_tokens: 6, thinking: { type: 'disabled' } });
	assert.deepEqual(off.content.map((b) => b.type), ['text']);
});

test('Responses: a reasoning item and reasoning_text events; streamed = whole; reasoning_tokens', async () => {
	const body = { model: 'm', input: 'Why is the sky blue?', max_output_tokens: 12, ignore_eos: true, seed: 9, thinking_budget: 4 };
	const r = await oai.responses.create(body);
	assert.deepEqual(r.output.map((o) => o.type), ['reasoning', 'message']);
	const text = r.output[0].content[0].text;
	assert.ok(text.length > 0 && !MARKERS.test(text) && !MARKERS.test(r.output_text));
	assert.ok(r.usage.output_tokens_details.reasoning_tokens >= 4);
	const st = oai.responses.stream(body);
	let deltas = '';
	st.on('response.reasoning_text.delta', (e) => (deltas += e.delta));
	const f = await st.finalResponse();
	assert.equal(deltas, text);
	assert.equal(f.output[0].content[0].text, text);
	assert.equal(f.output_text, r.output_text);
});

test('Ollama: think and message.thinking through the ollama client, streamed = whole; think false closes the section', async () => {
	const ol = new Ollama({ host: r1.url, headers: { Authorization: `Bearer ${KEY}` } });
	const req = { model: 'agent-F16', messages: user, think: true, options: { num_predict: 10, seed: 4 } };
	const r = await ol.chat(req);
	assert.equal(typeof r.message.thinking, 'string');
	assert.ok(!MARKERS.test(r.message.thinking) && !MARKERS.test(r.message.content));
	let thinking = '', content = '';
	for await (const p of await ol.chat({ ...req, stream: true })) thinking += p.message.thinking || '', content += p.message.content || '';
	assert.deepEqual([thinking, content], [r.message.thinking, r.message.content]);
	const off = await ol.chat({ ...req, think: false });
	assert.equal(off.message.thinking, undefined);
	const show = await ol.show({ model: 'agent-F16' });
	assert.ok(show.capabilities.includes('thinking'));
});

test('a template with a switch: thinking off sets enable_thinking=false; a grammar starts after the thinking', async () => {
	const q = new OpenAI({ baseURL: `${qwen.url}/v1`, apiKey: KEY, maxRetries: 0 });
	const base = { model: 'm', messages: user, max_tokens: 6, ignore_eos: true, seed: 2 };
	const on = await q.chat.completions.create(base);
	const off = await q.chat.completions.create({ ...base, reasoning_effort: 'none' });
	const kw = await q.chat.completions.create({ ...base, chat_template_kwargs: { enable_thinking: false } });
	assert.ok(off.usage.prompt_tokens > on.usage.prompt_tokens, 'the template closed an empty section');
	assert.equal(off.usage.prompt_tokens, kw.usage.prompt_tokens);
	assert.equal(off.choices[0].token_sha, kw.choices[0].token_sha);
	const schema = { type: 'object', properties: { blue: { type: 'boolean' } }, required: ['blue'], additionalProperties: false };
	for (const [srv, client] of [[qwen, q], [r7b, new OpenAI({ baseURL: `${r7b.url}/v1`, apiKey: KEY, maxRetries: 0 })]]) {
		const body = { model: 'm', messages: user, max_tokens: 60, seed: 1, thinking_budget: 5,
			response_format: { type: 'json_schema', json_schema: { name: 'a', schema, strict: true } } };
		const r = await client.chat.completions.create(body);
		const m = r.choices[0].message;
		assert.ok(m.reasoning_content.length > 0 && !MARKERS.test(m.reasoning_content), `${srv.url}: ${JSON.stringify(m)}`);
		assert.equal(typeof JSON.parse(m.content).blue, 'boolean', m.content);
		const s = await streamed(client, body);
		assert.deepEqual([s.reasoning, s.content], [m.reasoning_content, m.content]);
	}
});
