// The surfaces that reach the file system or cost work, tried as a hostile client would:
// adapter loads and saves take a file name inside --adapters-dir and nothing else (no path, no
// `..`, no symlink followed, no FIFO or device, no temp name), a save killed at any moment
// leaves the old file whole and no stray file after the next start, changes are refused on a
// server open to the network without a key, and the costly bodies (learning examples, tool
// lists, tokenize) are refused by bounds checked before the work, in bounded time.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { BIN, STORIES, TMP, KEY, startServer, getJSON, postJSON, sleep } from './lib.mjs';

const auth = { Authorization: `Bearer ${KEY}` };
const ROOT = path.join(TMP, 'hostile-files');
const DIR = path.join(ROOT, 'adapters');
const VICTIM = path.join(ROOT, 'victim.txt');
let S;

// Every file under ROOT outside DIR, with its bytes: what a request must never change.
function outside() {
	const out = {};
	const walk = (d) => {
		for (const e of fs.readdirSync(d, { withFileTypes: true })) {
			const p = path.join(d, e.name);
			if (p === DIR) continue;
			if (e.isDirectory()) walk(p);
			else out[p] = e.isSymbolicLink() ? `-> ${fs.readlinkSync(p)}` : fs.readFileSync(p).toString('base64');
		}
	};
	walk(ROOT);
	return out;
}

const temps = () => fs.readdirSync(DIR).filter((n) => n.startsWith('.lanes-tmp-'));

// A new adapter trained one step here, so that it can be saved.
async function trained(url, name) {
	const g = await postJSON(`${url}/learn/grants`, { adapter: name, max_steps: 1, max_tokens: 4096, batch: 1 });
	assert.equal(g.status, 200, JSON.stringify(g.body));
	const ex = await postJSON(`${url}/learn/examples`, { grant: g.body.id, prompt: 'Once upon a time', completion: ' there was a cat.' });
	assert.equal(ex.status, 202, JSON.stringify(ex.body));
	for (let i = 0; i < 400; i++) {
		const l = (await getJSON(`${url}/learn/grants`)).body;
		if (l.grants.find((x) => x.id === g.body.id)?.steps_done === 1) return;
		await sleep(25);
	}
	assert.fail('no step was committed');
}

before(async () => {
	fs.rmSync(ROOT, { recursive: true, force: true });
	fs.mkdirSync(DIR, { recursive: true });
	fs.writeFileSync(VICTIM, 'the operator\'s file');
	S = await startServer(['-m', STORIES, '--api-key', KEY, '--adapters-dir', DIR, '--lanes', '2']);
	await trained(S.url, 'p');
	const r = spawnSync(BIN, ['gen', '--lora', '4', '-m', STORIES, '-o', path.join(DIR, 'good.gguf'), '--seed', '3'], { encoding: 'utf8' });
	assert.equal(r.status, 0, r.stderr);
});

after(() => {
	if (S && S.proc.exitCode === null) S.proc.kill('SIGKILL');
});

const NAMES = [
	['an absolute path', '/etc/passwd'],
	['an absolute path to the victim', VICTIM],
	['a relative climb', '../victim.txt'],
	['a deep climb', '../../../../../../../../tmp/x.gguf'],
	['a sub-folder', 'sub/x.gguf'],
	['a hidden name', '.x.gguf'],
	['a temporary file\'s name', '.lanes-tmp-0123456789abcdef'],
	['a very long name', 'x'.repeat(5000) + '.gguf'],
	['a non-ASCII name', 'caf\u00e9.gguf'],
	['a control byte', 'a\nb.gguf'],
	['a NUL byte', 'a\u0000b.gguf', null], // refused as JSON lanes does not take
	['an empty name', ''],
	['a dot', '.'],
];

test('loads refuse every name that is not a plain file in the adapters folder, and read nothing outside', async () => {
	fs.symlinkSync(VICTIM, path.join(DIR, 'out-link.gguf'));
	fs.symlinkSync('good.gguf', path.join(DIR, 'in-link.gguf'));
	fs.symlinkSync('/dev/zero', path.join(DIR, 'dev.gguf'));
	spawnSync('mkfifo', [path.join(DIR, 'fifo.gguf')]);
	fs.mkdirSync(path.join(DIR, 'sub'), { recursive: true });
	const before_ = outside();
	const cases = [...NAMES, ['a symlink out of the folder', 'out-link.gguf'], ['a symlink within it', 'in-link.gguf'],
		['a symlink to a device', 'dev.gguf'], ['a FIFO', 'fifo.gguf'], ['a folder', 'sub']];
	for (const [what, file, param = 'file'] of cases) {
		const t0 = Date.now();
		const r = await postJSON(`${S.url}/v1/adapters`, { name: 'x', file });
		assert.equal(r.status, 400, `${what}: ${JSON.stringify(r.body)}`);
		assert.equal(r.body.error.param, param, what);
		assert.ok(Date.now() - t0 < 5000, `${what}: answered in bounded time`);
	}
	// a path is never taken, wherever it points
	for (const p of [VICTIM, path.join(DIR, 'good.gguf'), 'good.gguf']) {
		const r = await postJSON(`${S.url}/v1/adapters`, { name: 'x', path: p });
		assert.equal(r.status, 400);
		assert.equal(r.body.error.param, 'path');
	}
	const ok = await postJSON(`${S.url}/v1/adapters`, { name: 'good', file: 'good.gguf' });
	assert.equal(ok.status, 200, JSON.stringify(ok.body));
	const byName = await postJSON(`${S.url}/v1/adapters`, { name: 'good', replace: true }); // good.gguf, by its name
	assert.equal(byName.status, 200, JSON.stringify(byName.body));
	assert.deepEqual(outside(), before_, 'nothing outside the folder changed');
	assert.equal((await getJSON(`${S.url}/health`)).status, 200);
});

test('saves write only a plain name in the adapters folder, replace a planted symlink without following it', async () => {
	const before_ = outside();
	for (const [what, file, param = 'file'] of NAMES) {
		const r = await postJSON(`${S.url}/v1/adapters/p/save`, { file });
		assert.equal(r.status, 400, `${what}: ${JSON.stringify(r.body)}`);
		assert.equal(r.body.error.param, param, what);
	}
	const viaPath = await postJSON(`${S.url}/v1/adapters/p/save`, { path: VICTIM });
	assert.equal(viaPath.status, 400);
	assert.match(viaPath.body.error.message, /--adapters-dir/);
	// the final name planted as a symlink to the victim: the save replaces the link itself
	fs.symlinkSync(VICTIM, path.join(DIR, 'planted.gguf'));
	const r = await postJSON(`${S.url}/v1/adapters/p/save`, { file: 'planted.gguf' });
	assert.equal(r.status, 200, JSON.stringify(r.body));
	const st = fs.lstatSync(path.join(DIR, 'planted.gguf'));
	assert.ok(st.isFile() && !st.isSymbolicLink() && st.size === r.body.bytes);
	// no name given: NAME.gguf
	const dflt = await postJSON(`${S.url}/v1/adapters/p/save`, {});
	assert.equal(dflt.status, 200, JSON.stringify(dflt.body));
	assert.equal(dflt.body.file, 'p.gguf');
	assert.deepEqual(outside(), before_, 'nothing outside the folder changed');
	assert.equal(fs.readFileSync(VICTIM, 'utf8'), 'the operator\'s file');
	assert.deepEqual(temps(), [], 'no temporary file is left');
});

test('kill -9 at random moments of a save leaves the old file whole, and the next start leaves no stray file', async () => {
	const file = path.join(DIR, 'p.gguf');
	const old = fs.readFileSync(file);
	let seed = 7;
	const rand = () => ((seed = (seed * 1103515245 + 12345) % 2 ** 31) / 2 ** 31);
	for (let k = 0; k < 6; k++) {
		const K = await startServer(['-m', STORIES, '--api-key', KEY, '--adapters-dir', DIR, '--lora', `p=${file}`, '--lanes', '1']);
		try {
			const g = await postJSON(`${K.url}/learn/grants`, { adapter: 'p', max_steps: 1, max_tokens: 100 });
			assert.equal(g.status, 200, JSON.stringify(g.body));
			const saving = postJSON(`${K.url}/v1/adapters/p/save`, {}).catch(() => null);
			await sleep(rand() * 20);
			K.proc.kill('SIGKILL');
			await saving;
			await K.exited;
		} finally {
			if (K.proc.exitCode === null) K.proc.kill('SIGKILL');
		}
		const now = fs.readFileSync(file);
		// the weights saved are the file's own: whole, the new file has the old bytes
		assert.ok(now.equals(old), `after kill ${k}: the file is the old one or a whole new one (${now.length} bytes, was ${old.length})`);
	}
	const T = await startServer(['-m', STORIES, '--adapters-dir', DIR, '--learn-share', '0']);
	try {
		assert.deepEqual(temps(), [], 'a new start sweeps what a killed save left');
	} finally {
		T.proc.kill('SIGKILL');
	}
});

test('open to the network without a key, adapter and learning changes get 403 naming the flags; reads stay open', async () => {
	const O = await startServer(['-m', STORIES, '--host', '0.0.0.0', '--adapters-dir', DIR]);
	try {
		assert.match(O.log(), /without --api-key: adapter, learning and model-cache changes are refused/);
		const post = (p, body) => postJSON(`${O.url}${p}`, body, { Authorization: '' });
		for (const [p, body] of [['/learn/grants', { adapter: 'q', max_steps: 1, max_tokens: 10 }], ['/v1/adapters', { name: 'g', file: 'good.gguf' }],
			['/learn/examples', { grant: 'grant-1', prompt: 'a', completion: 'b' }], ['/v1/adapters/p/save', {}]]) {
			const r = await post(p, body);
			assert.equal(r.status, 403, `${p}: ${JSON.stringify(r.body)}`);
			assert.match(r.body.error.message, /--api-key/);
			assert.match(r.body.error.message, /--allow-unauthenticated-mutations/);
		}
		const del = await fetch(`${O.url}/v1/adapters/x`, { method: 'DELETE' });
		assert.equal(del.status, 403);
		assert.equal((await getJSON(`${O.url}/v1/adapters`)).status, 200);
		assert.equal((await getJSON(`${O.url}/learn/grants`)).status, 200);
		const gen = await postJSON(`${O.url}/v1/completions`, { prompt: 'Hi', max_tokens: 2 }, { Authorization: '' });
		assert.equal(gen.status, 200);
	} finally {
		O.proc.kill('SIGKILL');
	}
	const A = await startServer(['-m', STORIES, '--host', '0.0.0.0', '--adapters-dir', DIR, '--allow-unauthenticated-mutations']);
	try {
		const r = await postJSON(`${A.url}/learn/grants`, { adapter: 'q', max_steps: 1, max_tokens: 10 }, { Authorization: '' });
		assert.equal(r.status, 200, JSON.stringify(r.body));
	} finally {
		A.proc.kill('SIGKILL');
	}
});

test('a 300 KB learning example is refused at once, /health answering meanwhile', async () => {
	const g = await postJSON(`${S.url}/learn/grants`, { adapter: 'big', max_steps: 1, max_tokens: 1e6 });
	assert.equal(g.status, 200);
	const messages = Array.from({ length: 300 }, (_, i) => ({ role: i % 2 ? 'assistant' : 'user', content: 'hello there '.repeat(80) }));
	const t0 = Date.now();
	let healthMs = null;
	const health = (async () => {
		await sleep(5);
		const h0 = Date.now();
		await getJSON(`${S.url}/health`);
		healthMs = Date.now() - h0;
	})();
	const r = await postJSON(`${S.url}/learn/examples`, { grant: g.body.id, messages });
	const ms = Date.now() - t0;
	await health;
	assert.equal(r.status, 400, JSON.stringify(r.body));
	assert.match(r.body.error.message, /cannot fit in 1024 tokens|1024 at most/);
	assert.ok(ms < 1000, `refused in ${ms} ms`);
	assert.ok(healthMs < 1000, `/health answered in ${healthMs} ms`);
	// as many messages, each small: the message count is bounded too
	const many = Array.from({ length: 2000 }, (_, i) => ({ role: i % 2 ? 'assistant' : 'user', content: 'a' }));
	const m = await postJSON(`${S.url}/learn/examples`, { grant: g.body.id, messages: many });
	assert.equal(m.status, 400);
	assert.match(m.body.error.message, /2000 messages/);
	// a prompt and completion too long to fit
	const t = await postJSON(`${S.url}/learn/examples`, { grant: g.body.id, prompt: 'a '.repeat(150000), completion: 'b' });
	assert.equal(t.status, 400);
});

test('SIGTERM while learning examples arrive ends the server within the drain deadline', async () => {
	const D = await startServer(['-m', STORIES, '--api-key', KEY, '--adapters-dir', DIR], { LANES_DRAIN_S: '2' });
	const g = await postJSON(`${D.url}/learn/grants`, { adapter: 'd', max_steps: 1, max_tokens: 1e6 });
	const messages = Array.from({ length: 300 }, (_, i) => ({ role: i % 2 ? 'assistant' : 'user', content: 'hello there '.repeat(80) }));
	const sent = Array.from({ length: 4 }, () => postJSON(`${D.url}/learn/examples`, { grant: g.body.id, messages }).catch(() => null));
	await sleep(20);
	const t0 = Date.now();
	D.proc.kill('SIGTERM');
	const end = await D.exited;
	await Promise.all(sent);
	assert.equal(end.code, 0);
	assert.ok(Date.now() - t0 < 6000, `exited in ${Date.now() - t0} ms`);
});

test('5,000 tools are refused before their grammar is built; 2,000 small tools in one definition too', async () => {
	const tool = (i) => ({ type: 'function', function: { name: `t${i}`, parameters: { type: 'object', properties: { a: { type: 'string' } } } } });
	const tools = Array.from({ length: 5000 }, (_, i) => tool(i));
	const msgs = [{ role: 'user', content: 'hi' }];
	for (const [p, body] of [['/v1/chat/completions', { messages: msgs, tools, max_tokens: 1 }],
		['/v1/messages', { model: 'stories260K', max_tokens: 1, messages: msgs, tools: tools.map((t) => ({ name: t.function.name, input_schema: t.function.parameters })) }],
		['/v1/responses', { input: 'hi', max_output_tokens: 1, tools: tools.map((t) => ({ type: 'function', name: t.function.name, parameters: t.function.parameters })) }]]) {
		const t0 = Date.now();
		const r = await postJSON(`${S.url}${p}`, body, { 'x-api-key': KEY });
		assert.equal(r.status, 400, `${p}: ${JSON.stringify(r.body).slice(0, 300)}`);
		assert.match(JSON.stringify(r.body), /more than the 512/);
		assert.ok(Date.now() - t0 < 3000, `${p}: refused in ${Date.now() - t0} ms`);
	}
	// few tools, one with an enormous schema: the definitions' size is bounded first
	const wide = { type: 'object', properties: Object.fromEntries(Array.from({ length: 40000 }, (_, i) => [`p${i}`, { type: 'string' }])) };
	const r = await postJSON(`${S.url}/v1/chat/completions`, { messages: msgs, tools: [{ type: 'function', function: { name: 'w', parameters: wide } }], max_tokens: 1 });
	assert.equal(r.status, 400);
	assert.match(r.body.error.message, /JSON values/);
	assert.equal((await getJSON(`${S.url}/health`)).status, 200);
});

test('a tokenize body past --max-tokenize-bytes is refused before it is parsed', async () => {
	const T = await startServer(['-m', STORIES, '--max-tokenize-bytes', '65536']);
	try {
		const t0 = Date.now();
		const r = await postJSON(`${T.url}/tokenize`, { content: 'word '.repeat(20000) });
		assert.equal(r.status, 413);
		assert.match(r.body.error.message, /--max-tokenize-bytes/);
		assert.ok(Date.now() - t0 < 2000);
		const ok = await postJSON(`${T.url}/tokenize`, { content: 'word '.repeat(10000) });
		assert.equal(ok.status, 200);
		assert.ok(ok.body.tokens.length >= 10000);
	} finally {
		T.proc.kill('SIGKILL');
	}
});
