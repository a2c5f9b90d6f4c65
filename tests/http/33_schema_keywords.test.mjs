// Tool schemas as real clients write them, on stories260K: zod 4's (a record through
// propertyNames, url, email, uuid, datetime, multipleOf, tuples, a discriminated union of
// consts) are served on /v1/chat/completions and /v1/messages, and the forced calls' arguments
// are valid under ajv with its formats. A keyword lanes cannot check relaxes that part and the
// call is still served; with strict: true the same tool is a 400 naming the tool and keyword.
// A call cut by max_tokens has no arguments to check: it is said and not counted.
import { test, before } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import Anthropic from '@anthropic-ai/sdk';
import Ajv from 'ajv/dist/2020.js';
import addFormats from 'ajv-formats';
import { z } from 'zod/v4';
import { mainServer, postJSON, KEY, samplesUnderGrammars, grammarTest } from './lib.mjs';

let url, oai, ant, constrains;
before(async () => {
	({ url } = await mainServer());
	oai = new OpenAI({ baseURL: `${url}/v1`, apiKey: KEY, maxRetries: 0 });
	ant = new Anthropic({ baseURL: url, apiKey: KEY, maxRetries: 0 });
	constrains = await samplesUnderGrammars(url);
});
const ctest = grammarTest(test, () => constrains);

// multipleOf 0.01 checked by division is off for most decimals (0.29 / 0.01 is not whole in
// binary): the precision option checks it as the schema means it
const ajv = new Ajv({ strict: false, allErrors: true, multipleOfPrecision: 9 });
addFormats(ajv);
const MAX = 600;
const tool = (name, schema) => ({ type: 'function', function: { name, description: `The ${name} tool`, parameters: schema } });
const json = (s) => z.toJSONSchema(s);

const SCHEMAS = {
	contact: json(z.object({
		site: z.url().max(40),
		mail: z.email().max(40),
		id: z.uuid(),
		at: z.iso.datetime(),
		qty: z.int().min(0).max(1000).multipleOf(5),
		price: z.number().min(0).max(100).multipleOf(0.01),
	})),
	tags: json(z.object({ tags: z.record(z.string().regex(/^[a-z]{1,8}$/), z.int().min(0).max(9)) })),
	scores: json(z.object({ scores: z.record(z.enum(['low', 'mid', 'high']), z.int().min(0).max(9)) })),
	pair: json(z.object({ pair: z.tuple([z.string().max(10), z.int().min(0).max(9)]), step: z.int().multipleOf(7) })),
	shape: json(z.object({
		shape: z.discriminatedUnion('kind', [
			z.object({ kind: z.literal('circle'), r: z.number().min(0).max(10) }),
			z.object({ kind: z.literal('square'), side: z.int().min(1).max(9) }),
		]),
	})),
	// a tuple written by hand: prefixItems, no more items
	triple: { type: 'object', properties: { t: { type: 'array', prefixItems: [{ type: 'boolean' }, { enum: [1, 'a', null] }, { const: { k: [1] } }], items: false, minItems: 3 } },
		required: ['t'], additionalProperties: false },
};
// if/then/else and patternProperties are not checked: relaxed, the call is still served
const LOOSE = {
	type: 'object', properties: { city: { type: 'string', maxLength: 12 }, units: { enum: ['c', 'f'] } }, required: ['city', 'units'],
	additionalProperties: false, patternProperties: { '^x-': { type: 'string' } },
	if: { properties: { units: { const: 'c' } } }, then: { required: ['city'] }, else: { required: ['units'] },
};

test('the zod 4 schemas carry the keywords this file is about', () => {
	const text = JSON.stringify(SCHEMAS);
	for (const k of ['"propertyNames"', '"format":"uri"', '"format":"email"', '"format":"uuid"', '"format":"date-time"', '"multipleOf":5', '"multipleOf":0.01',
		'"prefixItems"', '"const":"circle"', '"pattern"'])
		assert.ok(text.includes(k), k);
	assert.ok(SCHEMAS.shape.properties.shape.anyOf || SCHEMAS.shape.properties.shape.oneOf, 'a union');
});

// A record's keys and values as far as a call cut short wrote them: each must fit the schema.
function checkCutRecord(text) {
	const pairs = [...text.matchAll(/"([^"\\]*)"\s*:\s*(-?\d+)\s*[,}]/g)].filter((m) => m[1] !== 'tags');
	assert.ok(pairs.length > 0, text);
	for (const [, k, v] of pairs) assert.ok(/^[a-z]{1,8}$/.test(k) && Number(v) >= 0 && Number(v) <= 9, `${k}: ${v}`);
}

// Calls each tool alone, forced, over seeds; every finished call's arguments must validate.
async function forcedCalls(name, schema, body, parse) {
	let counted = 0;
	for (const seed of [1, 2, 3]) {
		const r = await body(seed);
		const got = parse(r);
		if (!got) {
			console.log(`${name} seed ${seed}: cut by length, not counted`);
			continue;
		}
		if (got.cut) {
			// a record may run on past max_tokens: what it wrote must still fit
			checkCutRecord(got.cut);
			continue;
		}
		counted++;
		assert.equal(got.name, name);
		assert.ok(ajv.validate(schema, got.args), `${name} seed ${seed}: ${JSON.stringify(got.args)}\n${ajv.errorsText(ajv.errors)}`);
	}
	return counted;
}

for (const [name, schema] of Object.entries({ ...SCHEMAS, loose: LOOSE })) {
	ctest(`chat: a forced call of '${name}' is served and its arguments validate`, async () => {
		const counted = await forcedCalls(name, schema,
			(seed) => oai.chat.completions.create({
				messages: [{ role: 'user', content: `Call ${name}.` }], tools: [tool(name, schema)], max_tokens: MAX, seed,
				tool_choice: { type: 'function', function: { name } }, parallel_tool_calls: false,
			}),
			(r) => {
				const ch = r.choices[0];
				// a call cut by max_tokens is still a call, its arguments as far as they went
				if (ch.finish_reason === 'length') return name === 'tags' ? { cut: ch.message.tool_calls?.[0]?.function.arguments ?? ch.message.content ?? '' } : null;
				assert.equal(ch.finish_reason, 'tool_calls');
				const c = ch.message.tool_calls[0];
				return { name: c.function.name, args: JSON.parse(c.function.arguments) };
			});
		// a record keyed by any name may run on: only the bounded schemas must finish
		if (name !== 'tags') assert.ok(counted > 0, 'every call was cut by length');
	});
}

for (const name of ['contact', 'shape', 'loose']) {
	ctest(`anthropic: a forced tool_use of '${name}' is served and its input validates`, async () => {
		const schema = name === 'loose' ? LOOSE : SCHEMAS[name];
		const counted = await forcedCalls(name, schema,
			(seed) => ant.messages.create({
				model: 'stories260K', max_tokens: MAX, seed, messages: [{ role: 'user', content: `Use ${name}.` }],
				tools: [{ name, description: `The ${name} tool`, input_schema: schema }], tool_choice: { type: 'tool', name, disable_parallel_tool_use: true },
			}),
			(m) => {
				if (m.stop_reason === 'max_tokens') return null;
				assert.equal(m.stop_reason, 'tool_use');
				const u = m.content.find((b) => b.type === 'tool_use');
				return { name: u.name, args: u.input };
			});
		assert.ok(counted > 0, 'every call was cut by length');
	});
}

test('what a tool schema relaxed is named in x-lanes-ignored', async () => {
	const r = await postJSON(`${url}/v1/chat/completions`, { messages: [{ role: 'user', content: 'x' }], max_tokens: 2, tools: [tool('loose', LOOSE)] });
	assert.equal(r.status, 200, JSON.stringify(r.body));
	const named = (r.headers.get('x-lanes-ignored') || '').split(',');
	assert.ok(named.includes('schema.patternProperties') && named.includes('schema.if'), named.join(','));
	const plain = await postJSON(`${url}/v1/chat/completions`, { messages: [{ role: 'user', content: 'x' }], max_tokens: 2, tools: [tool('pair', SCHEMAS.pair)] });
	assert.equal(plain.headers.get('x-lanes-ignored'), null);
});

test('strict: true keeps the exact refusal, naming the tool and the keyword in each API', async () => {
	const msgs = [{ role: 'user', content: 'x' }];
	const e = await oai.chat.completions.create({ messages: msgs, max_tokens: 4, tools: [tool('ok', SCHEMAS.pair), { ...tool('loose', LOOSE), function: { ...tool('loose', LOOSE).function, strict: true } }] })
		.catch((x) => x);
	assert.equal(e.status, 400);
	assert.equal(e.param, 'tools[1].function.parameters');
	assert.match(e.error.message, /^tools\[1\]\.function\.parameters: unsupported keyword '(patternProperties|if)'/);
	const a = await postJSON(`${url}/v1/messages`, {
		model: 'stories260K', max_tokens: 4, messages: msgs,
		tools: [{ name: 'ok', input_schema: SCHEMAS.shape }, { name: 'loose', input_schema: LOOSE, strict: true }],
	}, { 'x-api-key': KEY });
	assert.equal(a.status, 400, JSON.stringify(a.body));
	assert.equal(a.body.type, 'error');
	assert.match(a.body.error.message, /^tools\[1\]\.input_schema: unsupported keyword '(patternProperties|if)'/);
	const r = await postJSON(`${url}/v1/responses`, { input: 'x', max_output_tokens: 4, tools: [{ type: 'function', name: 'loose', parameters: LOOSE, strict: true }] });
	assert.equal(r.status, 400, JSON.stringify(r.body));
	assert.equal(r.body.error.param, 'tools[0].parameters');
	// the same tools not marked strict are served, through each API
	for (const [p, body] of [['/v1/chat/completions', { messages: msgs, max_tokens: 2, tools: [tool('loose', LOOSE)] }],
		['/v1/messages', { model: 'stories260K', max_tokens: 2, messages: msgs, tools: [{ name: 'loose', input_schema: LOOSE }] }],
		['/v1/responses', { input: 'x', max_output_tokens: 2, tools: [{ type: 'function', name: 'loose', parameters: LOOSE, strict: false }] }]]) {
		const ok = await postJSON(`${url}${p}`, body, { 'x-api-key': KEY });
		assert.equal(ok.status, 200, `${p}: ${JSON.stringify(ok.body).slice(0, 300)}`);
	}
});

test('a malformed tool schema is still a 400, strict or not', async () => {
	const bad = { type: 'object', properties: { n: { type: 'integer', minimum: 5, maximum: 4 } } };
	const e = await oai.chat.completions.create({ messages: [{ role: 'user', content: 'x' }], max_tokens: 4, tools: [tool('bad', bad)], tool_choice: 'required' })
		.catch((x) => x);
	assert.equal(e.status, 400);
	assert.equal(e.param, 'tools[0].function.parameters');
	assert.match(e.message, /no integer lies between minimum and maximum at \/properties\/n/);
});
