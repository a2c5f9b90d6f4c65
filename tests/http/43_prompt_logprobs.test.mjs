// Prompt log-probabilities from the prompt pass itself: completions' echo with logprobs (OpenAI's
// legacy shape, the first token null) and vLLM's prompt_logprobs on completions and chat equal the
// log-softmax of `lanes logits` on the same ids — streamed too, again when the prompt is in the
// prefix cache (such a request reads none), and with the prompt cut into pieces of 2.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { startServer, mainServer, postJSON, readSSE, BIN, STORIES, KEY, TMP } from './lib.mjs';

let url, pieces;
before(async () => {
	url = (await mainServer()).url;
	pieces = await startServer(['-m', STORIES, '--api-key', KEY, '--piece', '2', '--lanes', '1']);
});
after(() => pieces && pieces.proc.kill('SIGKILL'));

const auth = { Authorization: `Bearer ${KEY}` };
const post = (u, p, body) => postJSON(u + p, body, auth);

async function tokenize(body) {
	const r = await post(url, '/tokenize', body);
	assert.equal(r.status, 200);
	return r.body.tokens;
}

// Log-softmax of `lanes logits` on ids, as the lanes compute it (float sums of a double total):
// per position p >= 1, the prompt token's log-probability, its rank, and every token's.
function expected(ids) {
	const out = path.join(TMP, `logits-${ids.length}-${ids[1]}.f32`);
	const r = spawnSync(BIN, ['logits', '-m', STORIES, '--ids', ids.join(','), '-o', out], { stdio: 'pipe' });
	assert.equal(r.status, 0, r.stderr.toString());
	const b = fs.readFileSync(out);
	const all = new Float32Array(b.buffer, b.byteOffset, b.length / 4);
	const V = all.length / ids.length;
	const rows = [null];
	for (let p = 0; p + 1 < ids.length; p++) {
		const l = all.subarray(p * V, (p + 1) * V);
		let mx = -Infinity;
		for (const x of l) if (x > mx) mx = x;
		let sum = 0;
		for (const x of l) sum += Math.exp(x - mx);
		const lse = Math.fround(mx + Math.fround(Math.log(sum)));
		const lp = Array.from(l, (x) => Math.fround(x - lse));
		const tok = ids[p + 1];
		rows.push({ lp: lp[tok], rank: 1 + lp.filter((v) => v > lp[tok]).length, all: lp });
	}
	return rows;
}

// the same float arithmetic on the same logits: equal to the bit (Node's exp and log agree with
// the C library's here; a double's last bit would have to flip a float's rounding to differ)
const same = (a, b, what) => assert.equal(a, b, what);

function checkLegacy(lp, ids, want, k) {
	assert.equal(lp.token_logprobs[0], null);
	assert.equal(lp.top_logprobs[0], null);
	for (let p = 1; p < ids.length; p++) {
		same(lp.token_logprobs[p], want[p].lp, `token ${p}`);
		const top = Object.values(lp.top_logprobs[p]);
		assert.ok(top.length <= k && top.length >= 1);
		const best = [...want[p].all].sort((a, b) => b - a);
		same(top[0], best[0], `top of token ${p}`);
	}
	// byte offsets over the listed tokens' texts, the generated ones after the prompt's
	for (let p = 1; p < lp.text_offset.length; p++) assert.equal(lp.text_offset[p], lp.text_offset[p - 1] + Buffer.byteLength(lp.tokens[p - 1]));
}

const prompt = 'Once upon a time there was a little girl named Lily';

test('completions: echo with logprobs gives the prompt\'s entries (first null), equal to lanes logits', async () => {
	const ids = await tokenize({ content: prompt, add_special: true });
	const want = expected(ids);
	const body = { prompt, echo: true, logprobs: 2, max_tokens: 4, temperature: 0 };
	const r = await post(url, '/v1/completions', body);
	assert.equal(r.status, 200, JSON.stringify(r.body));
	const lp = r.body.choices[0].logprobs;
	assert.equal(lp.tokens.length, ids.length + 4);
	assert.equal(lp.token_logprobs.length, ids.length + 4);
	checkLegacy(lp, ids, want, 2);
	// the generated entries follow, as without echo
	const plain = (await post(url, '/v1/completions', { ...body, echo: false })).body.choices[0].logprobs;
	assert.deepEqual(lp.token_logprobs.slice(ids.length), plain.token_logprobs);
	assert.deepEqual(lp.tokens.slice(ids.length), plain.tokens);
	// the prompt is in the prefix cache now: it is computed again, to the same bits
	const again = await post(url, '/v1/completions', body);
	assert.deepEqual(again.body.choices[0].logprobs, lp);
	assert.equal(again.body.usage.prompt_tokens_details.cached_tokens, 0);
	// cut into pieces of 2 on another server: the same bits
	const p2 = await post(pieces.url, '/v1/completions', body);
	assert.deepEqual(p2.body.choices[0].logprobs, lp);
	// streamed: the first chunk carries the echo and the prompt's entries
	const res = await fetch(`${url}/v1/completions`, { method: 'POST', headers: { ...auth, 'Content-Type': 'application/json' },
		body: JSON.stringify({ ...body, stream: true }) });
	const ev = (await readSSE(res)).filter((e) => typeof e.data === 'object');
	const first = ev[0].data.choices[0];
	assert.equal(first.text, prompt);
	assert.deepEqual(first.logprobs.token_logprobs, lp.token_logprobs.slice(0, ids.length));
	assert.deepEqual(first.logprobs.tokens, lp.tokens.slice(0, ids.length));
});

test('vLLM prompt_logprobs on completions and chat: the prompt token with its rank and the top k', async () => {
	const ids = await tokenize({ content: prompt, add_special: true });
	const want = expected(ids);
	const r = await post(url, '/v1/completions', { prompt, prompt_logprobs: 3, max_tokens: 2, temperature: 0 });
	assert.equal(r.status, 200, JSON.stringify(r.body));
	const pl = r.body.choices[0].prompt_logprobs;
	assert.equal(pl.length, ids.length);
	assert.equal(pl[0], null);
	for (let p = 1; p < ids.length; p++) {
		const e = pl[p][String(ids[p])];
		same(e.logprob, want[p].lp, `token ${p}`);
		assert.equal(e.rank, want[p].rank);
		assert.equal(typeof e.decoded_token, 'string');
		const n = Object.keys(pl[p]).length;
		assert.ok(n === 3 || n === 4, `${n} entries`);
	}
	// chat: the rendered prompt's ids, beside the choices
	const messages = [{ role: 'user', content: prompt }];
	const cids = await tokenize({ messages });
	const cwant = expected(cids);
	const c = await post(url, '/v1/chat/completions', { messages, prompt_logprobs: 0, max_tokens: 2, temperature: 0 });
	assert.equal(c.status, 200, JSON.stringify(c.body));
	const cl = c.body.prompt_logprobs;
	assert.equal(cl.length, cids.length);
	for (let p = 1; p < cids.length; p++) same(cl[p][String(cids[p])].logprob, cwant[p].lp, `chat token ${p}`);
	// refused: with stream (as vLLM), out of range, not an integer
	for (const [body, re] of [
		[{ prompt_logprobs: 1, stream: true }, /not available when stream/],
		[{ prompt_logprobs: 21 }, /0\.\.20/],
		[{ prompt_logprobs: 'x' }, /0\.\.20/],
	]) {
		const b = await post(url, '/v1/completions', { prompt, max_tokens: 1, ...body });
		assert.equal(b.status, 400);
		assert.equal(b.body.error.param, 'prompt_logprobs');
		assert.match(b.body.error.message, re);
	}
});
