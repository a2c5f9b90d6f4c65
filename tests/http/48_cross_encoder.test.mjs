// Cross-encoder rerank: /v1/rerank (Jina's and Cohere's shape), /rerank and /v1/score (vLLM's)
// on a generated BERT cross-encoder (`lanes gen --shape bert-rerank-test`, its own WordPiece
// vocabulary, the classifier head). The server cuts prompts into pieces of 3 tokens, which an
// encoder's sequence ignores: it runs whole in one round, several to a round; a document scores
// the same bits alone and among 64; the usage counts [CLS] query [SEP] document [SEP]; generation, bad
// requests and an encoder without a classifier get 400s that say why. The same file with
// XLM-RoBERTa's vocabulary kind (Unigram, one token type: bge-reranker's layout) frames a pair
// as <s> query </s></s> document </s>.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { spawnSync } from 'node:child_process';
import { startServer, BIN, TMP, KEY, postJSON, metric } from './lib.mjs';

const model = path.join(TMP, 'bert-rerank-test-F32.gguf');
const bare = path.join(TMP, 'bert-no-classifier-F32.gguf');
const xlmr = path.join(TMP, 'xlmr-rerank-test-F32.gguf');
const query = 'Which animal says meow?';
const docs = ['A cat says meow.', 'The sky is blue on a clear day.', 'Dogs bark at the mail man.', 'A kitten [SEP] says meow.'];

let srv;
test.before(async () => {
	if (!fs.existsSync(model)) {
		const g = spawnSync(BIN, ['gen', '--shape', 'bert-rerank-test', '--type', 'F32', '-o', model], { encoding: 'utf8' });
		assert.equal(g.status, 0, g.stderr);
	}
	srv = await startServer(['-m', model, '--api-key', KEY, '--piece', '3']);
});
test.after(() => srv?.proc.kill('SIGKILL'));

async function count(content) {
	const r = await postJSON(`${srv.url}/tokenize`, { content, add_special: false, parse_special: false });
	assert.equal(r.status, 200);
	return r.body.tokens.length;
}

test('the Jina/Cohere shape: sorted results with index, relevance_score and the documents, usage of the framed pairs', async () => {
	const r = await postJSON(`${srv.url}/v1/rerank`, { model: 'bert', query, documents: docs.map((text, i) => (i % 2 ? { text } : text)) });
	assert.equal(r.status, 200, JSON.stringify(r.body));
	assert.equal(r.body.object, 'list');
	assert.equal(r.body.results.length, docs.length);
	assert.deepEqual(r.body.results.map((x) => x.index).sort(), [0, 1, 2, 3]);
	for (const res of r.body.results) {
		assert.deepEqual(res.document, { text: docs[res.index] });
		assert.ok(res.relevance_score > 0 && res.relevance_score < 1, `a sigmoid: ${res.relevance_score}`);
	}
	for (let i = 1; i < r.body.results.length; i++) assert.ok(r.body.results[i - 1].relevance_score >= r.body.results[i].relevance_score, 'sorted');
	assert.equal(new Set(r.body.results.map((x) => x.relevance_score)).size, docs.length, 'different documents score differently');
	// [CLS] query [SEP] document [SEP]: the texts' own tokens and three more per pair
	let tokens = 0;
	for (const d of docs) tokens += (await count(query)) + (await count(d)) + 3;
	assert.equal(r.body.usage.prompt_tokens, tokens);
	const top = await postJSON(`${srv.url}/rerank`, { query, documents: docs, top_n: 2, return_documents: false });
	assert.equal(top.status, 200);
	assert.deepEqual(top.body.results, r.body.results.slice(0, 2).map(({ index, relevance_score }) => ({ index, relevance_score })));
	// the pair is ordered: the query's part and the document's part are not interchangeable
	const swapped = await postJSON(`${srv.url}/v1/rerank`, { query: docs[0], documents: [query] });
	assert.equal(swapped.status, 200);
	assert.notEqual(swapped.body.results[0].relevance_score, r.body.results.find((x) => x.index === 0).relevance_score);
});

test('a document scores the same bits alone and among 64, and /v1/score agrees', async () => {
	const many = Array.from({ length: 64 }, (_, i) => `Document ${i}: ${['cats', 'dogs', 'birds', 'fish'][i % 4]} are ${i % 3 ? 'small' : 'loud'} animals${' and play'.repeat(i % 9)}.`);
	const rounds = async () => metric(srv.url, 'lanes_round_seconds_count');
	const r0 = await rounds();
	const all = await postJSON(`${srv.url}/v1/rerank`, { query, documents: many });
	assert.equal(all.status, 200, JSON.stringify(all.body));
	const batched = (await rounds()) - r0;
	assert.ok(batched < 32, `64 documents in ${batched} rounds: several sequences share a round`);
	const byIndex = new Map(all.body.results.map((x) => [x.index, x.relevance_score]));
	for (const i of [0, 17, 42, 63]) {
		const one = await postJSON(`${srv.url}/v1/rerank`, { query, documents: [many[i]] });
		assert.equal(one.status, 200);
		assert.equal(one.body.results[0].relevance_score, byIndex.get(i), `document ${i}`);
	}
	const sc = await postJSON(`${srv.url}/v1/score`, { model: 'bert', text_1: [query], text_2: many.slice(0, 3) });
	assert.equal(sc.status, 200, JSON.stringify(sc.body));
	assert.deepEqual(sc.body.data.map((d) => [d.index, d.object, d.score]), [0, 1, 2].map((i) => [i, 'score', byIndex.get(i)]));
	assert.equal(sc.body.usage.prompt_tokens, sc.body.usage.total_tokens);
});

test('generation, bad requests and absurd sizes get 400s that say why', async () => {
	const bad = async (url, body, field, re) => {
		const r = await postJSON(`${srv.url}${url}`, body);
		assert.equal(r.status, 400, JSON.stringify(r.body));
		if (field) assert.equal(r.body.error.param, field, JSON.stringify(r.body));
		if (re) assert.match(r.body.error.message, re);
	};
	await bad('/v1/chat/completions', { messages: [{ role: 'user', content: 'hi' }] }, null, /encoder: it generates no text/);
	await bad('/v1/completions', { prompt: 'hi' }, null, /encoder/);
	await bad('/v1/rerank', { documents: docs }, 'query');
	await bad('/v1/rerank', { query, documents: [] }, 'documents');
	await bad('/v1/rerank', { query, documents: [{ txt: 'x' }] }, 'documents');
	await bad('/v1/rerank', { query, documents: docs, top_n: -3 }, 'top_n');
	await bad('/v1/rerank', { query, documents: docs, instruction: 'judge' }, 'instruction', /cross-encoder/);
	// past the 512 learned positions: the query before any document, then one document
	await bad('/v1/rerank', { query: 'cat '.repeat(600), documents: docs }, 'query', /512/);
	await bad('/v1/rerank', { query, documents: ['ok', 'cat '.repeat(600)] }, 'documents[1]', /512/);
	await bad('/v1/rerank', { query, documents: Array(100000).fill('x') }, 'documents');
	await bad('/v1/score', { text_1: [query, query], text_2: docs }, 'text_1');
	await bad('/v1/rerank', { query, documents: docs, bogus: 1 });
	const raw = await fetch(`${srv.url}/v1/rerank`, { method: 'POST', headers: { 'content-type': 'application/json', authorization: `Bearer ${KEY}` }, body: '{"query": "a", "documents": [' });
	assert.equal(raw.status, 400);
	// the server still serves after them
	const ok = await postJSON(`${srv.url}/v1/rerank`, { query, documents: docs });
	assert.equal(ok.status, 200);
});

test('an encoder without a classifier (cls.output) is refused for rerank by name', async () => {
	// the same file with the classifier's output renamed in place (same lengths: offsets hold)
	const b = fs.readFileSync(model);
	for (const [from, to] of [['cls.output.weight', 'cls.xxxxxx.weight'], ['cls.output.bias', 'cls.xxxxxx.bias']]) {
		const at = b.indexOf(Buffer.from(from));
		assert.ok(at > 0, from);
		b.write(to, at);
	}
	fs.writeFileSync(bare, b);
	const s = await startServer(['-m', bare, '--api-key', KEY]);
	try {
		const r = await postJSON(`${s.url}/v1/rerank`, { query, documents: docs });
		assert.equal(r.status, 400, JSON.stringify(r.body));
		assert.match(r.body.error.message, /no classifier \(cls\.output\)/);
		const sc = await postJSON(`${s.url}/v1/score`, { text_1: query, text_2: docs });
		assert.equal(sc.status, 400);
		// it still embeds
		const e = await postJSON(`${s.url}/v1/embeddings`, { input: 'a cat' });
		assert.equal(e.status, 200, JSON.stringify(e.body));
	} finally {
		s.proc.kill('SIGKILL');
	}
});

test('XLM-RoBERTa\'s layout: <s> query </s></s> document </s>, the same bits alone and among others', async () => {
	if (!fs.existsSync(xlmr)) {
		const g = spawnSync(BIN, ['gen', '--shape', 'xlmr-rerank-test', '--type', 'F32', '-o', xlmr], { encoding: 'utf8' });
		assert.equal(g.status, 0, g.stderr);
	}
	const s = await startServer(['-m', xlmr, '--api-key', KEY, '--piece', '5']);
	try {
		const r = await postJSON(`${s.url}/v1/rerank`, { query, documents: docs });
		assert.equal(r.status, 200, JSON.stringify(r.body));
		let tokens = 0;
		for (const d of docs) {
			const n = async (content) => (await postJSON(`${s.url}/tokenize`, { content, add_special: false, parse_special: false })).body.tokens.length;
			tokens += (await n(query)) + (await n(d)) + 4;
		}
		assert.equal(r.body.usage.prompt_tokens, tokens);
		const one = await postJSON(`${s.url}/v1/rerank`, { query, documents: [docs[2]] });
		assert.equal(one.body.results[0].relevance_score, r.body.results.find((x) => x.index === 2).relevance_score);
		assert.equal(new Set(r.body.results.map((x) => x.relevance_score)).size, docs.length);
	} finally {
		s.proc.kill('SIGKILL');
	}
});
