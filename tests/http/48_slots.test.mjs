// llama-server's slot actions over --cache-dir: POST /slots/{id}?action=save|restore|erase. A long
// prompt's cached pages saved to a file, erased (from memory and disk), restored — in the same
// server and in another started afresh — hit again (counted, and in the reply's cached tokens) with
// the bits of a fresh server. Hostile file names are 400s that write nothing; a damaged, truncated
// or foreign file is refused and deleted; unknown slots are 404s; without --cache-dir, a 501.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { startServer, mainServer, STORIES, KEY, TMP, postJSON, metric } from './lib.mjs';

const dir = path.join(TMP, `slots-${process.pid}`);
const prompt = Array.from({ length: 12 }, (_, i) => `Once upon a time there was a little ${['girl', 'dog', 'bird'][i % 3]} who liked to play in the park.`).join(' ');
const body = { prompt, max_tokens: 16, temperature: 0.8, seed: 5, logprobs: 2 };
const LANES = 2;

let srv;
before(async () => {
	fs.rmSync(dir, { recursive: true, force: true });
	srv = await startServer(['-m', STORIES, '--api-key', KEY, '--cache-dir', dir, '--lanes', String(LANES)]);
});
after(() => {
	if (srv) srv.proc.kill('SIGKILL');
	fs.rmSync(dir, { recursive: true, force: true });
});

const slot = (url, id, action, b) => postJSON(`${url}/slots/${id}?action=${action}`, b ?? {});
const complete = async (url) => {
	const r = await postJSON(`${url}/v1/completions`, body);
	assert.equal(r.status, 200, JSON.stringify(r.body));
	return r.body;
};
// The regular files of the cache folder (its page folder aside).
const files = (d = dir) => fs.readdirSync(d).filter((f) => fs.lstatSync(path.join(d, f)).isFile()).sort();

// Saves every lane to NAME-ID; the one lane that held the prompt is the one with tokens saved.
async function saveHolder(url, name) {
	let held = null;
	for (let id = 0; id < LANES; id++) {
		const r = await slot(url, id, 'save', { filename: `${name}-${id}` });
		assert.equal(r.status, 200, JSON.stringify(r.body));
		assert.deepEqual(Object.keys(r.body).sort(), ['filename', 'id_slot', 'n_saved', 'n_written', 'timings']);
		assert.equal(r.body.id_slot, id);
		assert.equal(r.body.filename, `${name}-${id}`);
		assert.equal(typeof r.body.timings.save_ms, 'number');
		assert.equal(fs.statSync(path.join(dir, `${name}-${id}`)).size, r.body.n_written, 'n_written is the file\'s size');
		if (r.body.n_saved > 0) {
			assert.equal(held, null, 'one lane held it');
			held = { id, file: `${name}-${id}`, n: r.body.n_saved, bytes: r.body.n_written };
		}
	}
	assert.ok(held, 'a lane held the prompt');
	return held;
}

async function eraseAll(url) {
	let n = 0;
	for (let id = 0; id < LANES; id++) {
		const r = await slot(url, id, 'erase');
		assert.equal(r.status, 200, JSON.stringify(r.body));
		assert.deepEqual(Object.keys(r.body).sort(), ['id_slot', 'n_erased']);
		n += r.body.n_erased;
	}
	return n;
}

test('save, erase, restore: the prompt hits the restored pages, with the bits of a fresh server', async () => {
	const fresh = await complete(srv.url);
	const n = fresh.usage.prompt_tokens;
	assert.ok(n > 150, `a long prompt (${n} tokens)`);
	assert.equal(fresh.usage.prompt_tokens_details.cached_tokens, 0);
	const held = await saveHolder(srv.url, 'story');
	assert.equal(held.n, Math.floor(n / 16) * 16, 'every whole page of the prompt saved');

	// erased from memory and disk: the prompt is computed afresh
	assert.equal(await eraseAll(srv.url), held.n);
	const again = await complete(srv.url);
	assert.equal(again.usage.prompt_tokens_details.cached_tokens, 0, 'nothing left to hit');
	assert.equal(again.choices[0].token_sha, fresh.choices[0].token_sha);
	assert.equal(await eraseAll(srv.url), held.n);
	assert.equal((await slot(srv.url, held.id, 'save', { filename: 'empty' })).body.n_saved, 0, 'an erased slot saves nothing');

	const hits = await metric(srv.url, 'lanes_prefix_cache_hit_tokens_total');
	const r = await slot(srv.url, 1, 'restore', { filename: held.file });
	assert.equal(r.status, 200, JSON.stringify(r.body));
	assert.deepEqual(Object.keys(r.body).sort(), ['filename', 'id_slot', 'n_read', 'n_restored', 'timings']);
	assert.equal(r.body.id_slot, 1);
	assert.equal(r.body.n_restored, held.n);
	assert.equal(r.body.n_read, held.bytes);
	assert.equal(typeof r.body.timings.restore_ms, 'number');
	const hit = await complete(srv.url);
	assert.equal(hit.usage.prompt_tokens_details.cached_tokens, held.n, 'the restored pages were hit');
	assert.equal(await metric(srv.url, 'lanes_prefix_cache_hit_tokens_total'), hits + held.n, 'and counted');
	assert.equal(hit.choices[0].token_sha, fresh.choices[0].token_sha, 'the same tokens as fresh');
	assert.deepEqual(hit.choices[0].logprobs, fresh.choices[0].logprobs, 'the same log-probabilities');
	// the slot restored into holds the file's tokens: saving it gives them back
	const back = await slot(srv.url, 1, 'save', { filename: 'back' });
	assert.equal(back.body.n_saved, held.n);

	// another server, another folder with only the file: read back from it alone
	const dir2 = `${dir}-2`;
	fs.rmSync(dir2, { recursive: true, force: true });
	fs.mkdirSync(dir2);
	fs.copyFileSync(path.join(dir, held.file), path.join(dir2, 'copied'));
	const other = await startServer(['-m', STORIES, '--api-key', KEY, '--cache-dir', dir2]);
	try {
		const r2 = await slot(other.url, 0, 'restore', { filename: 'copied' });
		assert.equal(r2.status, 200, JSON.stringify(r2.body));
		assert.equal(r2.body.n_restored, held.n);
		const hit2 = await complete(other.url);
		assert.equal(hit2.usage.prompt_tokens_details.cached_tokens, held.n);
		assert.equal(hit2.choices[0].token_sha, fresh.choices[0].token_sha);
		assert.deepEqual(hit2.choices[0].logprobs, fresh.choices[0].logprobs);
	} finally {
		other.proc.kill('SIGKILL');
		fs.rmSync(dir2, { recursive: true, force: true });
	}
});

test('hostile file names: 400 naming filename, and nothing written anywhere', async () => {
	const outside = path.join(TMP, `slots-outside-${process.pid}`);
	fs.mkdirSync(outside, { recursive: true });
	const target = path.join(outside, 'target');
	fs.writeFileSync(target, 'keep me');
	fs.symlinkSync(target, path.join(dir, 'link'));
	const before = fs.readdirSync(dir).sort();
	const names = ['../x', '../../x', '/etc/passwd', 'a/b', '.hidden', '.', '..', '', 'x'.repeat(200), 'a\u0000b', 'a\nb', 'a b', 'é',
		`${outside}/y`, 42, null, true, ['a'], { a: 1 }];
	for (const filename of names)
		for (const action of ['save', 'restore']) {
			const r = await slot(srv.url, 0, action, { filename });
			assert.equal(r.status, 400, `${action} ${JSON.stringify(filename)}: ${JSON.stringify(r.body)}`);
			// a NUL is refused by the JSON reader before the name is looked at
			if (typeof filename !== 'string' || !filename.includes('\u0000')) assert.equal(r.body.error.param, 'filename', JSON.stringify(r.body));
		}
	for (const b of [{}, { filename: 'a', extra: 1 }]) assert.equal((await slot(srv.url, 0, 'save', b)).status, 400, JSON.stringify(b));
	assert.deepEqual(fs.readdirSync(dir).sort(), before, 'nothing written in the folder');
	assert.deepEqual(fs.readdirSync(outside), ['target'], 'nor outside it');
	assert.ok(!fs.existsSync(path.join(TMP, 'x')) && !fs.existsSync('/etc/passwd-slot'));
	// a symlink is never read through; a save replaces the link itself, never what it points to
	const rl = await slot(srv.url, 0, 'restore', { filename: 'link' });
	assert.equal(rl.status, 400, JSON.stringify(rl.body));
	assert.equal(fs.readFileSync(target, 'utf8'), 'keep me');
	const sl = await slot(srv.url, 0, 'save', { filename: 'link' });
	assert.equal(sl.status, 200, JSON.stringify(sl.body));
	assert.ok(fs.lstatSync(path.join(dir, 'link')).isFile(), 'the link became the slot file');
	assert.equal(fs.readFileSync(target, 'utf8'), 'keep me');
	// the page cache's own folder is not a slot file's name
	const pages = fs.readdirSync(dir).find((f) => fs.lstatSync(path.join(dir, f)).isDirectory());
	assert.equal((await slot(srv.url, 0, 'save', { filename: pages })).status, 409);
	assert.equal((await slot(srv.url, 0, 'restore', { filename: pages })).status, 400);
	assert.ok(fs.lstatSync(path.join(dir, pages)).isDirectory());
	assert.ok(!files().some((f) => f.startsWith('.')), 'no temporary file left');
	fs.rmSync(outside, { recursive: true, force: true });
});

test('a damaged, truncated or foreign slot file is refused and deleted; a missing one is a 404', async () => {
	await eraseAll(srv.url); // no lane holds anything: the next request's lane alone will
	await complete(srv.url);
	const held = await saveHolder(srv.url, 'good');
	const good = fs.readFileSync(path.join(dir, held.file));
	const cases = {
		flipped: (() => { const b = Buffer.from(good); b[b.length >> 1] ^= 0x40; return b; })(),
		truncated: good.subarray(0, good.length - 100),
		header: good.subarray(0, 40),
		empty: Buffer.alloc(0),
		noise: Buffer.from('not a slot file at all'),
		grown: Buffer.concat([good, Buffer.alloc(64)]),
	};
	for (const [name, bytes] of Object.entries(cases)) {
		fs.writeFileSync(path.join(dir, name), bytes);
		const r = await slot(srv.url, 0, 'restore', { filename: name });
		assert.equal(r.status, 400, `${name}: ${JSON.stringify(r.body)}`);
		assert.match(r.body.error.message, /refused and deleted|larger than any slot file/, name);
		assert.ok(!fs.existsSync(path.join(dir, name)), `${name} deleted`);
	}
	// saved by a server whose KV type differs: another cache's rows
	const q8dir = `${dir}-q8`;
	fs.rmSync(q8dir, { recursive: true, force: true });
	const q8 = await startServer(['-m', STORIES, '--api-key', KEY, '--cache-dir', q8dir, '--kv', 'q8_0', '--lanes', '1']);
	try {
		await complete(q8.url);
		const s = await slot(q8.url, 0, 'save', { filename: 'q8' });
		assert.equal(s.status, 200, JSON.stringify(s.body));
		assert.ok(s.body.n_saved > 0);
		fs.copyFileSync(path.join(q8dir, 'q8'), path.join(dir, 'q8'));
	} finally {
		q8.proc.kill('SIGKILL');
		fs.rmSync(q8dir, { recursive: true, force: true });
	}
	const f = await slot(srv.url, 0, 'restore', { filename: 'q8' });
	assert.equal(f.status, 400, JSON.stringify(f.body));
	assert.match(f.body.error.message, /another model file, kernel set or KV type/);
	assert.ok(!fs.existsSync(path.join(dir, 'q8')));
	const miss = await slot(srv.url, 0, 'restore', { filename: 'never-saved' });
	assert.equal(miss.status, 404, JSON.stringify(miss.body));
	// the good file still restores
	assert.equal((await slot(srv.url, 0, 'restore', { filename: held.file })).status, 200);
});

test('unknown slots and actions, the key, a lane mid-request, and a server without --cache-dir', async () => {
	for (const id of [LANES, 99, -1, 'x', '1x', '99999999999', '2147483648']) {
		const r = await slot(srv.url, id, 'save', { filename: 'a' });
		assert.equal(r.status, 404, `${id}: ${JSON.stringify(r.body)}`);
	}
	for (const q of ['', '?action=', '?action=load', '?action=SAVE']) {
		const r = await postJSON(`${srv.url}/slots/0${q}`, { filename: 'a' });
		assert.equal(r.status, 400, q);
		assert.equal(r.body.error.param, 'action');
	}
	const noKey = await fetch(`${srv.url}/slots/0?action=erase`, { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: '{}' });
	assert.equal(noKey.status, 401);
	assert.equal((await fetch(`${srv.url}/slots/0?action=erase`, { headers: { Authorization: `Bearer ${KEY}` } })).status, 405);

	// a lane mid-request: 409, and the request goes on. The stream is held unread while asking (the
	// lane runs on regardless), so a short request may end first: each try that found a live lane
	// and was answered 409 counts, and one must be.
	let refused = null;
	for (let i = 0; i < 8 && !refused; i++) {
		const ctl = new AbortController();
		const res = await fetch(`${srv.url}/v1/completions`, { method: 'POST', signal: ctl.signal,
			headers: { 'Content-Type': 'application/json', Authorization: `Bearer ${KEY}` },
			body: JSON.stringify({ prompt: 'Once upon a time', max_tokens: 400, ignore_eos: true, stream: true }) });
		assert.equal(res.status, 200);
		const reader = res.body.getReader();
		await reader.read(); // the first tokens: the lane is running
		const lanes = (await (await fetch(`${srv.url}/slots`)).json()).lanes;
		const live = lanes.find((l) => l.phase !== 'idle');
		const r = live ? await slot(srv.url, live.id, 'save', { filename: 'busy' }) : null;
		if (r && r.status === 409) refused = r;
		else if (r) assert.equal(r.status, 200, JSON.stringify(r.body)); // the request ended in between
		ctl.abort();
		await reader.cancel().catch(() => {});
	}
	assert.ok(refused, 'a save of a lane mid-request is refused');
	assert.match(refused.body.error.message, /running a request/);
	fs.rmSync(path.join(dir, 'busy'), { force: true });

	const plain = await mainServer();
	const r = await slot(plain.url, 0, 'save', { filename: 'a' });
	assert.equal(r.status, 501, JSON.stringify(r.body));
	assert.match(r.body.error.message, /started without --cache-dir/);
});
