// Learning the MTP head while serving (a grant of kind "mtp") on stories260K, which ships with no
// head: grants a server cannot honour are refused naming the field; with --draft mtp the grant
// starts a head from the model's last block, examples of the model's own text train it step by
// step, and from each commit on the lanes draft with it. Requests beside and after the training
// keep their tokens bit for bit ("draft": false's), the trained head's drafts are accepted above
// a floor, and the saved head drafts the same way in a fresh server (--draft-head).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { STORIES, TMP, startServer, getJSON, postJSON, postSSE, sleep, metric } from './lib.mjs';

const stories = fs.readFileSync('tests/data/learn/stories-train.jsonl', 'utf8').trim().split('\n').map((l) => JSON.parse(l));
const DIR = path.join(TMP, 'learn-head');
// first drafts accepted: measured 58-61% (200 examples of the model's own completions); the floor leaves room
const ACCEPT_FLOOR = 0.4;
// greedy continuations the acceptance is measured on
const GREEDY = ['Once upon a time', 'Tom and Sue went to the park.', 'The little dog', 'Lily wanted'];
let S, trained = 0;

before(async () => {
	S = await startServer(['-m', STORIES, '--lanes', '4', '--draft', 'mtp', '--adapters-dir', DIR]);
});

after(() => {
	if (S && S.proc.exitCode === null) S.proc.kill('SIGKILL');
});

const grantOf = async (id) => (await getJSON(`${S.url}/learn/grants`)).body.grants.find((g) => g.id === id);
const complete = (url, seed, extra = {}) =>
	postJSON(`${url}/v1/completions`, { prompt: 'One sunny day,', max_tokens: 48, temperature: seed % 2 ? 0.8 : 0, seed, ...extra });
// the head's first drafts: proposed and accepted (the further ones chain on the head's own state)
const drafts = async (url) => [
	(await metric(url, 'lanes_draft_position_tokens_total{proposer="mtp",position="1"}')) || 0,
	(await metric(url, 'lanes_draft_position_accepted_total{proposer="mtp",position="1"}')) || 0,
];

// Waits until grant id has trained tokens tokens; its ledger entry.
async function waitTrained(id, tokens) {
	for (let i = 0; i < 6000; i++) {
		const g = await grantOf(id);
		if (g && (g.state !== 'active' || g.tokens_used >= tokens)) return g;
		await sleep(10);
	}
	return grantOf(id);
}

async function waitGrant(id) {
	for (let i = 0; i < 3000; i++) {
		const g = await grantOf(id);
		if (g && g.state !== 'active') return g;
		await sleep(10);
	}
	return grantOf(id);
}

test('a grant of kind mtp needs a server that drafts with a head, and names what it refuses', async () => {
	const A = await startServer(['-m', STORIES]);
	try {
		const r = await postJSON(`${A.url}/learn/grants`, { kind: 'mtp', max_steps: 1, max_tokens: 100 });
		assert.equal(r.status, 400);
		assert.equal(r.body.error.param, 'kind');
		assert.match(r.body.error.message, /--draft mtp/);
	} finally {
		A.proc.kill('SIGKILL');
	}
	const bad = [
		[{ kind: 'head', max_steps: 1, max_tokens: 100 }, 'kind', /"lora".*"mtp"/],
		[{ kind: 'mtp', max_steps: 1, max_tokens: 100, rank: 4 }, 'rank', /LoRA/],
		[{ kind: 'mtp', adapter: 'other', max_steps: 1, max_tokens: 100, rank: 2 }, 'adapter', /head, named 'mtp'/],
		[{ adapter: 'mtp', max_steps: 1, max_tokens: 100 }, 'adapter', /kind mtp/],
	];
	for (const [body, param, msg] of bad) {
		const r = await postJSON(`${S.url}/learn/grants`, body);
		assert.equal(r.status, 400, JSON.stringify(body));
		assert.equal(r.body.error.param, param, JSON.stringify(r.body));
		assert.match(r.body.error.message, msg);
	}
	assert.deepEqual((await getJSON(`${S.url}/learn/grants`)).body.grants, [], 'no grant was made');
});

test('the head learns from the model\'s own text; drafting with it never changes a token', async () => {
	const alone = [];
	for (let i = 0; i < 4; i++) alone.push((await complete(S.url, 10 + i, { draft: false })).body.choices[0].token_sha);
	for (let i = 0; i < 4; i++) assert.equal((await complete(S.url, 10 + i)).body.choices[0].token_sha, alone[i], 'no head yet');
	assert.equal((await drafts(S.url))[0], 0, 'no head drafts before a head exists');
	// the model's own completions: what the head is asked to predict when it drafts
	const own = [];
	for (let i = 0; i < 48; i++) {
		const prompt = stories[i].completion.split(' ').slice(0, 3).join(' ');
		const c = await postJSON(`${S.url}/v1/completions`, { prompt, max_tokens: 96, temperature: i % 2 ? 0.7 : 0, seed: i, draft: false });
		own.push({ prompt, completion: c.body.choices[0].text });
	}
	// steps take what is queued, so a step's batch depends on timing: the grant runs until
	// every example has trained, however they were batched
	const compute0 = await metric(S.url, 'lanes_memory_bytes{part="compute"}');
	const r = await postJSON(`${S.url}/learn/grants`, { kind: 'mtp', max_steps: 10000, max_tokens: 1e6, lr: 0.005 });
	assert.equal(r.status, 200, JSON.stringify(r.body));
	assert.equal(r.body.kind, 'mtp');
	assert.equal(r.body.adapter, 'mtp');
	assert.equal(r.body.created, true);
	assert.equal(r.body.version, 0);
	const id = r.body.id;
	const again = await postJSON(`${S.url}/learn/grants`, { kind: 'mtp', max_steps: 1, max_tokens: 100 });
	assert.equal(again.status, 409);
	// streams beside the training, drafting with each version as it commits
	const streams = [0, 1, 2, 3].map((i) => {
		let finals = 0;
		return postSSE(`${S.url}/v1/completions`, { prompt: 'One sunny day,', max_tokens: 48, temperature: i % 2 ? 0.8 : 0, seed: 10 + i, stream: true }, {}, (ev) => {
			if (ev.data?.choices?.[0]?.finish_reason) finals++;
		}).then((x) => ({ evs: x.events, finals }));
	});
	let total = 0;
	for (let i = 0; i < 200; i++) {
		const ex = await postJSON(`${S.url}/learn/examples`, { grant: id, ...own[i % own.length] });
		assert.equal(ex.status, 202, JSON.stringify(ex.body));
		total += ex.body.tokens;
		if (i % 50 === 0) for (let k = 0; k < 4; k++) assert.equal((await complete(S.url, 10 + k)).body.choices[0].token_sha, alone[k], 'beside training');
	}
	for (const [i, d] of (await Promise.all(streams)).entries()) {
		assert.equal(d.finals, 1, `stream ${i}: one finish`);
		const last = d.evs.filter((e) => e.data?.choices?.[0]?.token_sha).pop();
		assert.equal(last.data.choices[0].token_sha, alone[i], `stream ${i} beside training`);
	}
	const g = await waitTrained(id, total);
	assert.equal(g.tokens_used, total, 'every example trained');
	assert.equal(g.queued, 0);
	assert.ok(g.steps_done >= 50, `${g.steps_done} steps of at most 4 examples`);
	assert.equal(g.version, g.steps_done, 'a version per step');
	assert.ok(Number.isFinite(g.last_loss) && g.last_loss > 0);
	const lg = (await getJSON(`${S.url}/learn/grants`)).body;
	assert.ok(lg.optimizer_bytes > 0 && lg.committed_steps === g.steps_done);
	const end = await fetch(`${S.url}/learn/grants/${id}`, { method: 'DELETE' });
	assert.equal(end.status, 202);
	assert.equal((await waitGrant(id)).state, 'revoked');
	trained = g.version;
	// the served version's weights (about 54k f32 parameters) count in the compute memory
	const compute1 = await metric(S.url, 'lanes_memory_bytes{part="compute"}');
	assert.ok(compute1 - compute0 >= 200000, `compute memory ${compute0} -> ${compute1}`);
	// the trained head drafts, is accepted, and changes no token
	const [p0, a0] = await drafts(S.url);
	for (let i = 0; i < 4; i++) assert.equal((await complete(S.url, 10 + i)).body.choices[0].token_sha, alone[i], 'after training');
	for (const prompt of GREEDY) {
		const a = await postJSON(`${S.url}/v1/completions`, { prompt, max_tokens: 64, temperature: 0 });
		const b = await postJSON(`${S.url}/v1/completions`, { prompt, max_tokens: 64, temperature: 0, draft: false });
		assert.equal(a.body.choices[0].token_sha, b.body.choices[0].token_sha, prompt);
	}
	const [p1, a1] = await drafts(S.url);
	assert.ok(p1 - p0 >= 40, `the head proposed ${p1 - p0} drafts`);
	const rate = (a1 - a0) / (p1 - p0);
	assert.ok(rate >= ACCEPT_FLOOR, `the trained head's drafts were accepted ${(100 * rate).toFixed(1)}% of the time`);
	// the next grant goes on from the trained head
	const more = await postJSON(`${S.url}/learn/grants`, { kind: 'mtp', max_steps: 1, max_tokens: 1e6 });
	assert.equal(more.status, 200);
	assert.equal(more.body.created, false);
	assert.equal(more.body.version, trained);
	assert.ok(Math.abs(more.body.lr - 0.02 / Math.sqrt(64)) < 1e-7, `the head's default rate for a width of 64: ${more.body.lr}`);
	const rv = await fetch(`${S.url}/learn/grants/${more.body.id}`, { method: 'DELETE' });
	assert.equal(rv.status, 202);
});

test('the saved head drafts in a fresh server as it did here', async () => {
	const r = await postJSON(`${S.url}/v1/adapters/mtp/save`, { file: 'head.gguf' });
	assert.equal(r.status, 200, JSON.stringify(r.body));
	assert.equal(r.body.version, trained);
	const file = path.join(DIR, 'head.gguf');
	assert.equal(r.body.bytes, fs.statSync(file).size);
	const F = await startServer(['-m', STORIES, '--draft-head', file, '--learn-share', '0']);
	try {
		for (const seed of [10, 11, 12, 13]) {
			const a = (await complete(S.url, seed)).body.choices[0].token_sha;
			assert.equal((await complete(F.url, seed)).body.choices[0].token_sha, a);
		}
		const [p0, a0] = await drafts(F.url);
		for (const prompt of GREEDY) await postJSON(`${F.url}/v1/completions`, { prompt, max_tokens: 64, temperature: 0 });
		const [p1, a1] = await drafts(F.url);
		assert.ok(p1 > p0 && (a1 - a0) / (p1 - p0) >= ACCEPT_FLOOR, `the loaded head: ${a1 - a0} of ${p1 - p0} accepted`);
	} finally {
		F.proc.kill('SIGKILL');
	}
});
