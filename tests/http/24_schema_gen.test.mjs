// Structured outputs always parse: for every schema of tests/corpus/schema, 50 seeded random
// generations (two requests of 25 choices) on stories260K and on a random-weight model with a
// 32,000-token vocabulary are valid against the schema under ajv, a real validator.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import Ajv from 'ajv/dist/2020.js';
import addFormats from 'ajv-formats';
import { startServer, postJSON, STORIES, SHARED, KEY, TMP } from './lib.mjs';

const dir = path.resolve('tests/corpus/schema');
const corpus = fs.readdirSync(dir).filter((f) => f.endsWith('.json')).sort()
	.map((f) => ({ name: f.replace(/\.json$/, ''), ...JSON.parse(fs.readFileSync(path.join(dir, f), 'utf8')) }));
const models = [STORIES, path.join(SHARED, 'models/ref-spm-Q4_0.gguf')];
const servers = [];
// ChatML turns, as a chat model's: these models have no template (plain text is their fallback),
// and the share of documents that finish within max_tokens below is set for this prompt
const chatml = path.join(TMP, 'schema-gen-chatml.jinja');
fs.writeFileSync(chatml, "{% for m in messages %}{{ '<|im_start|>' + m.role + '\\n' + m.content + '<|im_end|>\\n' }}{% endfor %}" +
	"{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}");
before(async () => {
	for (const m of models) servers.push(await startServer(['-m', m, '--api-key', KEY, '--lanes', '8', '--ctx', '16384', '--chat-template', chatml]));
});
after(() => servers.forEach((s) => s.proc.kill('SIGKILL')));

// Schemas whose documents may grow without bound (any number of extra keys, an untyped array,
// a `+` in a pattern, recursion): a story model often fills them past max_tokens, so a cut is no failure
// there; every document that ends must still be valid.
const OPEN = new Set(['additional', 'arrays', 'pattern', 'tree', 'definitions']);

for (const { name, schema } of corpus) {
	test(`${name}: 50 generations per model validate`, async () => {
		const ajv = new Ajv({ strict: false, allErrors: true });
		addFormats(ajv);
		const validate = ajv.compile(schema);
		for (const [mi, s] of servers.entries()) {
			let stopped = 0;
			for (const seed of [1, 2]) {
				const r = await postJSON(`${s.url}/v1/chat/completions`, {
					messages: [{ role: 'user', content: `Reply with a JSON document (${name}).` }],
					response_format: { type: 'json_schema', json_schema: { name, schema, strict: true } },
					n: 25, seed, temperature: 1, max_tokens: 200,
				});
				assert.equal(r.status, 200, JSON.stringify(r.body));
				for (const c of r.body.choices) {
					const text = c.message.content;
					if (c.finish_reason === 'length') continue; // cut by max_tokens: counted below
					assert.equal(c.finish_reason, 'stop');
					let doc;
					assert.doesNotThrow(() => (doc = JSON.parse(text)), `${path.basename(models[mi])} seed ${seed} choice ${c.index}: ${text}`);
					assert.ok(validate(doc), `${path.basename(models[mi])} seed ${seed} choice ${c.index}: ${text}\n${ajv.errorsText(validate.errors)}`);
					stopped++;
				}
			}
			// a document may run past max_tokens only rarely: the grammars bound what they can
			if (!OPEN.has(name)) assert.ok(stopped >= 45, `${path.basename(models[mi])}: ${stopped} of 50 documents finished`);
			else console.log(`${name} on ${path.basename(models[mi])}: ${stopped} of 50 documents finished, all valid`);
		}
	});
}
