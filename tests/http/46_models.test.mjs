// Many models in one server (--models-dir): each GGUF of the folder is served by its name beside
// -m, loaded by its first request and unloaded once idle past its keep-alive; what each model
// writes is what it writes served alone, bit for bit, alone and with requests to the others
// interleaved; --max-models unloads the least recently used; a file that is no model is listed
// failing and answered with a 500 naming it, while the others serve on; an unknown name is a
// 404 that lists the models; the openai and ollama clients list them; Ollama's pull, copy and
// delete change what the folder serves; a model loading never holds up another's stream.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import crypto from 'node:crypto';
import fs from 'node:fs';
import http from 'node:http';
import path from 'node:path';
import { spawnSync } from 'node:child_process';
import OpenAI from 'openai';
import { Ollama } from 'ollama';
import { BIN, SHARED, STORIES, TMP, startServer, postJSON, getJSON, sleep, waits, assertWaitsSettled, bigModel, agentModel } from './lib.mjs';

const dir = path.join(TMP, `models-${process.pid}`);
const FILES = { 'llama-q8': 'ref-llama-Q8_0.gguf', 'org/qwen2': 'ref-qwen2-Q8_0.gguf' };
const servers = [];

before(() => {
	fs.mkdirSync(path.join(dir, 'org'), { recursive: true });
	for (const [name, file] of Object.entries(FILES)) fs.symlinkSync(path.join(SHARED, 'models', file), path.join(dir, `${name}.gguf`));
	// a file that ends where its vocabulary should be
	fs.writeFileSync(path.join(dir, 'broken.gguf'), fs.readFileSync(path.join(SHARED, 'models', FILES['llama-q8'])).subarray(0, 1000));
	fs.writeFileSync(path.join(dir, 'notes.txt'), 'not a model');
});

after(() => {
	for (const s of servers) if (s.proc.exitCode === null) s.proc.kill('SIGKILL');
});

async function serve(args) {
	const s = await startServer(args);
	servers.push(s);
	return s;
}

const body = (model, i) => ({ model, prompt: `Once upon a time ${i}`, max_tokens: 12, temperature: 0.9, seed: 11 + i, logprobs: 2 });

// The reply's tokens and their log-probabilities, with each token's text in its model's vocabulary.
async function complete(url, model, i) {
	const r = await postJSON(`${url}/v1/completions`, body(model, i));
	assert.equal(r.status, 200, `${model}: ${JSON.stringify(r.body)}`);
	assert.equal(r.body.model, model);
	const c = r.body.choices[0];
	return JSON.stringify({ sha: c.token_sha, lp: c.logprobs });
}

const loaded = async (url) => (await getJSON(`${url}/api/ps`)).body.models.map((m) => m.name).sort();

test('each model answers by its name with the bits it writes alone, solo and interleaved with the others', async () => {
	// a model of another vocabulary (Qwen2's): its tokens' texts are its own
	const vdir = fs.mkdtempSync(path.join(TMP, 'models-vocab-'));
	for (const [name, file] of Object.entries(FILES)) fs.symlinkSync(path.join(SHARED, 'models', file), path.join(vdir, `${name.replace('/', '-')}.gguf`));
	fs.symlinkSync(agentModel(), path.join(vdir, 'agent.gguf'));
	const files = { stories260K: STORIES, 'llama-q8': path.join(SHARED, 'models', FILES['llama-q8']), 'org-qwen2': path.join(SHARED, 'models', FILES['org/qwen2']), agent: agentModel() };
	const multi = await serve(['-m', STORIES, '--models-dir', vdir, '--max-models', '3']);
	const solo = {};
	for (const [name, file] of Object.entries(files)) {
		const s = await serve(['-m', file, '--alias', name]);
		solo[name] = [];
		for (let i = 0; i < 3; i++) solo[name].push(await complete(s.url, name, i));
		s.proc.kill('SIGTERM');
		await s.exited;
	}
	assert.notEqual(solo['llama-q8'][0], solo['org-qwen2'][0], 'the models differ');
	// one at a time: the first request of each loads it
	for (const name of Object.keys(solo)) assert.equal(await complete(multi.url, name, 0), solo[name][0], `${name} alone`);
	// interleaved: every model at once, several requests each
	const jobs = [];
	for (let i = 0; i < 3; i++) for (const name of Object.keys(solo)) jobs.push(complete(multi.url, name, i).then((sha) => [name, i, sha]));
	for (const [name, i, sha] of await Promise.all(jobs)) assert.equal(sha, solo[name][i], `${name} #${i} among the others`);
	await assertWaitsSettled(assert, multi.url, ['model']);
});

test('listed by name with their state; a model idle past its keep-alive unloads, and loads again with the same bits', async () => {
	const s = await serve(['-m', STORIES, '--models-dir', dir, '--keep-alive', '1s']);
	const m = (await getJSON(`${s.url}/v1/models`)).body.data;
	const st = Object.fromEntries(m.map((o) => [o.id, o.status?.value]));
	assert.deepEqual(st, { stories260K: 'loaded', broken: 'failed', 'llama-q8': 'unloaded', 'org/qwen2': 'unloaded' });
	assert.match(m.find((o) => o.id === 'broken').status.error, /broken\.gguf/);
	const tags = (await getJSON(`${s.url}/api/tags`)).body.models.map((o) => o.name).sort();
	assert.deepEqual(tags, ['llama-q8:latest', 'org/qwen2:latest', 'stories260K:latest'], 'the models, not the broken file or the notes');

	const first = await complete(s.url, 'llama-q8', 0);
	// the weights are read at a lower priority, but no thread that serves runs at it
	const nice = fs.readdirSync(`/proc/${s.proc.pid}/task`).map((t) => {
		const stat = fs.readFileSync(`/proc/${s.proc.pid}/task/${t}/stat`, 'utf8');
		return Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[16]);
	});
	assert.ok(nice.length > 4 && nice.every((n) => n === 0), `every thread at nice 0 once loaded: ${nice}`);
	const ps = (await getJSON(`${s.url}/api/ps`)).body.models;
	assert.deepEqual(ps.map((o) => o.name).sort(), ['llama-q8:latest', 'stories260K:latest']);
	assert.ok(Date.parse(ps.find((o) => o.name === 'llama-q8:latest').expires_at) < Date.now() + 60000, 'it expires soon');
	// the gateway's figures and the residency beacon name each loaded model
	const m2 = await (await fetch(`${s.url}/metrics`)).text();
	for (const n of ['stories260K', 'llama-q8']) assert.match(m2, new RegExp(`^vllm:num_requests_running\\{model_name="${n}"\\} 0$`, 'm'));
	assert.doesNotMatch(m2, /model_name="org\/qwen2"/, 'a model not loaded has no figures');
	const res = (await getJSON(`${s.url}/v1/residency`)).body.models.map((o) => o.id).sort();
	assert.deepEqual(res, ['llama-q8', 'stories260K']);
	let gone = false;
	for (let i = 0; i < 100 && !gone; i++) {
		await sleep(100);
		// not loaded the moment it is unloading; unloaded once the reaper has freed it
		gone = !(await loaded(s.url)).includes('llama-q8:latest') && (await getJSON(`${s.url}/v1/models/llama-q8`)).body.status.value === 'unloaded';
	}
	assert.ok(gone, 'unloaded after its keep-alive');
	assert.equal(await complete(s.url, 'llama-q8', 0), first, 'loaded again: the same bits');

	// Ollama's keep_alive 0: unloaded once its request ends
	const r = await postJSON(`${s.url}/api/generate`, { model: 'org/qwen2:latest', prompt: 'Hi', stream: false, keep_alive: 0, options: { num_predict: 4 } });
	assert.equal(r.status, 200, JSON.stringify(r.body));
	gone = false;
	for (let i = 0; i < 50 && !gone; i++) {
		await sleep(100);
		gone = !(await loaded(s.url)).includes('org/qwen2:latest');
	}
	assert.ok(gone, 'keep_alive 0 unloads it after the request');
	// requests that come while it unloads wait for the unload, then load it again: every one answered, with the same bits
	const gen = async () => {
		const x = await postJSON(`${s.url}/api/generate`, { model: 'org/qwen2', prompt: 'Once upon', raw: true, stream: false, keep_alive: 0,
			options: { num_predict: 8, seed: 5, temperature: 0.9 } });
		assert.equal(x.status, 200, JSON.stringify(x.body));
		return x.body.response;
	};
	const kept = await gen();
	const churn = [];
	for (let i = 0; i < 8; i++) {
		churn.push(gen());
		await sleep(15 * i);
	}
	for (const got of await Promise.all(churn)) assert.equal(got, kept);
	// the reaper logs the last unload after the last reply
	const cycled = /model org\/qwen2 unloaded[\s\S]*loading org\/qwen2 for a request[\s\S]*model org\/qwen2 unloaded/;
	for (let i = 0; i < 100 && !cycled.test(s.log()); i++) await sleep(50);
	assert.match(s.log(), cycled);
	// loads and unloads leave nothing behind: the server stops cleanly (under ASan in .ci/run: nothing leaked)
	await complete(s.url, 'llama-q8', 1);
	s.proc.kill('SIGTERM');
	assert.deepEqual(await s.exited, { code: 0, signal: null });
});

test('--max-models: the least recently used idle model unloads for another', async () => {
	const s = await serve(['-m', STORIES, '--models-dir', dir, '--max-models', '1', '--keep-alive', '-1']);
	await complete(s.url, 'llama-q8', 0);
	assert.deepEqual(await loaded(s.url), ['llama-q8:latest', 'stories260K:latest']);
	await complete(s.url, 'org/qwen2', 0);
	assert.deepEqual(await loaded(s.url), ['org/qwen2:latest', 'stories260K:latest'], 'llama-q8 made room');
	assert.equal((await getJSON(`${s.url}/v1/models/org/qwen2`)).body.status.value, 'loaded');
	// a file that is no model never costs a loaded one its place
	const bad = await postJSON(`${s.url}/v1/completions`, body('broken', 0));
	assert.equal(bad.status, 500);
	assert.deepEqual(await loaded(s.url), ['org/qwen2:latest', 'stories260K:latest'], 'org/qwen2 still loaded');
});

test('--memory: the models loaded at once fit in it, the least recently used idle ones unloaded first, never a busy one; one too big is a 507', async () => {
	const mdir = fs.mkdtempSync(path.join(TMP, 'models-memory-'));
	fs.symlinkSync(path.join(SHARED, 'models', FILES['llama-q8']), path.join(mdir, 'llama-q8.gguf'));
	fs.symlinkSync(path.join(SHARED, 'models', FILES['org/qwen2']), path.join(mdir, 'qwen2.gguf'));
	fs.symlinkSync(STORIES, path.join(mdir, 'stories.gguf'));
	// what each needs at these lanes and KV (the planner's figures, which the kernel set moves), from a 507 each
	const LK = ['--lanes', '4', '--ctx', '8192'];
	const probe = await serve(['--models-dir', mdir, '--memory', '1MiB', ...LK]);
	const need = {};
	for (const m of ['llama-q8', 'qwen2', 'stories']) {
		const r = await postJSON(`${probe.url}/v1/completions`, body(m, 0));
		assert.equal(r.status, 507, JSON.stringify(r.body));
		need[m] = Number(r.body.error.message.match(/needs ([\d.]+) MiB loaded/)[1]);
	}
	// a budget where qwen2 and stories fit together, llama-q8 alone, and llama-q8 and stories not
	const B = need.qwen2 + need.stories + Math.min(0.5, (need['llama-q8'] - need.qwen2) / 2);
	assert.ok(need['llama-q8'] + need.stories > B + 0.2 && need['llama-q8'] < B, JSON.stringify(need));
	const s = await serve(['--models-dir', mdir, '--memory', `${B.toFixed(2)}MiB`, ...LK]);
	const run = async (model) => assert.equal((await postJSON(`${s.url}/v1/completions`, body(model, 0))).status, 200, model);
	await run('llama-q8');
	await run('stories');
	assert.deepEqual(await loaded(s.url), ['stories:latest'], 'llama-q8 and stories do not fit together: the idle one went');
	await run('qwen2');
	assert.deepEqual(await loaded(s.url), ['qwen2:latest', 'stories:latest'], 'qwen2 and stories fit together: both stay (no count caps them)');
	await run('llama-q8');
	assert.deepEqual(await loaded(s.url), ['llama-q8:latest'], 'stories (least recently used), then qwen2 went for it');
	// a running request's model is never unloaded: the model that needs its room waits (parked) until it is let go, as Ollama queues
	const ctl = new AbortController();
	const stream = await fetch(`${s.url}/v1/completions`, { method: 'POST', headers: { 'Content-Type': 'application/json' }, signal: ctl.signal,
		body: JSON.stringify({ model: 'llama-q8', prompt: 'Once', max_tokens: 100000, stream: true, ignore_eos: true }) });
	const rd = stream.body.getReader();
	await rd.read();
	let done = false;
	const queued = postJSON(`${s.url}/v1/completions`, body('qwen2', 0)).then((r) => ((done = true), r));
	for (let i = 0; i < 100 && (await waits(s.url)).parked.model !== 1; i++) await sleep(20);
	assert.equal((await waits(s.url)).parked.model, 1, 'it waits for room');
	assert.equal(done, false);
	assert.deepEqual(await loaded(s.url), ['llama-q8:latest'], 'the busy model stays');
	ctl.abort();
	await rd.cancel().catch(() => {});
	const got = await queued;
	assert.equal(got.status, 200, JSON.stringify(got.body));
	assert.deepEqual(await loaded(s.url), ['qwen2:latest'], 'let go, it made room');
	// a model bigger than the whole budget: 507, saying what it needs (Ollama's client gets the same status)
	const small = await serve(['--models-dir', mdir, '--memory', `${(need.stories + 1).toFixed(1)}MiB`, ...LK]);
	const big = await postJSON(`${small.url}/v1/chat/completions`, { model: 'llama-q8', messages: [{ role: 'user', content: 'hi' }] });
	assert.equal(big.status, 507);
	assert.equal(big.body.error.code, 'insufficient_memory');
	assert.match(big.body.error.message, new RegExp(`'llama-q8' needs ${need['llama-q8']} MiB loaded, more than all of --memory ${(need.stories + 1).toFixed(1)} MiB`));
	assert.equal((await postJSON(`${small.url}/api/chat`, { model: 'llama-q8', messages: [{ role: 'user', content: 'hi' }], stream: false })).status, 507);
	assert.equal((await postJSON(`${small.url}/v1/completions`, body('stories', 0))).status, 200, 'a model that fits still serves');
	// beside a -m model, its share is taken first
	const total = need['llama-q8'] + need.stories - 1;
	const withM = await serve(['-m', STORIES, '--models-dir', mdir, '--memory', `${total.toFixed(1)}MiB`, ...LK]);
	const left = await postJSON(`${withM.url}/v1/completions`, body('llama-q8', 0));
	assert.equal(left.status, 507);
	const [, n, free] = left.body.error.message.match(/needs ([\d.]+) MiB loaded and ([\d.]+) MiB of --memory [\d.]+ MiB is free beside the -m model/);
	assert.equal(Number(n), need['llama-q8']);
	assert.ok(Math.abs(Number(free) - (total - need.stories)) < 0.15, `${free} MiB free of ${total} beside stories' ${need.stories}`);
	const none = spawnSync(BIN, ['serve', '--port', '0', '-m', path.join(SHARED, 'models', FILES['llama-q8']), '--models-dir', mdir, '--memory', '1MiB', ...LK],
		{ encoding: 'utf8', timeout: 20000 });
	assert.notEqual(none.status, 0);
	assert.match(none.stderr, /the -m model does not fit in 1\.0 MiB/);
	await assertWaitsSettled(assert, s.url, ['model']);
});

test('/api/show describes a model from its file without loading it, as it describes it loaded', async () => {
	const s = await serve(['--models-dir', dir]);
	const show = (model) => postJSON(`${s.url}/api/show`, { model });
	const before = await show('org/qwen2');
	assert.equal(before.status, 200, JSON.stringify(before.body));
	assert.deepEqual(await loaded(s.url), [], 'nothing loaded to describe it');
	assert.ok(before.body.capabilities.includes('completion'));
	assert.equal(before.body.model_info['general.architecture'], 'qwen2');
	assert.notEqual(before.body.details.parameter_size, '');
	await complete(s.url, 'org/qwen2', 0);
	assert.deepEqual(await loaded(s.url), ['org/qwen2:latest']);
	assert.deepEqual((await show('org/qwen2')).body, before.body, 'the same description loaded');
	const broken = await show('broken');
	assert.equal(broken.status, 500);
	assert.match(broken.body.error, /broken\.gguf/);
	assert.doesNotMatch(s.log(), /loading (broken|llama-q8)/);
});

test('a file put in the folder is served, one replaced serves its new weights once let go, one taken out is no longer served', async () => {
	const fdir = fs.mkdtempSync(path.join(TMP, 'models-files-'));
	fs.copyFileSync(path.join(SHARED, 'models', FILES['llama-q8']), path.join(fdir, 'a.gguf'));
	const s = await serve(['--models-dir', fdir, '--keep-alive', '-1']);
	const ids = async () => (await getJSON(`${s.url}/v1/models`)).body.data.map((m) => m.id).sort();
	assert.deepEqual(await ids(), ['a']);
	const before = await complete(s.url, 'a', 0);
	// put there while serving: a request naming it finds it
	fs.copyFileSync(path.join(SHARED, 'models', FILES['org/qwen2']), path.join(fdir, 'b.gguf'));
	assert.equal((await postJSON(`${s.url}/api/generate`, { model: 'b:latest', prompt: 'hi', stream: false, options: { num_predict: 2 } })).status, 200);
	assert.deepEqual(await ids(), ['a', 'b']);
	assert.doesNotMatch(s.log(), /left .*: no longer served/, 'reading the folder again keeps what it holds');
	// replaced under its name while loaded: once the folder is read again it unloads and loads the new file
	fs.copyFileSync(STORIES, path.join(fdir, 'a.tmp'));
	fs.renameSync(path.join(fdir, 'a.tmp'), path.join(fdir, 'a.gguf'));
	await sleep(1100); // a list reads the folder at most once a second
	await ids();
	const alone = await serve(['-m', STORIES, '--alias', 'a']);
	const want = await complete(alone.url, 'a', 0);
	alone.proc.kill('SIGTERM');
	const after = await complete(s.url, 'a', 0);
	assert.notEqual(after, before);
	assert.equal(after, want, 'the new file, bit for bit');
	assert.match(s.log(), /a changed in/);
	// taken out: no longer listed nor served
	fs.unlinkSync(path.join(fdir, 'b.gguf'));
	await sleep(1100);
	assert.deepEqual(await ids(), ['a']);
	assert.equal((await postJSON(`${s.url}/v1/completions`, body('b', 0))).status, 404);
});

test('several folders and --alias NAME=FILE: the first folder holding a name serves it, an alias before either', async () => {
	const d1 = fs.mkdtempSync(path.join(TMP, 'models-d1-')), d2 = fs.mkdtempSync(path.join(TMP, 'models-d2-'));
	const llama = path.join(SHARED, 'models', FILES['llama-q8']), qwen = path.join(SHARED, 'models', FILES['org/qwen2']);
	fs.symlinkSync(llama, path.join(d1, 'a.gguf'));
	fs.symlinkSync(qwen, path.join(d2, 'a.gguf'));
	fs.symlinkSync(qwen, path.join(d2, 'q.gguf'));
	const s = await serve(['--models-dir', d1, '--models-dir', d2, '--alias', `story=${STORIES}`, '--alias', `q=${llama}`]);
	assert.deepEqual((await getJSON(`${s.url}/v1/models`)).body.data.map((m) => m.id).sort(), ['a', 'q', 'story']);
	const alone = { llama: await serve(['-m', llama, '--alias', 'x']), story: await serve(['-m', STORIES, '--alias', 'x']) };
	const want = {};
	for (const [k, a] of Object.entries(alone)) {
		want[k] = (await complete(a.url, 'x', 0)).replace(/"x"/g, '');
		a.proc.kill('SIGTERM');
	}
	const got = async (name) => (await complete(s.url, name, 0)).replace(new RegExp(`"${name}"`, 'g'), '');
	assert.equal(await got('a'), want.llama, "a: the first folder's file");
	assert.equal(await got('q'), want.llama, "q: the alias's file, not the second folder's");
	assert.equal(await got('story'), want.story);
	// a file put in the second folder is found by name too
	fs.symlinkSync(qwen, path.join(d2, 'late.gguf'));
	assert.equal((await postJSON(`${s.url}/v1/completions`, body('late', 0))).status, 200);
	for (const [flags, why] of [[['--alias', 'x=/nonexistent.gguf'], /--alias x=\/nonexistent\.gguf: give NAME=FILE/], [['-m', STORIES, '--alias', 'a', '--alias', 'b'], /names the -m model once/],
		[['--alias', 'lonely', '--models-dir', d1], /--alias NAME names the -m model: give -m/], [['--alias', `a=${STORIES}`, '--models-dir', d1, '-m', STORIES, '--alias', 'a'], /the name is too long or taken/]]) {
		const r = spawnSync(BIN, ['serve', '--port', '0', ...flags], { encoding: 'utf8', timeout: 20000 });
		assert.notEqual(r.status, 0, flags.join(' '));
		assert.match(r.stderr, why);
	}
});

test("a model's adapters are its own: a request to another model that names one is a 404, never run on it", async () => {
	const adapter = path.join(TMP, `models-adapter-${process.pid}.gguf`);
	const g = spawnSync(BIN, ['gen', '--lora', '4', '-m', STORIES, '-o', adapter, '--seed', '3'], { encoding: 'utf8' });
	assert.equal(g.status, 0, g.stderr);
	const s = await serve(['-m', STORIES, '--lora', `sql=${adapter}`, '--models-dir', dir, '--adapters-dir', TMP]);
	// a base that is no model here is a 404, never the -m model instead
	const nobase = await postJSON(`${s.url}/v1/adapters`, { name: 'x', file: path.basename(adapter), base: 'nope' });
	assert.equal(nobase.status, 404);
	assert.equal(nobase.body.error.param, 'base');
	assert.equal((await postJSON(`${s.url}/v1/adapters`, { name: 'x', file: path.basename(adapter), base: 'stories260K' })).status, 200, 'the -m model by name');
	const ask = (model, lora) => postJSON(`${s.url}/v1/completions`, { model, prompt: 'Once', max_tokens: 4, lora });
	assert.equal((await ask('stories260K', [{ name: 'sql' }])).status, 200);
	for (const lora of [[{ name: 'sql' }], [{ id: 0 }]]) {
		const r = await ask('llama-q8', lora);
		assert.equal(r.status, 404, JSON.stringify(r.body));
		assert.equal(r.body.error.param, 'lora[0]');
	}
	assert.equal((await ask('llama-q8', undefined)).status, 200);
});

test('an adapter names its base model: loaded on it (loading it), requests naming the adapter run on it with the bits of a server of that model alone; it goes with its model', async () => {
	const adir = fs.mkdtempSync(path.join(TMP, 'models-adapters-'));
	const llama = path.join(SHARED, 'models', FILES['llama-q8']);
	const g = spawnSync(BIN, ['gen', '--lora', '4', '-m', llama, '-o', path.join(adir, 'lq.gguf'), '--seed', '7'], { encoding: 'utf8' });
	assert.equal(g.status, 0, g.stderr);
	const s = await serve(['--models-dir', dir, '--adapters-dir', adir]);
	const load = await postJSON(`${s.url}/v1/adapters`, { name: 'lq', file: 'lq.gguf', base: 'llama-q8' });
	assert.equal(load.status, 200, JSON.stringify(load.body));
	assert.equal(load.body.parent, 'llama-q8');
	assert.deepEqual(await loaded(s.url), ['llama-q8:latest'], 'its base loaded for it');
	const alone = await serve(['-m', llama, '--alias', 'llama-q8', '--lora', `lq=${path.join(adir, 'lq.gguf')}`]);
	for (let i = 0; i < 2; i++) assert.equal(await complete(s.url, 'lq', i), await complete(alone.url, 'lq', i), `lq #${i} as on a server of its model alone`);
	const lora = await postJSON(`${s.url}/v1/completions`, { ...body('llama-q8', 0), lora: [{ name: 'lq' }] });
	const named = await postJSON(`${alone.url}/v1/completions`, { ...body('llama-q8', 0), lora: [{ name: 'lq' }] });
	assert.equal(lora.body.choices[0].token_sha, named.body.choices[0].token_sha, 'named in lora, too');
	alone.proc.kill('SIGTERM');
	assert.deepEqual((await getJSON(`${s.url}/v1/adapters`)).body.data.map((a) => [a.name, a.parent]), [['lq', 'llama-q8']]);
	assert.ok((await getJSON(`${s.url}/v1/models`)).body.data.some((m) => m.id === 'lq' && m.parent === 'llama-q8'));
	// another model neither takes it by name in lora nor gets a second adapter of that name
	assert.equal((await postJSON(`${s.url}/v1/completions`, { ...body('org/qwen2', 0), lora: [{ name: 'lq' }] })).status, 404);
	const twice = await postJSON(`${s.url}/v1/adapters`, { name: 'lq', file: 'lq.gguf', base: 'org/qwen2' });
	assert.equal(twice.status, 409);
	assert.match(twice.body.error.message, /an adapter of llama-q8/);
	const unknown = await postJSON(`${s.url}/v1/adapters`, { name: 'zz', file: 'lq.gguf', base: 'nope' });
	assert.equal(unknown.status, 404);
	assert.equal(unknown.body.error.param, 'base');
	// unloaded with it: its model's keep-alive ends both
	assert.equal((await postJSON(`${s.url}/api/generate`, { model: 'llama-q8', prompt: 'x', raw: true, stream: false, keep_alive: 0, options: { num_predict: 1 } })).status, 200);
	for (let i = 0; i < 100 && (await loaded(s.url)).length; i++) await sleep(50);
	assert.deepEqual((await getJSON(`${s.url}/v1/adapters`)).body.data, []);
	assert.equal((await postJSON(`${s.url}/v1/completions`, body('lq', 0))).status, 404);
	// loaded again and deleted by name
	assert.equal((await postJSON(`${s.url}/v1/adapters`, { name: 'lq', file: 'lq.gguf', base: 'llama-q8' })).status, 200);
	const del = await fetch(`${s.url}/v1/adapters/lq`, { method: 'DELETE' });
	assert.equal(del.status, 200);
	assert.equal((await del.json()).parent, 'llama-q8');
	assert.equal((await postJSON(`${s.url}/v1/completions`, body('lq', 0))).status, 404);
	// a rank-4 adapter can load before its request parks (40_waits retries until one has waited)
	await assertWaitsSettled(assert, s.url, ['model']);
});

test('a --models-dir model overflows to a peer whose beacon holds it, with the text it writes here', async () => {
	const llama = path.join(SHARED, 'models', FILES['llama-q8']);
	// A holds 3 (a lane, 2 queued) and lists as many for B as B has lanes: room for the burst of 8 however slow A is
	const B = await serve(['-m', llama, '--alias', 'llama-q8', '--lanes', '6']);
	const A = await serve(['-m', STORIES, '--models-dir', dir, '--lanes', '1', '--queue', '2', '--overflow-queue', '1', '--peer', B.url, '--peer-poll-ms', '100']);
	const up = async () => /lanes_peer_up\{peer="[^"]+"\} 1/.test(await (await fetch(`${A.url}/metrics`)).text());
	for (let i = 0; i < 200 && !(await up()); i++) await sleep(50);
	assert.ok(await up(), 'A sees B');
	const req = (i) => ({ model: 'llama-q8', prompt: `Story ${i}:`, max_tokens: 48, ignore_eos: true, seed: 100 + i, temperature: 0.8 });
	const send = async (i) => {
		const r = await fetch(`${A.url}/v1/completions`, { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify(req(i)) });
		return { status: r.status, peer: r.headers.get('x-lanes-peer'), body: await r.json() };
	};
	await send(99); // loaded on A first: the burst finds it in
	const got = await Promise.all(Array.from({ length: 8 }, (_, i) => send(i)));
	for (const g of got) assert.equal(g.status, 200, JSON.stringify(g.body));
	const forwarded = got.filter((g) => g.peer === B.url).length;
	assert.ok(forwarded >= 1 && forwarded < 8, `A (1 lane, 2 queued) passed ${forwarded} of 8 to B`);
	assert.match(await (await fetch(`${A.url}/metrics`)).text(), new RegExp(`lanes_overflow_requests_total\\{peer="${B.url}",outcome="forwarded"\\} ${forwarded}`));
	// alone on A, idle: the same text
	for (const [i, g] of got.entries()) {
		const solo = await send(i);
		assert.equal(solo.peer, null);
		assert.equal(g.body.choices[0].text, solo.body.choices[0].text, `request ${i} (${g.peer ? 'on B' : 'on A'}) as alone on A`);
	}
	// a model no peer holds always runs here
	const q = await Promise.all(Array.from({ length: 3 }, (_, i) => fetch(`${A.url}/v1/completions`, { method: 'POST', headers: { 'Content-Type': 'application/json' },
		body: JSON.stringify({ ...req(i), model: 'org/qwen2' }) })));
	for (const r of q) {
		assert.equal(r.status, 200);
		assert.equal(r.headers.get('x-lanes-peer'), null);
	}
});

// A copy of file whose metadata reads but whose load fails: its tokenizer model is no known one.
function unloadable(file, out) {
	const b = Buffer.from(fs.readFileSync(file));
	const key = Buffer.from('tokenizer.ggml.model');
	const at = b.indexOf(key) + key.length + 4; // the key, then the value's type (a string: u32)
	const len = Number(b.readBigUInt64LE(at));
	b.fill('z', at + 8, at + 8 + len);
	fs.writeFileSync(out, b);
}

test('a load that fails frees the room it held: a request waiting for room goes on', async () => {
	const fdir = fs.mkdtempSync(path.join(TMP, 'models-fail-'));
	unloadable(path.join(SHARED, 'models', FILES['llama-q8']), path.join(fdir, 'bad.gguf'));
	fs.symlinkSync(path.join(SHARED, 'models', FILES['org/qwen2']), path.join(fdir, 'good.gguf'));
	const s = await serve(['--models-dir', fdir, '--max-models', '1']);
	for (let i = 0; i < 5; i++) {
		const [bad, good] = await Promise.all([postJSON(`${s.url}/v1/completions`, body('bad', i)), postJSON(`${s.url}/v1/completions`, body('good', i))]);
		assert.equal(bad.status, 500);
		assert.match(bad.body.error.message, /bad\.gguf/);
		assert.equal(good.status, 200, JSON.stringify(good.body));
		// unloaded again, so the next round's two race for the one place
		assert.equal((await postJSON(`${s.url}/api/generate`, { model: 'good', prompt: 'x', raw: true, stream: false, keep_alive: 0, options: { num_predict: 1 } })).status, 200);
		for (let k = 0; k < 100 && (await loaded(s.url)).length; k++) await sleep(20);
	}
	await assertWaitsSettled(assert, s.url, ['model']);
});

test('a file that is no model fails alone with a 500 naming it; an unknown name is a 404 listing the models', async () => {
	const s = await serve(['-m', STORIES, '--models-dir', dir]);
	const bad = await postJSON(`${s.url}/v1/chat/completions`, { model: 'broken', messages: [{ role: 'user', content: 'hi' }], max_tokens: 4 });
	assert.equal(bad.status, 500);
	assert.match(bad.body.error.message, /broken\.gguf/);
	await complete(s.url, 'llama-q8', 1);
	await complete(s.url, 'stories260K', 1);
	const none = await postJSON(`${s.url}/v1/completions`, body('nope', 0));
	assert.equal(none.status, 404);
	assert.equal(none.body.error.code, 'model_not_found');
	for (const n of ['stories260K', 'llama-q8', 'org/qwen2']) assert.ok(none.body.error.message.includes(`'${n}'`), none.body.error.message);
	const oll = await postJSON(`${s.url}/api/chat`, { model: 'nope', messages: [{ role: 'user', content: 'hi' }], stream: false });
	assert.equal(oll.status, 404);
	const w = await waits(s.url);
	assert.equal(w.parked.model, 0, 'nothing left waiting for a load');
});

test('without -m: the folder alone (the model cache by default); each request names its model, what is the -m model\'s is refused', async () => {
	const s = await serve(['--models-dir', dir]);
	const ids = async (url) => (await getJSON(`${url}/v1/models`)).body.data.map((m) => m.id).sort();
	assert.deepEqual(await ids(s.url), ['broken', 'llama-q8', 'org/qwen2'], 'the folder, and no model of its own');
	assert.equal((await getJSON(`${s.url}/health`)).status, 200, 'ready with nothing loaded');
	assert.deepEqual(await loaded(s.url), []);
	const alone = await serve(['-m', path.join(SHARED, 'models', FILES['llama-q8']), '--alias', 'llama-q8']);
	for (let i = 0; i < 2; i++) assert.equal(await complete(s.url, 'llama-q8', i), await complete(alone.url, 'llama-q8', i), `llama-q8 #${i} as served alone`);
	alone.proc.kill('SIGTERM');
	// a request that names no model is told which there are; an unknown name is a 404; bad JSON is a 400
	for (const [route, req] of [['/v1/completions', { prompt: 'hi', max_tokens: 2 }], ['/v1/chat/completions', { messages: [{ role: 'user', content: 'hi' }] }],
		['/api/chat', { messages: [{ role: 'user', content: 'hi' }], stream: false }], ['/v1/embeddings', { input: 'hi' }], ['/tokenize', { content: 'hi' }]]) {
		const r = await postJSON(`${s.url}${route}`, req);
		assert.equal(r.status, 400, `${route}: ${JSON.stringify(r.body)}`);
		assert.match(JSON.stringify(r.body), /name the model.*'llama-q8', 'org\/qwen2'/, route);
	}
	const unknown = await postJSON(`${s.url}/v1/chat/completions`, { model: 'nope', messages: [{ role: 'user', content: 'hi' }] });
	assert.equal(unknown.status, 404);
	assert.equal(unknown.body.error.code, 'model_not_found');
	const malformed = await fetch(`${s.url}/v1/completions`, { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: '{"model":' });
	assert.equal(malformed.status, 400);
	assert.match((await malformed.json()).error.message, /malformed JSON/);
	// learning and leases are the -m model's: refused, saying why; an adapter names its base model
	for (const [route, req] of [['/learn/grants', { adapter: 'a', rank: 4 }], ['/v1/leases', { lanes: 1 }], ['/v1/adapters/a', {}]]) {
		const r = await postJSON(`${s.url}${route}`, req);
		assert.equal(r.status, 404, route);
		assert.match(r.body.error.message, /need a model given with -m/, route);
	}
	const nobase = await postJSON(`${s.url}/v1/adapters`, { name: 'a', file: 'a.gguf' });
	assert.equal(nobase.status, 400);
	assert.equal(nobase.body.error.param, 'base');
	// the control reads answer without a model of their own; the loaded one is reported by name
	const slots = await getJSON(`${s.url}/slots`);
	assert.equal(slots.status, 200);
	assert.deepEqual(slots.body.lanes, []);
	assert.equal((await getJSON(`${s.url}/props`)).status, 200);
	const res = (await getJSON(`${s.url}/v1/residency`)).body;
	assert.deepEqual(res.models.map((m) => m.id), ['llama-q8']);
	const metrics = await (await fetch(`${s.url}/metrics`)).text();
	assert.match(metrics, /vllm:num_requests_running\{model_name="llama-q8"\} 0/);
	assert.doesNotMatch(metrics, /model_name=""/);
	const ex = await getJSON(`${s.url}/v1/experts`);
	assert.equal(ex.status, 400);
	assert.equal(ex.body.error.param, 'model');
	const dense = await getJSON(`${s.url}/v1/experts?model=llama-q8`);
	assert.equal(dense.status, 404);
	assert.match(dense.body.error.message, /llama-q8 has no experts/);
	assert.match((await getJSON(`${s.url}/v1/experts?model=org/qwen2`)).body.error.message, /not loaded now/);
	// no folder named: the model cache (LANES_MODELS here, ~/.cache/lanes/models by default)
	const cache = await startServer([], { LANES_MODELS: dir });
	servers.push(cache);
	assert.deepEqual(await ids(cache.url), ['broken', 'llama-q8', 'org/qwen2']);
	assert.equal(await complete(cache.url, 'llama-q8', 0), await complete(s.url, 'llama-q8', 0));
	// what needs the -m model stops the server before it listens, saying so
	for (const [flags, why] of [[['--lora', 'a.gguf'], /--lora needs a model given with -m/], [['--draft-model', STORIES], /--draft-model needs a model given with -m/],
		[['--peer', 'http://127.0.0.1:1'], /--peer needs a model given with -m/], [['--memory', '1GiB', '--window', '512'], /--window is the one-model plan's/]]) {
		const r = spawnSync(BIN, ['serve', '--port', '0', '--models-dir', dir, ...flags], { encoding: 'utf8', timeout: 20000 });
		assert.notEqual(r.status, 0, flags.join(' '));
		assert.match(r.stderr, why);
	}
});

test('the openai and ollama clients list every model, and the ollama client runs one by name', async () => {
	const s = await serve(['-m', STORIES, '--models-dir', dir]);
	const openai = new OpenAI({ baseURL: `${s.url}/v1`, apiKey: 'none' });
	const ids = [];
	for await (const m of openai.models.list()) ids.push(m.id);
	assert.deepEqual(ids.sort(), ['broken', 'llama-q8', 'org/qwen2', 'stories260K']);
	const ollama = new Ollama({ host: s.url });
	assert.deepEqual((await ollama.list()).models.map((m) => m.name).sort(), ['llama-q8:latest', 'org/qwen2:latest', 'stories260K:latest']);
	const g = await ollama.generate({ model: 'org/qwen2', prompt: 'Hi', options: { num_predict: 4, seed: 1 } });
	assert.equal(g.model, 'org/qwen2');
	assert.ok(g.eval_count > 0);
	assert.deepEqual((await ollama.ps()).models.map((m) => m.name).sort(), ['org/qwen2:latest', 'stories260K:latest']);
});

test('Ollama\'s pull, copy and delete act on the folder: what they write is served by name, what they delete is not', async (t) => {
	const mdir = fs.mkdtempSync(path.join(TMP, 'models-pull-'));
	const gguf = fs.readFileSync(path.join(SHARED, 'models', FILES['llama-q8']));
	const sha = crypto.createHash('sha256').update(gguf).digest('hex');
	const hub = http.createServer((req, res) => {
		const u = new URL(req.url, 'http://x');
		if (u.pathname === '/api/models/org/repo/tree/main') {
			res.setHeader('content-type', 'application/json');
			return res.end(JSON.stringify([{ type: 'file', path: 'tiny-Q8_0.gguf' }]));
		}
		if (u.pathname === '/org/repo/resolve/main/tiny-Q8_0.gguf') {
			res.writeHead(302, { location: '/cdn/tiny', 'x-linked-etag': `"${sha}"`, 'x-linked-size': String(gguf.length) });
			return res.end();
		}
		if (u.pathname === '/cdn/tiny') {
			res.writeHead(200, { 'content-length': gguf.length });
			return res.end(gguf);
		}
		res.writeHead(404);
		res.end();
	});
	await new Promise((r) => hub.listen(0, '127.0.0.1', r));
	t.after(() => hub.close());
	const s = await startServer(['-m', STORIES, '--models-dir', mdir], { LANES_HF_ENDPOINT: `http://127.0.0.1:${hub.address().port}` });
	servers.push(s);
	const ollama = new Ollama({ host: s.url });
	assert.deepEqual((await ollama.list()).models.map((m) => m.name), ['stories260K:latest']);
	assert.deepEqual(await ollama.pull({ model: 'hf.co/org/repo:Q8_0', stream: false }), { status: 'success' });
	assert.deepEqual((await ollama.list()).models.map((m) => m.name).sort(), ['org/repo/tiny-Q8_0:latest', 'stories260K:latest']);
	// by its file's name or the reference it was pulled by, in the OpenAI and Ollama APIs
	const byRef = await postJSON(`${s.url}/v1/completions`, body('org/repo:Q8_0', 0));
	assert.equal(byRef.status, 200, JSON.stringify(byRef.body));
	const oll = await ollama.generate({ model: 'org/repo:Q8_0', prompt: 'Hi', options: { num_predict: 4 } });
	assert.ok(oll.eval_count > 0);
	assert.equal(JSON.parse(await complete(s.url, 'org/repo/tiny-Q8_0', 0)).sha, byRef.body.choices[0].token_sha);
	await ollama.copy({ source: 'org/repo:Q8_0', destination: 'mine' });
	assert.equal(JSON.parse(await complete(s.url, 'mine', 0)).sha, byRef.body.choices[0].token_sha, 'the copy is the same model');
	await ollama.delete({ model: 'org/repo:Q8_0' });
	assert.deepEqual((await ollama.list()).models.map((m) => m.name).sort(), ['mine:latest', 'stories260K:latest']);
	const gone = await postJSON(`${s.url}/v1/completions`, body('org/repo/tiny-Q8_0', 0));
	assert.equal(gone.status, 404, JSON.stringify(gone.body));
	let out = false;
	for (let i = 0; i < 50 && !out; i++) {
		out = !(await loaded(s.url)).includes('org/repo/tiny-Q8_0:latest');
		if (!out) await sleep(100);
	}
	assert.ok(out, 'a deleted model unloads');
});

test("a model loading never holds up another's stream: its tokens keep coming while the other loads", async () => {
	const bdir = fs.mkdtempSync(path.join(TMP, 'models-big-'));
	fs.symlinkSync(bigModel(), path.join(bdir, 'big.gguf'));
	const s = await serve(['-m', STORIES, '--models-dir', bdir]);
	const order = [];
	const res = await fetch(`${s.url}/v1/completions`, {
		method: 'POST', headers: { 'content-type': 'application/json' },
		body: JSON.stringify({ prompt: 'Once upon a time', max_tokens: 100000, ignore_eos: true, stream: true }),
	});
	const reader = res.body.getReader();
	let streaming = true;
	const pump = (async () => {
		while (streaming) {
			const { done } = await reader.read();
			if (done) break;
			order.push('a');
		}
	})();
	while (order.length < 5) await sleep(5);
	order.push('b-sent');
	const b = await postJSON(`${s.url}/v1/completions`, { model: 'big', prompt: 'Hi', max_tokens: 2 });
	order.push('b-answered');
	streaming = false;
	await reader.cancel();
	await pump;
	assert.equal(b.status, 200, JSON.stringify(b.body));
	const during = order.slice(order.indexOf('b-sent'), order.indexOf('b-answered')).filter((e) => e === 'a').length;
	assert.ok(during >= 3, `the stream went on while the other model loaded (${during} reads between)`);
	assert.match(s.log(), /model big loaded/);
});
