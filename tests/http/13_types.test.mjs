// Type checks as docs/api.md states them: every documented field of every API gets each of
// 18 value kinds, and is answered 200 (or the documented 404) when the docs accept the value,
// else 400 naming the field in the API's error shape. Then the replies that hold client text
// that is not valid UTF-8, and the access log with client control characters.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { startServer, STORIES, KEY, rawExchange, httpRequest, statusOf, bodyOf, sleep } from './lib.mjs';

let srv;
// --strict-model: a model id that is not this server's is a 404, so every kind is checked
before(async () => (srv = await startServer(['-m', STORIES, '--api-key', KEY, '--strict-model'])));
after(() => srv.proc.kill('SIGKILL'));

// The 18 kinds, as JSON text (-0.0 and 1e308 cannot come out of JSON.stringify).
const KINDS = {
	null: 'null',
	true: 'true',
	false: 'false',
	zero: '0',
	minus1: '-1',
	negzero: '-0.0',
	half: '2.5',
	huge: '1e308',
	str: '"abc"',
	empty: '""',
	numstr: '"7"',
	arr: '[]',
	arr1: '[1]',
	arrs: '["a"]',
	obj: '{}',
	obja: '{"a":1}',
	nested: '{"a":[{"b":[1,{"c":null}]}]}',
	long: JSON.stringify('x'.repeat(1500)),
};
const STRINGS = ['str', 'empty', 'numstr', 'long'];

// What a field accepts, as the kinds answered 200 (null: the same as leaving it out).
const any = (...k) => ['null', ...k];
const BOOL = any('true', 'false');
const STR = any(...STRINGS);
const OBJ = any('obj', 'obja', 'nested');
const NONE = any();
// a number in lo..hi (lo excluded when open); -0.0 is 0
const num = (lo, hi, open = false) =>
	any(...Object.entries({ zero: 0, minus1: -1, negzero: 0, half: 2.5, huge: 1e308 })
		.filter(([, v]) => (open ? v > lo : v >= lo) && v <= hi).map(([k]) => k));
// an integer in lo..hi: -0.0, 2.5 and 1e308 are not integers
const int = (lo, hi) => any(...Object.entries({ zero: 0, minus1: -1 }).filter(([, v]) => v >= lo && v <= hi).map(([k]) => k));

const userMsgs = [{ role: 'user', content: 'Once' }];
// Each API: path, the smallest request, its error family, and its fields.
const APIS = {
	chat: {
		path: '/v1/chat/completions',
		base: { messages: userMsgs, max_tokens: 1 },
		fields: {
			model: { ok: NONE, notFound: STRINGS },
			messages: { ok: [], required: true },
			max_tokens: { ok: NONE, drop: ['max_tokens'], base: { stream: true } },
			max_completion_tokens: { ok: NONE, drop: ['max_tokens'], base: { stream: true } },
			temperature: { ok: num(0, 2) },
			top_p: { ok: num(0, 1, true) },
			stop: { ok: any('str', 'numstr', 'arr', 'arrs') },
			seed: { ok: int(-Infinity, Infinity) },
			n: { ok: NONE },
			presence_penalty: { ok: num(-2, 2) },
			frequency_penalty: { ok: num(-2, 2) },
			logit_bias: { ok: any('obj') },
			logprobs: { ok: BOOL },
			top_logprobs: { ok: int(0, 20), base: { logprobs: true } },
			stream: { ok: BOOL },
			stream_options: { ok: any('obj') },
			'stream_options.include_usage': { ok: BOOL, base: { stream: true } },
			user: { ok: STR },
			metadata: { ok: OBJ },
			service_tier: { ok: STR },
			parallel_tool_calls: { ok: BOOL },
			response_format: { ok: NONE },
			tools: { ok: any('arr') },
			tool_choice: { ok: NONE },
			modalities: { ok: any('arr') },
			store: { ok: BOOL },
			audio: { ok: OBJ },
			function_call: { ok: [...STR, 'obj', 'obja', 'nested'] },
			functions: { ok: any('arr', 'arr1', 'arrs') },
			moderation: { ok: OBJ },
			prediction: { ok: OBJ },
			prompt_cache_key: { ok: STR },
			prompt_cache_retention: { ok: STR },
			prompt_cache_options: { ok: OBJ },
			safety_identifier: { ok: STR },
			verbosity: { ok: STR },
			web_search_options: { ok: OBJ },
			reasoning_effort: { ok: STR },
			top_k: { ok: int(0, Infinity) },
			min_p: { ok: num(0, 1) },
			repeat_penalty: { ok: num(0, 100, true) },
			draft: { ok: BOOL },
			ignore_eos: { ok: BOOL },
			dry_multiplier: { ok: num(0, 100) },
			dry_base: { ok: num(1, 100) },
			dry_allowed_length: { ok: int(0, 1e6) },
			dry_penalty_last_n: { ok: int(-1, Infinity) },
			dry_sequence_breakers: { ok: any('arr', 'arrs') },
			xtc_probability: { ok: num(0, 1) },
			xtc_threshold: { ok: num(0, 1) },
			top_n_sigma: { ok: num(-1, 100) },
			dynatemp_range: { ok: num(0, 1000) },
			dynatemp_exponent: { ok: num(0, 100) },
			mirostat: { ok: int(0, 2) },
			mirostat_tau: { ok: num(0, 100) },
			mirostat_eta: { ok: num(0, 10) },
			samplers: { ok: NONE }, // an empty order is refused, as it would read as the default one
			'messages.0.role': { ok: [] },
			'messages.0.content': { ok: [...STRINGS, 'arr'] },
		},
	},
	completions: {
		path: '/v1/completions',
		base: { prompt: 'Once', max_tokens: 1 },
		fields: {
			model: { ok: NONE, notFound: STRINGS },
			prompt: { ok: ['str', 'empty', 'numstr', 'long', 'arr1', 'arrs'], required: true },
			max_tokens: { ok: NONE },
			temperature: { ok: num(0, 2) },
			top_p: { ok: num(0, 1, true) },
			stop: { ok: any('str', 'numstr', 'arr', 'arrs') },
			seed: { ok: int(-Infinity, Infinity) },
			n: { ok: NONE },
			presence_penalty: { ok: num(-2, 2) },
			frequency_penalty: { ok: num(-2, 2) },
			logit_bias: { ok: any('obj') },
			logprobs: { ok: int(0, 20) },
			echo: { ok: BOOL },
			suffix: { ok: any('empty') }, // a non-empty one needs FIM tokens, which this model has not: 400
			best_of: { ok: NONE },
			stream: { ok: BOOL },
			stream_options: { ok: any('obj') },
			user: { ok: STR },
			top_k: { ok: int(0, Infinity) },
			min_p: { ok: num(0, 1) },
			repeat_penalty: { ok: num(0, 100, true) },
			draft: { ok: BOOL },
			ignore_eos: { ok: BOOL },
		},
	},
	messages: {
		path: '/v1/messages',
		anthropic: true,
		base: { messages: userMsgs, max_tokens: 1 },
		fields: {
			model: { ok: NONE, notFound: STRINGS },
			max_tokens: { ok: [], required: true },
			messages: { ok: [], required: true },
			'messages.0.role': { ok: [] },
			'messages.0.content': { ok: [...STRINGS, 'arr'] },
			system: { ok: [...STR, 'arr'] },
			stop_sequences: { ok: any('arr', 'arrs') },
			temperature: { ok: num(0, 1) },
			top_p: { ok: num(0, 1, true) },
			top_k: { ok: int(0, Infinity) },
			metadata: { ok: OBJ },
			service_tier: { ok: STR },
			tools: { ok: any('arr') },
			tool_choice: { ok: NONE },
			thinking: { ok: NONE },
			output_format: { ok: NONE },
			output_config: { ok: any('obj') },
			'output_config.effort': { ok: STR },
			cache_control: { ok: OBJ },
			context_management: { ok: OBJ },
			mcp_servers: { ok: any('arr', 'arr1', 'arrs') },
			inference_geo: { ok: STR },
			speed: { ok: STR },
			stream: { ok: BOOL },
			seed: { ok: int(-Infinity, Infinity) },
			min_p: { ok: num(0, 1) },
			draft: { ok: BOOL },
			ignore_eos: { ok: BOOL },
		},
	},
	responses: {
		path: '/v1/responses',
		base: { input: 'Once', max_output_tokens: 1 },
		fields: {
			model: { ok: NONE, notFound: STRINGS },
			input: { ok: STRINGS, required: true },
			instructions: { ok: STR },
			max_output_tokens: { ok: NONE, drop: ['max_output_tokens'], base: { stream: true } },
			temperature: { ok: num(0, 2) },
			top_p: { ok: num(0, 1, true) },
			store: { ok: BOOL },
			previous_response_id: { ok: NONE, notFound: STRINGS },
			conversation: { ok: NONE },
			prompt: { ok: NONE },
			client_metadata: { ok: OBJ },
			context_management: { ok: any('arr', 'arr1', 'arrs') },
			max_tool_calls: { ok: int(-Infinity, Infinity) },
			top_logprobs: { ok: int(-Infinity, Infinity) },
			prompt_cache_key: { ok: STR },
			safety_identifier: { ok: STR },
			'text.verbosity': { ok: STR },
			'reasoning.effort': { ok: STR },
			'reasoning.summary': { ok: STR },
			tools: { ok: any('arr') },
			tool_choice: { ok: NONE },
			text: { ok: any('obj') },
			'text.format': { ok: NONE },
			'input.0.role': { ok: [], base: { input: [{ role: 'user', content: 'Once' }] } },
			'input.0.content': { ok: [...STRINGS, 'arr'], base: { input: [{ role: 'user', content: 'Once' }] } },
			reasoning: { ok: any('obj') },
			include: { ok: any('arr', 'arrs') },
			background: { ok: BOOL },
			metadata: { ok: OBJ },
			user: { ok: STR },
			parallel_tool_calls: { ok: BOOL },
			truncation: { ok: NONE },
			service_tier: { ok: STR },
			stream_options: { ok: OBJ },
			stream: { ok: BOOL },
			top_k: { ok: int(0, Infinity) },
			min_p: { ok: num(0, 1) },
			seed: { ok: int(-Infinity, Infinity) },
			draft: { ok: BOOL },
			ignore_eos: { ok: BOOL },
		},
	},
	tokenize: {
		path: '/tokenize',
		base: { content: 'Once' },
		fields: {
			content: { ok: STRINGS, required: true },
			messages: { ok: [], drop: ['content'], nullParam: 'content' },
			add_special: { ok: BOOL },
			parse_special: { ok: BOOL },
			model: { ok: STR },
		},
	},
	detokenize: {
		path: '/detokenize',
		base: { tokens: [1] },
		fields: {
			tokens: { ok: ['arr', 'arr1'], required: true },
			model: { ok: STR },
		},
	},
};

// The request body with the field at its dotted path set to the kind's JSON text.
function bodyWith(api, field, spec, raw) {
	const b = structuredClone({ ...api.base, ...(spec.base || {}) });
	for (const d of spec.drop || []) delete b[d];
	const keys = field.split('.');
	let o = b;
	for (const k of keys.slice(0, -1)) o = o[k] ??= {};
	o[keys.at(-1)] = '\u0001MARK\u0001';
	return JSON.stringify(b).replace('"\\u0001MARK\\u0001"', raw);
}

async function send(path, body) {
	const r = await fetch(srv.url + path, {
		method: 'POST',
		headers: { 'Content-Type': 'application/json', Authorization: `Bearer ${KEY}` },
		body,
	});
	// an accepted stream is not read to its end: null max_tokens is the rest of the context
	if (r.status === 200 && r.headers.get('content-type')?.startsWith('text/event-stream')) {
		await r.body.cancel();
		return { status: r.status, text: '', json: null };
	}
	const text = await r.text();
	let json = null;
	try {
		json = JSON.parse(text);
	} catch {}
	return { status: r.status, text, json };
}

// A dotted field path as params spell it: messages.0.role is messages[0].role.
const paramOf = (field) => field.replace(/\.(\d+)/g, '[$1]');

function checkRefused(api, field, spec, kind, r) {
	const where = `${api.path} ${field}=${kind}: ${r.status} ${r.text.slice(0, 300)}`;
	const notFound = kind !== 'null' && (spec.notFound || []).includes(kind);
	const want = notFound ? 404 : 400;
	assert.equal(r.status, want, where);
	assert.ok(r.json, `not JSON: ${where}`);
	const param = kind === 'null' && spec.nullParam ? spec.nullParam : paramOf(field);
	if (api.anthropic) {
		assert.equal(r.json.type, 'error', where);
		assert.equal(r.json.error.type, notFound ? 'not_found_error' : 'invalid_request_error', where);
		assert.ok(r.json.error.message.includes(param.split(/[.[]/)[0]), where);
	} else {
		assert.equal(r.json.error.type, 'invalid_request_error', where);
		const p = r.json.error.param;
		assert.ok(p === param || p?.startsWith(param + '.') || p?.startsWith(param + '['), `param ${p}: ${where}`);
		assert.ok('code' in r.json.error && typeof r.json.error.message === 'string', where);
	}
}

for (const [name, api] of Object.entries(APIS)) {
	test(`${name}: every documented field × 18 value kinds answers as the docs say`, async () => {
		const cases = [];
		for (const [field, spec] of Object.entries(api.fields))
			for (const [kind, raw] of Object.entries(KINDS)) cases.push({ field, spec, kind, raw });
		const bad = [];
		// a few at a time: the lanes are few, and max_tokens 1 keeps each short
		for (let i = 0; i < cases.length; i += 4) {
			await Promise.all(cases.slice(i, i + 4).map(async ({ field, spec, kind, raw }) => {
				const r = await send(api.path, bodyWith(api, field, spec, raw));
				const okKind = spec.ok.includes(kind) && !(kind === 'null' && spec.required);
				try {
					if (okKind) assert.equal(r.status, 200, `${api.path} ${field}=${kind}: ${r.status} ${r.text.slice(0, 300)}`);
					else checkRefused(api, field, spec, kind, r);
				} catch (e) {
					bad.push(e.message.split('\n')[0]);
				}
			}));
		}
		assert.deepEqual(bad, [], `${bad.length} of ${cases.length} answered otherwise than the docs say`);
	});
}

test('responses: truncation is echoed as sent', async () => {
	for (const t of ['auto', 'disabled']) {
		const r = await send('/v1/responses', JSON.stringify({ input: 'Once', max_output_tokens: 1, truncation: t }));
		assert.equal(r.status, 200, r.text);
		assert.equal(r.json.truncation, t);
	}
});

// ---- replies that hold client text which is not valid UTF-8 ------------------------------

// Both parities, so that a cut at a fixed byte count lands inside a character in one of them.
const LONG_E = ['x', 'xx'].map((x) => x + 'é'.repeat(300));
const utf8 = (o) => Buffer.from(JSON.stringify(o), 'utf8');
// The smallest valid request of each path, for a field set to a long value.
const BASES = {
	'/v1/chat/completions': { messages: userMsgs, max_tokens: 1 },
	'/v1/completions': { prompt: 'a', max_tokens: 1 },
	'/v1/messages': { messages: userMsgs, max_tokens: 1 },
	'/v1/responses': { input: 'a', max_output_tokens: 1 },
	'/tokenize': { content: 'a' },
	'/detokenize': { tokens: [1] },
};
const MESSAGE_PATHS = ['/v1/chat/completions', '/v1/messages', '/tokenize'];
// [what, (path) => the body, or null where the case does not apply]
const UTF8_CASES = [
	['bad escape then é', () => Buffer.from('{"x":"\\u\xc3\xa9"}', 'latin1')],
	['invalid UTF-8 in a key', () => Buffer.from('{"\xff\xfe":1}', 'latin1')],
	...LONG_E.flatMap((v, i) => [
		[`unknown key of ${i + 1} + 300 é`, (p) => utf8({ ...BASES[p], [v]: 1 })],
		[`model of ${i + 1} + 300 é`, (p) => (p.startsWith('/v1/') ? utf8({ ...BASES[p], model: v }) : null)],
		[`role of ${i + 1} + 300 é`, (p) =>
			MESSAGE_PATHS.includes(p) ? utf8({ ...BASES[p], content: undefined, messages: [{ role: v, content: 'a' }] }) : null],
	]),
];
const PATHS = ['/v1/chat/completions', '/v1/completions', '/v1/messages', '/v1/responses', '/tokenize', '/detokenize'];

function rawPost(path, body) {
	const head = `POST ${path} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer ${KEY}\r\nConnection: close\r\n` +
		`Content-Type: application/json\r\nContent-Length: ${body.length}\r\n\r\n`;
	return Buffer.concat([Buffer.from(head), body]);
}

function checkReply(what, raw, anthropic) {
	const status = statusOf(raw);
	assert.ok(status >= 400 && status < 500, `${what}: no 4xx status line: ${JSON.stringify(raw.slice(0, 200))}`);
	const body = JSON.parse(Buffer.from(bodyOf(raw), 'latin1').toString('utf8'));
	if (anthropic) assert.equal(body.type, 'error', what);
	else assert.equal(typeof body.error.message, 'string', what);
	return body;
}

test('an error message that would hold invalid UTF-8 still gets a reply with a JSON body', async () => {
	const bad = [];
	const attempt = (f) => {
		try {
			f();
		} catch (e) {
			bad.push(e.message.split('\n')[0]);
		}
	};
	for (const [what, bodyFor] of UTF8_CASES)
		for (const p of PATHS) {
			const body = bodyFor(p);
			if (!body) continue;
			const r = await rawExchange(srv.port, rawPost(p, body));
			attempt(() => checkReply(`${p} ${what}`, r.text, p === '/v1/messages'));
		}
	const r = await rawExchange(srv.port, httpRequest('GET', '/v1/models/x' + '%C3%A9'.repeat(100)));
	attempt(() => {
		const body = checkReply('GET /v1/models/x + 100 é', r.text, false);
		assert.equal(statusOf(r.text), 404);
		assert.equal(body.error.code, 'model_not_found');
	});
	assert.deepEqual(bad, []);
});

test('control characters from the client are escaped in the access log', async () => {
	const r = await rawExchange(srv.port, httpRequest('GET', '/v1/models/a%0D%0AI%20http:%20GET%20/forged%20200%1B[31m'));
	assert.equal(statusOf(r.text), 404);
	for (let i = 0; i < 1500 && !srv.log().includes('/forged'); i++) await sleep(20);
	const lines = srv.log().split('\n');
	assert.ok(!lines.some((l) => l.startsWith('I http: GET /forged')), 'a forged access-log line');
	const line = lines.find((l) => l.includes('/forged'));
	assert.ok(line && line.includes('\\x0d\\x0a') && line.includes('\\x1b') && !line.includes('\x1b'), line);
});
