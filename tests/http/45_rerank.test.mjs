// Rerank: /v1/rerank (Jina's and Cohere's shape) and /v1/score (vLLM's) on a generated
// Qwen3-Reranker-shaped decoder (F32, Qwen2's vocabulary, pooling_type rank). Each score is
// the sigmoid of the "yes" logit less the "no" logit at the end of the published prompt
// format, checked against `lanes logits` on the same ids; a document scores the same bits
// alone as among 64; results sorted, cut by top_n; bad requests and a model that is no
// reranker get 400s naming why.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { spawnSync } from 'node:child_process';
import { startServer, BIN, SHARED, TMP, KEY, URL_, postJSON } from './lib.mjs';

const model = path.join(TMP, 'reranker-test-F32.gguf');
const PREFIX = '<|im_start|>system\nJudge whether the Document meets the requirements based on the Query and the Instruct provided. Note that the answer can only be "yes" or "no".<|im_end|>\n<|im_start|>user\n';
const SUFFIX = '<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n';
const INSTRUCT = 'Given a web search query, retrieve relevant passages that answer the query';
const query = 'Which animal says meow?';
const docs = ['A cat says meow.', 'The sky is blue on a clear day.', 'Dogs bark at the mailman.', 'Meow <|im_end|> is what a kitten says.'];

let srv;
test.before(async () => {
	if (!fs.existsSync(model)) {
		const g = spawnSync(BIN, ['gen', '--shape', 'reranker-test', '--type', 'F32', '--vocab', path.join(SHARED, 'vocab/ggml-vocab-qwen2.gguf'), '-o', model], { encoding: 'utf8' });
		assert.equal(g.status, 0, g.stderr);
	}
	srv = await startServer(['-m', model, '--api-key', KEY]);
});
test.after(() => srv?.proc.kill('SIGKILL'));

async function tokenize(content, add_special, parse_special) {
	const r = await postJSON(`${srv.url}/tokenize`, { content, add_special, parse_special });
	assert.equal(r.status, 200);
	return r.body.tokens;
}

// The logits of the last position of ids, by lanes logits on the same file.
function lastLogits(ids) {
	const out = path.join(TMP, `rerank-logits-${process.pid}.f32`);
	const r = spawnSync(BIN, ['logits', '-m', model, '--ids', ids.join(','), '-o', out], { encoding: 'utf8' });
	assert.equal(r.status, 0, r.stderr);
	const b = fs.readFileSync(out);
	const all = new Float32Array(b.buffer, b.byteOffset, b.length / 4);
	const nv = all.length / ids.length;
	return all.slice(all.length - nv);
}

test('scores are the yes/no logits of the published prompt format, sorted, with the documents', async () => {
	const r = await postJSON(`${srv.url}/v1/rerank`, { model: 'reranker', query, documents: docs.map((text, i) => (i % 2 ? { text } : text)) });
	assert.equal(r.status, 200, JSON.stringify(r.body));
	assert.equal(r.body.object, 'list');
	assert.equal(r.body.results.length, docs.length);
	const yes = (await tokenize('yes', false, false))[0], no = (await tokenize('no', false, false))[0];
	let tokens = 0;
	for (const res of r.body.results) {
		const doc = docs[res.index];
		assert.deepEqual(res.document, { text: doc });
		// the client's text is never read as control tokens: the fourth document's <|im_end|> stays text
		const ids = [...(await tokenize(PREFIX, true, true)), ...(await tokenize(`<Instruct>: ${INSTRUCT}\n<Query>: ${query}\n<Document>: ${doc}`, false, false)), ...(await tokenize(SUFFIX, false, true))];
		tokens += ids.length;
		const lg = lastLogits(ids);
		const want = 1 / (1 + Math.exp(-(lg[yes] - lg[no])));
		assert.ok(Math.abs(res.relevance_score - want) < 2e-5, `document ${res.index}: ${res.relevance_score} against ${want}`);
	}
	assert.equal(r.body.usage.prompt_tokens, tokens);
	for (let i = 1; i < r.body.results.length; i++) assert.ok(r.body.results[i - 1].relevance_score >= r.body.results[i].relevance_score, 'sorted');
	const top = await postJSON(`${srv.url}/rerank`, { query, documents: docs, top_n: 2, return_documents: false });
	assert.equal(top.status, 200);
	assert.deepEqual(top.body.results, r.body.results.slice(0, 2).map(({ index, relevance_score }) => ({ index, relevance_score })));
});

test('a document scores the same bits alone and among 64', async () => {
	const many = Array.from({ length: 64 }, (_, i) => `Document ${i}: ${['cats', 'dogs', 'birds', 'fish'][i % 4]} are ${i % 3 ? 'small' : 'loud'} animals.`);
	const all = await postJSON(`${srv.url}/v1/rerank`, { query, documents: many });
	assert.equal(all.status, 200, JSON.stringify(all.body));
	const byIndex = new Map(all.body.results.map((x) => [x.index, x.relevance_score]));
	for (const i of [0, 17, 42, 63]) {
		const one = await postJSON(`${srv.url}/v1/rerank`, { query, documents: [many[i]] });
		assert.equal(one.body.results[0].relevance_score, byIndex.get(i), `document ${i}`);
	}
	const sc = await postJSON(`${srv.url}/v1/score`, { text_1: query, text_2: many.slice(0, 3) });
	assert.equal(sc.status, 200);
	assert.deepEqual(sc.body.data.map((d) => [d.index, d.object, d.score]), [0, 1, 2].map((i) => [i, 'score', byIndex.get(i)]));
});

test('bad requests and a model that is no reranker get 400s that say why', async () => {
	const bad = async (body, field) => {
		const r = await postJSON(`${srv.url}/v1/rerank`, body);
		assert.equal(r.status, 400, JSON.stringify(r.body));
		if (field) assert.equal(r.body.error.param, field, JSON.stringify(r.body));
	};
	await bad({ documents: docs }, 'query');
	await bad({ query, documents: [] }, 'documents');
	await bad({ query, documents: [3] }, 'documents');
	await bad({ query, documents: docs, top_n: 0 }, 'top_n');
	await bad({ query: 'cat '.repeat(2000), documents: docs }, 'query'); // past the window before any document
	await bad({ query, documents: ['ok', 'cat '.repeat(2000)] }, 'documents[1]');
	await bad({ query, documents: docs, bogus: 1 });
	const sc = await postJSON(`${srv.url}/v1/score`, { text_1: [query, query], text_2: docs });
	assert.equal(sc.status, 400);
	if (URL_) {
		const r = await postJSON(`${URL_}/v1/rerank`, { query, documents: docs });
		assert.equal(r.status, 400);
		assert.match(r.body.error.message, /not a reranker/);
	}
});
