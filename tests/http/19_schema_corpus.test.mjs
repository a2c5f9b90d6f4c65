// The JSON Schema corpus (tests/corpus/schema) checked by a real validator: every document a
// file calls valid passes ajv and every one it calls invalid fails it, so the grammar tests
// that accept and refuse the same documents rest on a trustworthy corpus. No server needed.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readdirSync, readFileSync } from 'node:fs';
import Ajv2020 from 'ajv/dist/2020.js';
import addFormats from 'ajv-formats';

const dir = new URL('../corpus/schema/', import.meta.url);
const files = readdirSync(dir).filter((f) => f.endsWith('.json')).sort();

test('the corpus holds the schema families the grammar tests rely on', () => {
	assert.ok(files.length >= 11, `${files.length} corpus files`);
});

for (const f of files) {
	test(`corpus ${f}: valid documents pass ajv, invalid ones fail`, () => {
		const { schema, valid, invalid } = JSON.parse(readFileSync(new URL(f, dir), 'utf8'));
		assert.ok(valid.length > 0 && invalid.length > 0, 'both lists are non-empty');
		const ajv = new Ajv2020({ strict: true, allowUnionTypes: true, allErrors: true });
		addFormats(ajv);
		const check = ajv.compile(schema);
		for (const doc of valid) assert.ok(check(doc), `${JSON.stringify(doc)}: ${ajv.errorsText(check.errors)}`);
		for (const doc of invalid) assert.equal(check(doc), false, `${JSON.stringify(doc)} should be invalid`);
	});
}
