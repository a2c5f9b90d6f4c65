// Learning while serving over HTTP, on one stories260K server: the ledger moves only when
// something changed (a 512-token completion publishes nothing); bad grants and examples get
// OpenAI's error shape and the server goes on; a grant makes its adapter, its examples train
// it step by step (each a new version in /v1/adapters), its caps end it; requests beside the
// training keep their tokens bit for bit and every stream ends once; revocation and expiry stop
// a grant with no partial commit; the saved adapter gives the trained server's tokens and
// logprobs in a fresh server. On a generated tinyllama-shaped model, GET /learn/grants answers
// while a long prompt fills (shown by the order of events).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { STORIES, TMP, KEY, startServer, getJSON, postJSON, postSSE, sleep, metric, shapeModel, assertWaitsSettled } from './lib.mjs';

const auth = { Authorization: `Bearer ${KEY}` };
const stories = fs.readFileSync('tests/data/learn/stories-train.jsonl', 'utf8').trim().split('\n').map((l) => JSON.parse(l));
const ADAPTERS = path.join(TMP, 'learning-adapters');
let S;

before(async () => {
	S = await startServer(['-m', STORIES, '--api-key', KEY, '--lanes', '4', '--draft', 'off', '--adapters-dir', ADAPTERS]);
});

after(() => {
	if (S && S.proc.exitCode === null) S.proc.kill('SIGKILL');
});

const ledger = async (url = S.url) => (await getJSON(`${url}/learn/grants`)).body;
const grantOf = async (id) => (await ledger()).grants.find((g) => g.id === id);
const del = async (p) => {
	const r = await fetch(`${S.url}${p}`, { method: 'DELETE', headers: auth });
	return { status: r.status, body: await r.json() };
};
const version = async (name) => (await getJSON(`${S.url}/v1/adapters`, { headers: auth })).body.data.find((a) => a.name === name && a.status === 'ready')?.version;

// Waits until grant id has left "active" (or committed steps steps); its ledger entry.
async function waitGrant(id, steps = 0) {
	for (let i = 0; i < 3000; i++) {
		const g = await grantOf(id);
		if (g && (g.state !== 'active' || (steps && g.steps_done >= steps))) return g;
		await sleep(10);
	}
	return grantOf(id);
}

async function feed(id, n, from = 0) {
	let ok = 0;
	for (let i = 0; i < n; i++) {
		const r = await postJSON(`${S.url}/learn/examples`, { grant: id, ...stories[(from + i) % stories.length] });
		if (r.status === 202) ok++;
	}
	return ok;
}

const complete = (url, model, seed, extra = {}) =>
	postJSON(`${url}/v1/completions`, { model, prompt: 'One sunny day,', max_tokens: 24, temperature: seed % 2 ? 0.8 : 0, seed, ...extra });

test('the ledger is published at start and moves only when something changed', async () => {
	const a = await ledger();
	assert.equal(a.model, 'stories260K', 'the ledger names the model it trains on');
	assert.equal(a.sequence, 1);
	assert.equal(a.revision, 0);
	assert.deepEqual(a.grants, []);
	assert.ok(a.clock_us > 0 && a.committed_steps === 0 && a.optimizer_bytes === 0);
	const r = await postJSON(`${S.url}/v1/completions`, { prompt: 'Once', max_tokens: 512, ignore_eos: true, temperature: 0 });
	assert.equal(r.status, 200);
	assert.equal(r.body.usage.completion_tokens, 512);
	const b = await ledger();
	assert.equal(b.sequence, 1, 'no publication for a completion with no learning');
	assert.equal(b.clock_us, a.clock_us);
});

test('bad grants and examples get clear 4xx errors and the server goes on', async () => {
	const bad = [
		[{}, 400, 'adapter'],
		[{ adapter: 'x', max_tokens: 10 }, 400, 'max_steps'],
		[{ adapter: 'x', max_steps: 1 }, 400, 'max_tokens'],
		[{ adapter: 'a b', max_steps: 1, max_tokens: 10 }, 400, 'adapter'],
		[{ adapter: 'x', max_steps: 1.5, max_tokens: 10 }, 400, 'max_steps'],
		[{ adapter: 'x', max_steps: '3', max_tokens: 10 }, 400, 'max_steps'],
		[{ adapter: 'x', max_steps: 1, max_tokens: 10, rank: 0 }, 400, 'rank'],
		[{ adapter: 'x', max_steps: 1, max_tokens: 10, lr: -1 }, 400, 'lr'],
		[{ adapter: 'x', max_steps: 1, max_tokens: 10, expires_s: 1e12 }, 400, 'expires_s'],
		[{ adapter: 'x', max_steps: 1, max_tokens: 10, nope: 1 }, 400, 'nope'],
		[{ adapter: 'stories260K', max_steps: 1, max_tokens: 10 }, 409, 'adapter'],
	];
	for (const [body, status, param] of bad) {
		const r = await postJSON(`${S.url}/learn/grants`, body);
		assert.equal(r.status, status, JSON.stringify(body));
		assert.equal(r.body.error.param, param, JSON.stringify(r.body));
		assert.ok(r.body.error.message.length > 10);
	}
	const raw = await fetch(`${S.url}/learn/grants`, { method: 'POST', headers: { ...auth, 'Content-Type': 'application/json' }, body: '{"adapter":' });
	assert.equal(raw.status, 400);
	assert.equal((await fetch(`${S.url}/learn/grants`, { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: '{}' })).status, 401);
	const exs = [
		[{ prompt: 'a', completion: 'b' }, 400, 'grant'],
		[{ grant: 'grant-x', prompt: 'a', completion: 'b' }, 400, 'grant'],
		[{ grant: 'grant-999', prompt: 'a', completion: 'b' }, 404, 'grant'],
		[{ grant: 'grant-999' }, 400, 'messages'],
		[{ grant: 'grant-999', prompt: 'a' }, 400, 'completion'],
		[{ grant: 'grant-999', messages: 'hi' }, 400, 'messages'],
		[{ grant: 'grant-999', messages: [{ role: 'user', content: 'hi' }], prompt: 'a', completion: 'b' }, 400, 'prompt'],
	];
	for (const [body, status, param] of exs) {
		const r = await postJSON(`${S.url}/learn/examples`, body);
		assert.equal(r.status, status, JSON.stringify(body));
		assert.equal(r.body.error.param, param, JSON.stringify(r.body));
	}
	assert.equal((await del('/learn/grants/grant-999')).status, 404);
	assert.equal((await del('/learn/grants/nothing')).status, 404);
	assert.equal((await postJSON(`${S.url}/v1/adapters/none/save`, { file: 'x.gguf' })).status, 404);
	assert.equal((await postJSON(`${S.url}/v1/adapters/none/load`, { path: 'x' })).status, 404);
	assert.equal((await getJSON(`${S.url}/health`)).status, 200);
	assert.equal((await ledger()).sequence, 1, 'refused mutations publish nothing');
});

test('a grant makes its adapter and trains it; each step a version; beside it requests keep their tokens', async () => {
	// tokens alone first: the base and (later) version 1 of the new adapter, which is the base's
	const alone = [];
	for (let i = 0; i < 4; i++) alone.push((await complete(S.url, undefined, 10 + i)).body.choices[0].token_sha);
	const r = await postJSON(`${S.url}/learn/grants`, { adapter: 'persona', max_steps: 8, max_tokens: 1e6, lr: 0.02, rank: 4 });
	assert.equal(r.status, 200, JSON.stringify(r.body));
	assert.equal(r.body.object, 'learn.grant');
	assert.equal(r.body.created, true);
	assert.equal(r.body.state, 'active');
	assert.match(r.body.id, /^grant-\d+$/);
	const id = r.body.id;
	assert.equal(await version('persona'), 1);
	const again = await postJSON(`${S.url}/learn/grants`, { adapter: 'persona', max_steps: 8, max_tokens: 1e6 });
	assert.equal(again.status, 409);
	assert.match(again.body.error.message, /open grant/);
	const v1 = (await complete(S.url, 'persona', 10)).body.choices[0].token_sha;
	assert.equal(v1, alone[0], 'a new adapter starts as the base (B = 0)');
	// streams beside the training: each ends once, with the tokens it has alone
	const seq0 = (await ledger()).sequence;
	const streams = [0, 1, 2, 3].map((i) => {
		let finals = 0;
		return postSSE(`${S.url}/v1/completions`, { prompt: 'One sunny day,', max_tokens: 24, temperature: i % 2 ? 0.8 : 0, seed: 10 + i, stream: true }, {}, (ev) => {
			if (ev.data?.choices?.[0]?.finish_reason) finals++;
		}).then((r) => ({ evs: r.events, finals }));
	});
	const ex = await postJSON(`${S.url}/learn/examples`, { grant: id, ...stories[0] });
	assert.equal(ex.status, 202);
	assert.equal(ex.body.grant, id);
	assert.ok(ex.body.tokens > ex.body.learned_tokens && ex.body.learned_tokens > 0);
	assert.equal(await feed(id, 39, 1), 39);
	const done = await Promise.all(streams);
	for (const [i, d] of done.entries()) {
		assert.equal(d.finals, 1, `stream ${i}: one finish`);
		assert.equal(d.evs[d.evs.length - 1].data, '[DONE]');
		const last = d.evs.filter((e) => e.data?.choices?.[0]?.token_sha).pop();
		assert.equal(last.data.choices[0].token_sha, alone[i], `stream ${i} beside training`);
	}
	const g = await waitGrant(id);
	assert.equal(g.state, 'exhausted');
	assert.equal(g.steps_done, 8);
	assert.equal(g.steps_max, 8);
	assert.ok(g.tokens_used > 0 && g.tokens_used <= g.tokens_max);
	assert.ok(Number.isFinite(g.last_loss) && g.last_loss > 0);
	assert.equal(g.version, 9);
	assert.equal(await version('persona'), 9, 'version 1 and one per step');
	const lg = await ledger();
	assert.ok(lg.sequence > seq0 && lg.revision >= lg.sequence - 1);
	assert.ok(lg.committed_steps >= 8 && lg.optimizer_bytes > 0);
	assert.equal(await metric(S.url, 'lanes_learn_steps_total{outcome="committed"}'), lg.committed_steps);
	// a grant that ended takes no example; the trained adapter speaks differently from the base
	const late = await postJSON(`${S.url}/learn/examples`, { grant: id, ...stories[0] });
	assert.equal(late.status, 409);
	assert.match(late.body.error.message, /exhausted/);
	assert.notEqual((await complete(S.url, 'persona', 10)).body.choices[0].token_sha, alone[0]);
	for (let i = 0; i < 4; i++) assert.equal((await complete(S.url, undefined, 10 + i)).body.choices[0].token_sha, alone[i]);
});

test('caps: an example past the tokens a grant has left is refused; chat examples learn the assistant turns', async () => {
	const r = await postJSON(`${S.url}/learn/grants`, { adapter: 'capped', max_steps: 100, max_tokens: 100, rank: 2 });
	assert.equal(r.status, 200);
	const big = await postJSON(`${S.url}/learn/examples`, { grant: r.body.id, ...stories[0] });
	assert.equal(big.status, 409);
	assert.equal(big.body.error.code, 'grant_tokens_exceeded');
	const chat = await postJSON(`${S.url}/learn/examples`, {
		grant: r.body.id,
		messages: [{ role: 'user', content: 'Tell me' }, { role: 'assistant', content: 'Max found a boat.' }],
	});
	assert.equal(chat.status, 202, JSON.stringify(chat.body));
	assert.ok(chat.body.learned_tokens > 0 && chat.body.learned_tokens < chat.body.tokens);
	assert.equal(chat.body.tokens_left, 100 - chat.body.tokens);
	const noTurn = await postJSON(`${S.url}/learn/examples`, { grant: r.body.id, messages: [{ role: 'user', content: 'hi' }] });
	assert.equal(noTurn.status, 400);
	assert.match(noTurn.body.error.message, /assistant/);
	assert.equal((await del(`/learn/grants/${r.body.id}`)).status, 202);
});

test('revoked and expired grants stop at a step boundary with no partial commit', async () => {
	const r = await postJSON(`${S.url}/learn/grants`, { adapter: 'rev', max_steps: 1000, max_tokens: 1e7, rank: 4 });
	const id = r.body.id;
	await feed(id, 48);
	let g = await waitGrant(id, 2);
	const d = await del(`/learn/grants/${id}`);
	assert.equal(d.status, 202);
	assert.equal(d.body.state, 'revoked');
	assert.equal((await del(`/learn/grants/${id}`)).status, 409);
	g = await waitGrant(id);
	assert.equal(g.state, 'revoked');
	assert.equal(g.queued, 0);
	assert.equal(await version('rev'), 1 + g.steps_done);
	assert.equal(g.version, 1 + g.steps_done);
	await sleep(50);
	assert.equal(await version('rev'), 1 + g.steps_done, 'nothing commits after the revocation');
	// expiry: a grant on the same adapter goes on from its last version and ends on time
	const e = await postJSON(`${S.url}/learn/grants`, { adapter: 'rev', max_steps: 1000, max_tokens: 1e7, expires_s: 0.4 });
	assert.equal(e.status, 200);
	assert.equal(e.body.created, false);
	assert.ok(e.body.expires_at >= Date.now() / 1000 - 1);
	await feed(e.body.id, 48);
	const x = await waitGrant(e.body.id);
	assert.equal(x.state, 'expired');
	assert.equal(await version('rev'), 1 + g.steps_done + x.steps_done);
	const late = await postJSON(`${S.url}/learn/examples`, { grant: e.body.id, ...stories[0] });
	assert.equal(late.status, 409);
});

test('a saved adapter gives the trained server tokens and logprobs in a fresh server', async () => {
	const out = path.join(ADAPTERS, 'persona-saved.gguf');
	const bad = await postJSON(`${S.url}/v1/adapters/persona/save`, { file: 'no-such-dir/x.gguf' });
	assert.equal(bad.status, 400);
	assert.equal(bad.body.error.param, 'file');
	const r = await postJSON(`${S.url}/v1/adapters/persona/save`, { file: 'persona-saved.gguf' });
	assert.equal(r.status, 200, JSON.stringify(r.body));
	assert.equal(r.body.file, 'persona-saved.gguf');
	assert.equal(r.body.version, await version('persona'));
	assert.equal(r.body.bytes, fs.statSync(out).size);
	const F = await startServer(['-m', STORIES, '--lora', `persona=${out}`, '--learn-share', '0']);
	try {
		for (const seed of [10, 11]) {
			const a = (await complete(S.url, 'persona', seed, { logprobs: 1 })).body.choices[0];
			const b = (await complete(F.url, 'persona', seed, { logprobs: 1 })).body.choices[0];
			assert.equal(b.token_sha, a.token_sha);
			assert.deepEqual(b.logprobs.token_logprobs, a.logprobs.token_logprobs);
		}
		// learning is off there: its endpoints say so
		const off = await postJSON(`${F.url}/learn/grants`, { adapter: 'x', max_steps: 1, max_tokens: 10 });
		assert.equal(off.status, 404);
		assert.match(off.body.error.message, /--learn-share/);
	} finally {
		F.proc.kill('SIGKILL');
	}
});

test('GET /learn/grants answers while a long prompt fills', async () => {
	const T = await startServer(['-m', shapeModel('tinyllama-1.1b'), '--piece', '16', '--draft', 'off', '--lanes', '2']);
	try {
		const before0 = await ledger(T.url);
		const ids = [];
		for (let i = 0, x = 7; i < 192; i++) { x = (Math.imul(x, 1664525) + 1013904223) >>> 0; ids.push(3 + (x % 500)); }
		let replied = false;
		const reply = postJSON(`${T.url}/v1/completions`, { prompt: ids, max_tokens: 1 }).then((r) => ((replied = true), r));
		const filling = (sl) => sl.lanes.find((l) => l.phase === 'filling' && l.filled_tokens > 0 && l.filled_tokens < l.prompt_tokens);
		let seen = null;
		for (let i = 0; i < 20000 && !seen && !replied; i++) seen = filling((await getJSON(`${T.url}/slots`)).body);
		assert.ok(seen, 'the prompt was seen filling');
		const lg = await ledger(T.url);
		const later = filling((await getJSON(`${T.url}/slots`)).body);
		assert.ok(later && !replied, 'the prompt was still filling after GET /learn/grants answered');
		assert.equal(lg.sequence, 1);
		assert.equal(lg.clock_us, before0.clock_us, 'the stamp of the publication at start');
		assert.equal((await reply).status, 200);
		assert.equal((await ledger(T.url)).sequence, 1);
	} finally {
		T.proc.kill('SIGKILL');
	}
});

test('every request that waited for a save, its route or the engine was woken exactly once', async () => {
	await assertWaitsSettled(assert, S.url, ['save', 'work', 'engine']);
});
