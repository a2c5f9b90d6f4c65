// The compatibility policy (docs/api.md, "What lanes accepts and does not honour"): the first
// requests Claude Code and Codex CLI send run, and x-lanes-ignored (and the access log) names
// what lanes did not honour; --strict-params refuses those by name; a field no reference
// documents stays a 400. Anthropic messages as agents send them — system turns inside messages,
// thinking history, images a model cannot see, output_format — and --max-tokens for requests
// that set no limit. Ignored fields change no token.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import Ajv from 'ajv';
import { startServer, postJSON, readSSE, STORIES, KEY, TMP } from './lib.mjs';

let srv, strict, capped;
before(async () => {
	// a template with no system turn inside a conversation: it raises there, as many do
	const tmpl = path.join(TMP, 'no-system-turns.jinja');
	fs.writeFileSync(tmpl, "{% for m in messages %}{% if m.role == 'system' and not loop.first %}" +
		"{{ raise_exception('System messages are only allowed first') }}{% endif %}<|{{ m.role }}|>{{ m.content }}\n" +
		'{% endfor %}{% if add_generation_prompt %}<|assistant|>{% endif %}');
	[srv, strict, capped] = await Promise.all([
		startServer(['-m', STORIES, '--api-key', KEY]),
		startServer(['-m', STORIES, '--api-key', KEY, '--strict-params']),
		startServer(['-m', STORIES, '--api-key', KEY, '--max-tokens', '7', '--chat-template', tmpl]),
	]);
});
after(() => [srv, strict, capped].forEach((s) => s && s.proc.kill('SIGKILL')));

const names = (r) => (r.headers.get('x-lanes-ignored') || '').split(',').filter(Boolean).sort();

async function post(url, p, body) {
	const r = await fetch(url + p, {
		method: 'POST',
		headers: { 'Content-Type': 'application/json', 'x-api-key': KEY, Authorization: `Bearer ${KEY}` },
		body: JSON.stringify(body),
	});
	if (r.headers.get('content-type')?.startsWith('text/event-stream')) return { status: r.status, headers: r.headers, events: await readSSE(r) };
	return { status: r.status, headers: r.headers, body: await r.json() };
}

// Claude Code's first /v1/messages call, as it sends it (tools shortened).
const claudeCode = (extra = {}) => ({
	model: 'claude-sonnet-4-5-20250929',
	max_tokens: 2048,
	stream: true,
	system: [
		{ type: 'text', text: "You are Claude Code, Anthropic's official CLI for Claude.", cache_control: { type: 'ephemeral' } },
		{ type: 'text', text: 'You are an interactive CLI tool that helps users with software engineering tasks.', cache_control: { type: 'ephemeral' } },
	],
	messages: [{ role: 'user', content: [
		{ type: 'text', text: '<system-reminder>This is a reminder.</system-reminder>' },
		{ type: 'text', text: 'Once upon a time', cache_control: { type: 'ephemeral' } },
	] }],
	tools: [{
		name: 'Bash', description: 'Executes a bash command',
		input_schema: { $schema: 'http://json-schema.org/draft-07/schema#', type: 'object', properties: { command: { type: 'string' } }, required: ['command'], additionalProperties: false },
		cache_control: { type: 'ephemeral' },
	}],
	metadata: { user_id: 'user_abc_account_def_session_123' },
	context_management: { edits: [{ type: 'clear_thinking_20251015', keep: 'all' }] },
	output_config: { effort: 'high' },
	thinking: { type: 'enabled', budget_tokens: 1024 },
	temperature: 1,
	...extra,
});
const CLAUDE_IGNORED = ['context_management', 'metadata', 'output_config.effort', 'thinking'];

// Codex CLI's first /v1/responses call, as it sends it (instructions and tools shortened).
const codex = (extra = {}) => ({
	model: 'gpt-5-codex',
	instructions: 'You are Codex, based on GPT-5. You are running as a coding agent in the Codex CLI.',
	input: [
		{ type: 'message', role: 'developer', content: [{ type: 'input_text', text: '<permissions instructions>sandboxed</permissions instructions>' }] },
		{ type: 'message', role: 'user', content: [{ type: 'input_text', text: '<environment_context>cwd: /tmp</environment_context>' }] },
		{ type: 'message', role: 'user', content: [{ type: 'input_text', text: 'Once upon a time' }] },
	],
	tools: [{
		type: 'function', name: 'shell', description: 'Runs a shell command and returns its output.', strict: false,
		parameters: { type: 'object', properties: { command: { type: 'array', items: { type: 'string' } }, workdir: { type: 'string' } }, required: ['command'], additionalProperties: false },
	}],
	tool_choice: 'auto',
	parallel_tool_calls: false,
	reasoning: { effort: 'medium', summary: 'auto' },
	store: false,
	stream: true,
	include: ['reasoning.encrypted_content'],
	prompt_cache_key: '0199a5b2-7c1e-7d33-9a55-4c2f4a0f1e11',
	client_metadata: { 'x-codex-installation-id': 'abc' },
	max_output_tokens: 32,
	...extra,
});
const CODEX_IGNORED = ['client_metadata', 'include', 'prompt_cache_key', 'reasoning.summary'];

test("Claude Code's first request runs, streamed, and the header names what lanes ignored", async () => {
	const r = await post(srv.url, '/v1/messages', claudeCode());
	assert.equal(r.status, 200, JSON.stringify(r.body));
	assert.deepEqual(names(r), CLAUDE_IGNORED);
	assert.equal(r.events.at(-1).event, 'message_stop');
	assert.ok(r.events.find((e) => e.event === 'message_delta'));
	// the access log names them once, on the request's own line
	let line;
	for (let i = 0; i < 1500 && !line; i++) {
		line = srv.log().split('\n').find((l) => /POST \/v1\/messages 200 .*ignored=/.test(l));
		if (!line) await new Promise((res) => setTimeout(res, 20));
	}
	assert.ok(line, srv.log().slice(-2000));
	assert.deepEqual(line.match(/ignored=(\S+)/)[1].split(',').sort(), CLAUDE_IGNORED);
	// the same, not streamed; and count_tokens takes the same shape
	const whole = await post(srv.url, '/v1/messages', claudeCode({ stream: false }));
	assert.equal(whole.status, 200);
	assert.deepEqual(names(whole), CLAUDE_IGNORED);
	const { stream, max_tokens, metadata, temperature, ...countable } = claudeCode();
	const count = await post(srv.url, '/v1/messages/count_tokens', countable);
	assert.equal(count.status, 200, JSON.stringify(count.body));
	assert.equal(count.body.input_tokens, whole.body.usage.input_tokens + whole.body.usage.cache_read_input_tokens);
});

test("Codex CLI's first request runs, streamed, and the header names what lanes ignored", async () => {
	const r = await post(srv.url, '/v1/responses', codex());
	assert.equal(r.status, 200, JSON.stringify(r.body));
	assert.deepEqual(names(r), CODEX_IGNORED);
	assert.ok(['response.completed', 'response.incomplete'].includes(r.events.at(-1).event), r.events.at(-1).event);
	assert.equal(r.events.at(-1).data.response.store, false);
	// store: true is kept (--responses-store): nothing more to name
	const whole = await post(srv.url, '/v1/responses', codex({ stream: false, store: true }));
	assert.equal(whole.status, 200);
	assert.deepEqual(names(whole), CODEX_IGNORED);
	assert.equal(whole.body.store, true);
	// where nothing is ignored there is no header
	const plain = await post(srv.url, '/v1/responses', { input: 'Once', max_output_tokens: 2, store: false, user: 'u1' });
	assert.equal(plain.status, 200);
	assert.equal(plain.headers.get('x-lanes-ignored'), null);
});

// Codex offers function tools grouped in a namespace and hosted ones (web_search): the grouped
// functions are callable, the hosted ones named; --strict-params refuses them.
test("Codex's namespace and hosted tools: the namespace's functions are called, web_search is named", async () => {
	const tools = [
		{ type: 'namespace', name: 'multi_agent_v1', description: 'sub-agents', tools: [{ type: 'function', name: 'close_agent', strict: false, parameters: { type: 'object', properties: { target: { type: 'string', maxLength: 8 } }, required: ['target'], additionalProperties: false } }] },
		{ type: 'web_search', external_web_access: false },
	];
	const r = await post(srv.url, '/v1/responses', { input: 'Close it.', tools, tool_choice: { type: 'function', name: 'close_agent' }, max_output_tokens: 200, store: false });
	assert.equal(r.status, 200, JSON.stringify(r.body));
	assert.deepEqual(names(r), ['tools.web_search']);
	const call = r.body.output.find((o) => o.type === 'function_call');
	assert.equal(call?.name, 'close_agent', JSON.stringify(r.body.output));
	assert.equal(typeof JSON.parse(call.arguments).target, 'string');
	const refused = await post(strict.url, '/v1/responses', { input: 'x', tools, max_output_tokens: 2, store: false });
	assert.equal(refused.status, 400);
	assert.match(refused.body.error.message, /tools\.web_search/);
});

test('--strict-params refuses what the policy ignores, naming every field', async () => {
	const a = await post(strict.url, '/v1/messages', claudeCode());
	assert.equal(a.status, 400);
	assert.equal(a.body.error.type, 'invalid_request_error');
	for (const n of CLAUDE_IGNORED) assert.match(a.body.error.message, new RegExp(n.replace('.', '\\.')));
	assert.match(a.body.error.message, /--strict-params/);
	const o = await post(strict.url, '/v1/responses', codex());
	assert.equal(o.status, 400);
	assert.ok(CODEX_IGNORED.includes(o.body.error.param), o.body.error.param);
	for (const n of CODEX_IGNORED) assert.ok(o.body.error.message.includes(n), o.body.error.message);
	const c = await post(strict.url, '/v1/messages/count_tokens', { model: 'm', messages: [{ role: 'user', content: 'x' }], context_management: {} });
	assert.equal(c.status, 400);
	assert.match(c.body.error.message, /context_management/);
	// what lanes honours, or ignores in silence, is not refused
	const fine = await post(strict.url, '/v1/responses', { input: 'Once', max_output_tokens: 2, store: false, user: 'u1', parallel_tool_calls: false });
	assert.equal(fine.status, 200, JSON.stringify(fine.body));
});

test('a field no reference documents is still a 400 naming it', async () => {
	const m = await post(srv.url, '/v1/messages', claudeCode({ stream: false, frobnicate: 1 }));
	assert.equal(m.status, 400);
	assert.match(m.body.error.message, /unsupported parameter: frobnicate/);
	const nested = await post(srv.url, '/v1/messages', claudeCode({ stream: false, output_config: { effort: 'low', frob: 1 } }));
	assert.equal(nested.status, 400);
	assert.match(nested.body.error.message, /unsupported parameter in output_config: frob/);
	const r = await post(srv.url, '/v1/responses', codex({ stream: false, wibble: true }));
	assert.equal(r.status, 400);
	assert.equal(r.body.error.param, 'wibble');
	const c = await post(srv.url, '/v1/chat/completions', { messages: [{ role: 'user', content: 'x' }], max_tokens: 1, verbosity: 'low', wibble: 2 });
	assert.equal(c.status, 400);
	assert.equal(c.body.error.param, 'wibble');
	// previous_response_id names a kept response: one never kept is a 404, not a conversation answered without it
	const prev = await post(srv.url, '/v1/responses', codex({ stream: false, previous_response_id: 'resp_1' }));
	assert.equal(prev.status, 404);
	assert.equal(prev.body.error.param, 'previous_response_id');
});

test('ignored fields change no token', async () => {
	const base = { model: 'm', max_tokens: 24, temperature: 0, messages: [{ role: 'user', content: 'Once upon a time' }] };
	const a = await post(srv.url, '/v1/messages', base);
	const b = await post(srv.url, '/v1/messages', {
		...base, metadata: { user_id: 'u' }, context_management: { edits: [] }, output_config: { effort: 'low' },
		thinking: { type: 'adaptive' }, cache_control: { type: 'ephemeral' }, service_tier: 'auto', container: 'c1', mcp_servers: [],
	});
	assert.equal(b.status, 200, JSON.stringify(b.body));
	assert.ok(names(b).length >= 8, names(b).join());
	assert.equal(b.body.token_sha, a.body.token_sha);
	assert.deepEqual(b.body.content, a.body.content);
	const rb = { input: 'Once upon a time', max_output_tokens: 24, temperature: 1, seed: 11 };
	const ra = await post(srv.url, '/v1/responses', rb);
	const rr = await post(srv.url, '/v1/responses', {
		...rb, store: true, include: ['reasoning.encrypted_content'], reasoning: { summary: 'auto' }, prompt_cache_key: 'k',
		client_metadata: { a: 'b' }, safety_identifier: 'u', service_tier: 'flex', background: true, top_logprobs: 3, text: { verbosity: 'low' },
	});
	assert.equal(rr.status, 200, JSON.stringify(rr.body));
	assert.equal(rr.body.token_sha, ra.body.token_sha);
	const cb = { messages: [{ role: 'user', content: 'Once upon a time' }], max_tokens: 24, seed: 12 };
	const ca = await post(srv.url, '/v1/chat/completions', cb);
	const cc = await post(srv.url, '/v1/chat/completions', {
		...cb, store: true, verbosity: 'low', prediction: { type: 'content', content: 'x' }, web_search_options: {}, metadata: { k: 'v' },
		modalities: ['text', 'audio'], audio: { voice: 'alloy', format: 'wav' }, prompt_cache_key: 'k',
	});
	assert.equal(cc.status, 200, JSON.stringify(cc.body));
	assert.equal(cc.body.choices[0].token_sha, ca.body.choices[0].token_sha);
	assert.deepEqual(names(cc), ['audio', 'metadata', 'modalities', 'prediction', 'prompt_cache_key', 'store', 'verbosity', 'web_search_options']);
});

test('thinking in every documented form: checked, then named on a model with no reasoning family', async () => {
	const m = (thinking, max_tokens = 2048) => post(srv.url, '/v1/messages', { model: 'm', max_tokens, messages: [{ role: 'user', content: 'x' }], thinking, stop_sequences: ['.', ' '] });
	for (const t of [{ type: 'enabled', budget_tokens: 1024 }, { type: 'enabled', budget_tokens: 2000, display: 'omitted' }, { type: 'adaptive' }, { type: 'adaptive', display: 'summarized' }]) {
		const r = await m(t);
		assert.equal(r.status, 200, `${JSON.stringify(t)}: ${JSON.stringify(r.body)}`);
		assert.deepEqual(names(r), ['thinking']);
	}
	const off = await m({ type: 'disabled' });
	assert.equal(off.status, 200);
	assert.equal(off.headers.get('x-lanes-ignored'), null, 'disabled is what lanes does');
	for (const [t, re] of [[{ type: 'enabled' }, /budget_tokens/], [{ type: 'enabled', budget_tokens: 100 }, /at least 1024/],
		[{ type: 'enabled', budget_tokens: 4096 }, /less than max_tokens/], [{ type: 'sometimes' }, /thinking/], ['on', /thinking/],
		[{ type: 'disabled', budget_tokens: 1024 }, /thinking.budget_tokens/]]) {
		const r = await m(t);
		assert.equal(r.status, 400, JSON.stringify(t));
		assert.match(r.body.error.message, re);
	}
});

test('a system message inside Anthropic messages: a system turn where the template has one, else joined to the system prompt', async () => {
	const messages = [
		{ role: 'user', content: 'Once upon a time' },
		{ role: 'assistant', content: 'there was a cat.' },
		{ role: 'system', content: [{ type: 'text', text: 'Answer briefly.' }] },
		{ role: 'user', content: 'What next?' },
	];
	const flat = (msgs) => msgs.map((x) => ({ role: x.role, content: typeof x.content === 'string' ? x.content : x.content[0].text }));
	// the plain fallback renders a system turn anywhere: it stays where it was sent
	const here = await post(srv.url, '/v1/messages/count_tokens', { model: 'm', system: 'You tell stories.', messages });
	assert.equal(here.status, 200, JSON.stringify(here.body));
	const inPlace = await postJSON(`${srv.url}/tokenize`, { messages: [{ role: 'system', content: 'You tell stories.' }, ...flat(messages)] });
	assert.equal(here.body.input_tokens, inPlace.body.tokens.length);
	// a template that refuses one there: it joins the system prompt, in order
	const r = await post(capped.url, '/v1/messages', { model: 'm', max_tokens: 2, system: 'You tell stories.', messages });
	assert.equal(r.status, 200, JSON.stringify(r.body));
	const joined = await postJSON(`${capped.url}/tokenize`, {
		messages: [{ role: 'system', content: 'You tell stories.\n\nAnswer briefly.' }, ...flat(messages).filter((x) => x.role !== 'system')],
	});
	assert.equal(joined.status, 200);
	assert.equal(r.body.usage.input_tokens, joined.body.tokens.length);
	// with no system prompt the message becomes it
	const alone = await post(capped.url, '/v1/messages/count_tokens', { model: 'm', messages });
	const made = await postJSON(`${capped.url}/tokenize`, { messages: [{ role: 'system', content: 'Answer briefly.' }, ...flat(messages).filter((x) => x.role !== 'system')] });
	assert.equal(alone.body.input_tokens, made.body.tokens.length);
});

test('redacted_thinking blocks in history are accepted, thinking blocks this server did not sign refused; the fallback template does not render them', async () => {
	const turn = (content) => [{ role: 'user', content: 'Once upon a time' }, { role: 'assistant', content }, { role: 'user', content: 'More.' }];
	const text = { type: 'text', text: 'there was a cat.' };
	const foreign = await post(srv.url, '/v1/messages/count_tokens', { model: 'm', messages: turn([{ type: 'thinking', thinking: 'A story about a cat.', signature: 'sig' }, text]) });
	assert.equal(foreign.status, 400);
	assert.match(foreign.body.error.message, /messages\[1\].content.0.signature/);
	const withThinking = turn([{ type: 'redacted_thinking', data: 'ZW5j' }, text]);
	const a = await post(srv.url, '/v1/messages/count_tokens', { model: 'm', messages: withThinking });
	const b = await post(srv.url, '/v1/messages/count_tokens', { model: 'm', messages: turn([text]) });
	assert.equal(a.status, 200, JSON.stringify(a.body));
	assert.equal(a.body.input_tokens, b.body.input_tokens);
	const calls = turn([{ type: 'redacted_thinking', data: 'ZW5j' }, { type: 'tool_use', id: 'toolu_1', name: 'f', input: {} }]);
	calls[2] = { role: 'user', content: [{ type: 'tool_result', tool_use_id: 'toolu_1', content: 'done' }] };
	const r = await post(srv.url, '/v1/messages', { model: 'm', max_tokens: 2, messages: calls, tools: [{ name: 'f', input_schema: { type: 'object' } }] });
	assert.equal(r.status, 200, JSON.stringify(r.body));
	assert.equal(r.headers.get('x-lanes-ignored'), null, 'history is honoured as the template renders it');
	const bad = await post(srv.url, '/v1/messages', { model: 'm', max_tokens: 2, messages: turn([{ type: 'thinking', signature: 's' }]) });
	assert.equal(bad.status, 400);
	assert.match(bad.body.error.message, /thinking block/);
});

const IMAGE = '[image omitted: this model cannot see images]';

test('images and documents a model cannot read become a placeholder, named; --strict-params refuses them', async () => {
	const png = { type: 'base64', media_type: 'image/png', data: 'iVBORw0KGgo=' };
	const messages = [
		{ role: 'user', content: [{ type: 'text', text: 'Read the file.' }] },
		{ role: 'assistant', content: [{ type: 'tool_use', id: 'toolu_1', name: 'Read', input: { file_path: 'a.png' } }] },
		{ role: 'user', content: [{ type: 'tool_result', tool_use_id: 'toolu_1', content: [{ type: 'image', source: png }] }, { type: 'text', text: 'What is it?' }, { type: 'image', source: png }] },
	];
	const tools = [{ name: 'Read', description: 'Reads a file', input_schema: { type: 'object', properties: { file_path: { type: 'string' } } } }];
	const r = await post(srv.url, '/v1/messages', { model: 'm', max_tokens: 2, messages, tools });
	assert.equal(r.status, 200, JSON.stringify(r.body));
	assert.deepEqual(names(r), ['image']);
	const c = await post(srv.url, '/v1/messages/count_tokens', { model: 'm', messages, tools });
	const same = [...messages.slice(0, 2), { role: 'user', content: [{ type: 'tool_result', tool_use_id: 'toolu_1', content: IMAGE }, { type: 'text', text: `What is it?${IMAGE}` }] }];
	const t = await post(srv.url, '/v1/messages/count_tokens', { model: 'm', messages: same, tools });
	assert.equal(c.body.input_tokens, t.body.input_tokens);
	// a text document is read as its text: nothing is ignored
	const doc = await post(srv.url, '/v1/messages', { model: 'm', max_tokens: 2, messages: [{ role: 'user', content: [{ type: 'document', source: { type: 'text', media_type: 'text/plain', data: 'A cat.' } }] }] });
	assert.equal(doc.status, 200);
	assert.equal(doc.headers.get('x-lanes-ignored'), null);
	const pdf = await post(srv.url, '/v1/messages', { model: 'm', max_tokens: 2, messages: [{ role: 'user', content: [{ type: 'document', source: { type: 'base64', media_type: 'application/pdf', data: 'JVBE' } }] }] });
	assert.deepEqual(names(pdf), ['document']);
	// OpenAI's parts, chat and Responses
	const oc = await post(srv.url, '/v1/chat/completions', { max_tokens: 2, messages: [{ role: 'user', content: [{ type: 'text', text: 'What is this?' }, { type: 'image_url', image_url: { url: 'data:image/png;base64,iVBORw0KGgo=' } }, { type: 'file', file: { file_id: 'f1' } }] }] });
	assert.equal(oc.status, 200, JSON.stringify(oc.body));
	assert.deepEqual(names(oc), ['file', 'image_url']);
	const ids = (await postJSON(`${srv.url}/tokenize`, { messages: [{ role: 'user', content: `What is this?${IMAGE}[file omitted: this model cannot read files]` }] })).body.tokens;
	assert.equal(oc.body.usage.prompt_tokens, ids.length);
	const rs = await post(srv.url, '/v1/responses', { max_output_tokens: 2, input: [{ role: 'user', content: [{ type: 'input_text', text: 'Look' }, { type: 'input_image', image_url: 'data:,' }, { type: 'input_file', file_id: 'f' }] }] });
	assert.equal(rs.status, 200, JSON.stringify(rs.body));
	assert.deepEqual(names(rs), ['input_file', 'input_image']);
	// --strict-params: refused, naming them
	const s = await post(strict.url, '/v1/messages', { model: 'm', max_tokens: 2, messages, tools });
	assert.equal(s.status, 400);
	assert.match(s.body.error.message, /image/);
	const so = await post(strict.url, '/v1/chat/completions', { max_tokens: 2, messages: [{ role: 'user', content: [{ type: 'image_url', image_url: { url: 'x' } }] }] });
	assert.equal(so.status, 400);
	assert.equal(so.body.error.param, 'image_url');
});

test('output_format (and output_config.format) constrain the reply to the JSON Schema', async (t) => {
	const probe = await post(srv.url, '/v1/chat/completions', { messages: [{ role: 'user', content: 'x' }], max_tokens: 16, grammar: 'root ::= "yes"' });
	if (probe.body.choices[0].message.content !== 'yes') return t.skip('the lane host does not sample under grammars');
	const schema = { type: 'object', properties: { name: { type: 'string', maxLength: 10 }, mood: { enum: ['happy', 'sad'] }, ok: { type: 'boolean' } }, required: ['name', 'mood', 'ok'], additionalProperties: false };
	const ajv = new Ajv({ strict: false });
	let checked = 0;
	for (const [seed, key] of [[1, 'output_format'], [2, 'output_format'], [3, 'output_config']]) {
		const format = { type: 'json_schema', schema };
		const body = { model: 'm', max_tokens: 200, seed, messages: [{ role: 'user', content: 'Describe a cat.' }], ...(key === 'output_format' ? { output_format: format } : { output_config: { format } }) };
		const r = await post(srv.url, '/v1/messages', body);
		assert.equal(r.status, 200, JSON.stringify(r.body));
		assert.equal(r.headers.get('x-lanes-ignored'), null, 'the format is honoured');
		if (r.body.stop_reason === 'max_tokens') continue; // a cut document cannot be checked
		const doc = JSON.parse(r.body.content[0].text);
		assert.ok(ajv.validate(schema, doc), `${r.body.content[0].text}: ${JSON.stringify(ajv.errors)}`);
		checked++;
	}
	assert.ok(checked >= 2, `${checked} of 3 replies whole`);
	const bad = await post(srv.url, '/v1/messages', { model: 'm', max_tokens: 2, messages: [{ role: 'user', content: 'x' }], output_format: { type: 'json_schema' } });
	assert.equal(bad.status, 400);
	assert.match(bad.body.error.message, /output_format/);
	const both = await post(srv.url, '/v1/messages', { model: 'm', max_tokens: 2, messages: [{ role: 'user', content: 'x' }], output_format: { type: 'json_schema', schema }, output_config: { format: { type: 'json_schema', schema } } });
	assert.equal(both.status, 400);
});

test('--max-tokens caps a request that sets no limit; a request\'s own limit is honoured', async () => {
	const msgs = [{ role: 'user', content: 'Once upon a time' }];
	const none = await post(capped.url, '/v1/chat/completions', { messages: msgs, ignore_eos: true });
	assert.equal(none.status, 200, JSON.stringify(none.body));
	assert.equal(none.body.usage.completion_tokens, 7);
	assert.equal(none.body.choices[0].finish_reason, 'length');
	const own = await post(capped.url, '/v1/chat/completions', { messages: msgs, ignore_eos: true, max_tokens: 12 });
	assert.equal(own.body.usage.completion_tokens, 12);
	const fewer = await post(capped.url, '/v1/chat/completions', { messages: msgs, ignore_eos: true, max_completion_tokens: 3 });
	assert.equal(fewer.body.usage.completion_tokens, 3);
	const unlimited = await post(capped.url, '/v1/completions', { prompt: 'Once', ignore_eos: true, n_predict: -1 });
	assert.equal(unlimited.body.usage.completion_tokens, 7);
	const resp = await post(capped.url, '/v1/responses', { input: 'Once upon a time', ignore_eos: true });
	assert.equal(resp.body.usage.output_tokens, 7);
	assert.equal(resp.body.max_output_tokens, null, 'echoed as sent');
	const oll = await post(capped.url, '/api/chat', { model: 'stories260K', messages: msgs, stream: false, options: { num_predict: -1 } });
	assert.ok(oll.body.eval_count <= 7, String(oll.body.eval_count));
	// Anthropic's max_tokens stays required
	const ant = await post(capped.url, '/v1/messages', { model: 'm', messages: msgs });
	assert.equal(ant.status, 400);
	assert.match(ant.body.error.message, /max_tokens/);
});
