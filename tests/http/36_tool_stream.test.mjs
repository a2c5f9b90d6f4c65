// Tool calls as they stream and as max_tokens cuts them, on stories260K (no tool template: the
// fallback's Hermes <tool_call> calls): the arguments stream in many deltas that concatenate to
// the non-streamed arguments byte for byte (chat, messages, responses; concurrent as solo), and a
// call cut short is a call with its arguments so far — no markup in the content, every block
// or item that opened is closed, the finish says the cut.
import { test, before } from 'node:test';
import assert from 'node:assert/strict';
import { mainServer, postJSON, postSSE, samplesUnderGrammars, grammarTest } from './lib.mjs';

let url, constrains;
before(async () => {
	({ url } = await mainServer());
	constrains = await samplesUnderGrammars(url);
});
// the arguments follow the tool's schema only where the lane host samples under grammars
const ctest = grammarTest(test, () => constrains);

// long-ish arguments whose length the schema bounds, so a whole call fits max_tokens
const NOTE = {
	type: 'object',
	properties: { title: { type: 'string', minLength: 10, maxLength: 20 }, body: { type: 'string', minLength: 80, maxLength: 120 } },
	required: ['title', 'body'],
	additionalProperties: false,
};
const MAX = 400;
const SEED = 5;
const say = 'Write a note about the park.';
const MARKUP = ['<tool_call>', '</tool_call>', '{"name"', '"arguments"'];
const noMarkup = (text, where) => {
	for (const m of MARKUP) assert.ok(!(text ?? '').includes(m), `${where} holds ${m}: ${JSON.stringify(text)}`);
};

const chatBody = (extra = {}) => ({
	messages: [{ role: 'user', content: say }], max_tokens: MAX, seed: SEED, parallel_tool_calls: false,
	tools: [{ type: 'function', function: { name: 'note', description: 'Saves a note', parameters: NOTE } }],
	tool_choice: { type: 'function', function: { name: 'note' } }, ...extra,
});
const antBody = (extra = {}) => ({
	model: 'stories260K', messages: [{ role: 'user', content: say }], max_tokens: MAX, seed: SEED,
	tools: [{ name: 'note', description: 'Saves a note', input_schema: NOTE }],
	tool_choice: { type: 'tool', name: 'note', disable_parallel_tool_use: true }, ...extra,
});
const respBody = (extra = {}) => ({
	model: 'stories260K', input: say, max_output_tokens: MAX, seed: SEED, parallel_tool_calls: false,
	tools: [{ type: 'function', name: 'note', description: 'Saves a note', parameters: NOTE }],
	tool_choice: { type: 'function', name: 'note' }, ...extra,
});

// A chat stream's content, calls (with their argument pieces) and finish.
async function chatStream(body) {
	const s = await postSSE(`${url}/v1/chat/completions`, { ...body, stream: true });
	assert.equal(s.status, 200, JSON.stringify(s.body));
	let content = '', finish = null;
	const calls = [];
	for (const e of s.events) {
		const ch = e.data?.choices?.[0];
		if (!ch) continue;
		if (ch.finish_reason) finish = ch.finish_reason;
		content += ch.delta?.content ?? '';
		for (const tc of ch.delta?.tool_calls ?? []) {
			if (!calls[tc.index]) {
				// the first delta of a call carries its id, type and name
				assert.match(tc.id, /^call_/);
				assert.equal(tc.type, 'function');
				assert.equal(tc.function.name, 'note');
				calls[tc.index] = { id: tc.id, name: tc.function.name, pieces: [] };
			}
			if (tc.function?.arguments) calls[tc.index].pieces.push(tc.function.arguments);
		}
	}
	assert.equal(s.events.at(-1).data, '[DONE]');
	return { content, finish, calls: calls.map((c) => ({ ...c, arguments: c.pieces.join('') })) };
}

// An Anthropic stream: every content_block_start has its content_block_stop (after its deltas),
// and the tool_use blocks' partial_json pieces.
async function antStream(body) {
	const s = await postSSE(`${url}/v1/messages`, { ...body, stream: true });
	assert.equal(s.status, 200, JSON.stringify(s.body));
	const open = new Map(), blocks = [];
	let stop = null, text = '';
	for (const { event, data } of s.events) {
		assert.notEqual(event, 'error', JSON.stringify(data));
		if (event === 'content_block_start') {
			assert.ok(!open.has(data.index), `block ${data.index} started twice`);
			open.set(data.index, true);
			blocks[data.index] = { ...data.content_block, pieces: [] };
		} else if (event === 'content_block_delta') {
			assert.ok(open.has(data.index), `a delta for block ${data.index}, which is not open`);
			if (data.delta.type === 'input_json_delta') blocks[data.index].pieces.push(data.delta.partial_json);
			if (data.delta.type === 'text_delta') text += data.delta.text;
		} else if (event === 'content_block_stop') {
			assert.ok(open.delete(data.index), `block ${data.index} stopped, not open`);
		} else if (event === 'message_delta') {
			assert.equal(open.size, 0, `blocks left open at message_delta: ${[...open.keys()]}`);
			stop = data.delta.stop_reason;
		}
	}
	assert.equal(open.size, 0);
	assert.equal(s.events.at(-1).event, 'message_stop');
	return { stop, text, uses: blocks.filter((b) => b.type === 'tool_use').map((b) => ({ ...b, json: b.pieces.join('') })) };
}

// A Responses stream: every item added is done, argument deltas per item, the terminal response.
async function respStream(body) {
	const s = await postSSE(`${url}/v1/responses`, { ...body, stream: true });
	assert.equal(s.status, 200, JSON.stringify(s.body));
	const added = new Map(), done = new Map(), pieces = {}, argsDone = {};
	for (const { data } of s.events) {
		if (data.type === 'response.output_item.added') added.set(data.output_index, data.item);
		if (data.type === 'response.output_item.done') done.set(data.output_index, data.item);
		if (data.type === 'response.function_call_arguments.delta') (pieces[data.output_index] ??= []).push(data.delta);
		if (data.type === 'response.function_call_arguments.done') argsDone[data.output_index] = data.arguments;
	}
	assert.deepEqual([...done.keys()].sort(), [...added.keys()].sort(), 'every item added is done');
	const last = s.events.at(-1).data;
	const calls = [...done.entries()].filter(([, it]) => it.type === 'function_call').map(([k, it]) => {
		const streamed = (pieces[k] ?? []).join('');
		assert.equal(argsDone[k], streamed, 'function_call_arguments.done repeats the deltas');
		assert.equal(it.arguments, streamed, 'the item done holds the arguments streamed');
		return { ...it, pieces: pieces[k] ?? [] };
	});
	return { type: last.type, response: last.response, calls };
}

ctest('chat: the arguments stream in deltas that concatenate to the non-streamed arguments, concurrent as solo', async () => {
	const whole = await postJSON(`${url}/v1/chat/completions`, chatBody());
	assert.equal(whole.status, 200, JSON.stringify(whole.body));
	const ch = whole.body.choices[0];
	assert.equal(ch.finish_reason, 'tool_calls', 'the bounded call fits max_tokens');
	assert.equal(ch.message.content, null);
	const args = ch.message.tool_calls[0].function.arguments;
	const parsed = JSON.parse(args);
	assert.ok(parsed.body.length >= 80);
	const s = await chatStream(chatBody());
	assert.equal(s.finish, 'tool_calls');
	assert.equal(s.content, '');
	assert.equal(s.calls.length, 1);
	assert.ok(s.calls[0].pieces.length > 10, `the arguments came in ${s.calls[0].pieces.length} deltas`);
	assert.equal(s.calls[0].arguments, args);
	// side by side, the stream and the whole reply give the same arguments as alone
	const [w2, s2] = await Promise.all([postJSON(`${url}/v1/chat/completions`, chatBody()), chatStream(chatBody())]);
	assert.equal(w2.body.choices[0].message.tool_calls[0].function.arguments, args);
	assert.equal(s2.calls[0].arguments, args);
});

ctest('messages: input_json_delta pieces concatenate to the tool_use input, every block stopped', async () => {
	const m = await postJSON(`${url}/v1/messages`, antBody());
	assert.equal(m.status, 200, JSON.stringify(m.body));
	assert.equal(m.body.stop_reason, 'tool_use');
	const use = m.body.content.find((b) => b.type === 'tool_use');
	const s = await antStream(antBody());
	assert.equal(s.stop, 'tool_use');
	assert.equal(s.uses.length, 1);
	assert.deepEqual(s.uses[0].input, {});
	assert.equal(s.uses[0].name, 'note');
	assert.ok(s.uses[0].pieces.length > 10, `the input came in ${s.uses[0].pieces.length} deltas`);
	assert.deepEqual(JSON.parse(s.uses[0].json), use.input);
});

ctest('responses: function_call_arguments deltas concatenate to the item arguments', async () => {
	const r = await postJSON(`${url}/v1/responses`, respBody());
	assert.equal(r.status, 200, JSON.stringify(r.body));
	assert.equal(r.body.status, 'completed');
	const call = r.body.output.find((o) => o.type === 'function_call');
	assert.equal(call.status, 'completed');
	const s = await respStream(respBody());
	assert.equal(s.type, 'response.completed');
	assert.equal(s.calls.length, 1);
	assert.ok(s.calls[0].pieces.length > 10, `the arguments came in ${s.calls[0].pieces.length} deltas`);
	assert.equal(s.calls[0].arguments, call.arguments);
	assert.equal(s.response.output.find((o) => o.type === 'function_call').arguments, call.arguments);
});

// max_tokens for a cut inside the arguments: past the call's opening, before its close
async function cutInside() {
	const r = await postJSON(`${url}/v1/chat/completions`, chatBody());
	const n = r.body.usage.completion_tokens;
	return { n, cut: Math.floor(n * 0.6), args: r.body.choices[0].message.tool_calls[0].function.arguments };
}

ctest('chat: a call cut by max_tokens is a call with its arguments so far, finish length, streamed alike', async () => {
	const { cut, args } = await cutInside();
	const r = await postJSON(`${url}/v1/chat/completions`, chatBody({ max_tokens: cut }));
	const ch = r.body.choices[0];
	assert.equal(ch.finish_reason, 'length');
	noMarkup(ch.message.content, 'content');
	assert.equal(ch.message.content, null);
	assert.equal(ch.message.tool_calls.length, 1);
	const part = ch.message.tool_calls[0].function.arguments;
	assert.equal(ch.message.tool_calls[0].function.name, 'note');
	assert.ok(part.length > 1 && part.length < args.length && args.startsWith(part), `${part} begins ${args}`);
	const s = await chatStream(chatBody({ max_tokens: cut }));
	assert.equal(s.finish, 'length');
	assert.equal(s.content, '');
	assert.equal(s.calls[0].arguments, part);
	// cut in the call's opening: no call to show, and no markup either
	for (const max_tokens of [1, 3, 6]) {
		const o = await postJSON(`${url}/v1/chat/completions`, chatBody({ max_tokens }));
		assert.equal(o.body.choices[0].finish_reason, 'length');
		noMarkup(o.body.choices[0].message.content, `content at max_tokens ${max_tokens}`);
		const so = await chatStream(chatBody({ max_tokens }));
		noMarkup(so.content, `streamed content at max_tokens ${max_tokens}`);
		assert.equal(so.finish, 'length');
	}
});

ctest('messages: a cut tool_use holds the input read so far, stop_reason max_tokens, its block stopped', async () => {
	const whole = await postJSON(`${url}/v1/messages`, antBody());
	const full = whole.body.content.find((b) => b.type === 'tool_use').input;
	const cut = Math.floor(whole.body.usage.output_tokens * 0.6);
	const m = await postJSON(`${url}/v1/messages`, antBody({ max_tokens: cut }));
	assert.equal(m.body.stop_reason, 'max_tokens');
	for (const b of m.body.content) if (b.type === 'text') noMarkup(b.text, 'a text block');
	const use = m.body.content.find((b) => b.type === 'tool_use');
	assert.ok(use, JSON.stringify(m.body.content));
	assert.match(use.id, /^toolu_/);
	// the input: the members read whole, a string being written as far as it went
	assert.equal(typeof use.input, 'object');
	for (const [k, v] of Object.entries(use.input)) assert.ok(full[k].startsWith(v), `${k}: ${v} begins ${full[k]}`);
	const s = await antStream(antBody({ max_tokens: cut }));
	assert.equal(s.stop, 'max_tokens');
	noMarkup(s.text, 'streamed text');
	assert.equal(s.uses.length, 1);
	assert.ok(JSON.stringify(full).length > 0 && s.uses[0].json.length > 1);
	for (const max_tokens of [1, 3, 6]) await antStream(antBody({ max_tokens }));
});

ctest('responses: a cut call ends incomplete, its item with the arguments so far, every item done', async () => {
	const whole = await postJSON(`${url}/v1/responses`, respBody());
	const args = whole.body.output.find((o) => o.type === 'function_call').arguments;
	const cut = Math.floor(whole.body.usage.output_tokens * 0.6);
	const r = await postJSON(`${url}/v1/responses`, respBody({ max_output_tokens: cut }));
	assert.equal(r.body.status, 'incomplete');
	assert.equal(r.body.incomplete_details.reason, 'max_output_tokens');
	for (const o of r.body.output) if (o.type === 'message') noMarkup(o.content.map((c) => c.text).join(''), 'a message');
	const call = r.body.output.find((o) => o.type === 'function_call');
	assert.ok(call, JSON.stringify(r.body.output));
	assert.equal(call.status, 'incomplete');
	assert.ok(call.arguments.length > 1 && call.arguments.length < args.length && args.startsWith(call.arguments));
	const s = await respStream(respBody({ max_output_tokens: cut }));
	assert.equal(s.type, 'response.incomplete');
	assert.equal(s.calls.length, 1);
	assert.equal(s.calls[0].arguments, call.arguments);
	assert.equal(s.calls[0].status, 'incomplete');
	for (const max_output_tokens of [1, 3, 6]) {
		const so = await respStream(respBody({ max_output_tokens }));
		assert.equal(so.type, 'response.incomplete');
		for (const o of so.response.output) if (o.type === 'message') noMarkup(o.content.map((c) => c.text).join(''), 'a message');
	}
});
