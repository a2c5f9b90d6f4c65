// LoRA adapters over HTTP, on servers of their own started with three adapters: the official
// clients pick one with "model" (chat, messages, responses; Ollama's too) or with "lora"
// (llama-server's shape); unknown names get 404 in each API's shape; /v1/models and
// /v1/adapters list them; 16 requests over three adapters and the base give the same tokens
// solo, concurrent, in prompt pieces, from the prefix cache (each set its own) and drafted;
// adapters load and unload while 8 streams run without changing a token; bad files get a 4xx.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import OpenAI from 'openai';
import Anthropic from '@anthropic-ai/sdk';
import { BIN, STORIES, SHARED, TMP, KEY, startServer, getJSON, postJSON, sleep, assertWaitsSettled } from './lib.mjs';

const auth = { Authorization: `Bearer ${KEY}` };
const DIR = path.join(TMP, 'lora-http');
const file = (n) => path.join(DIR, `${n}.gguf`);
let S1, S2, oai, ant;

function gen(out, rank, seed, base = STORIES, type = 'F32') {
	const r = spawnSync(BIN, ['gen', '--lora', String(rank), '-m', base, '-o', out, '--seed', String(seed), '--type', type], { encoding: 'utf8' });
	assert.equal(r.status, 0, r.stderr);
}

before(async () => {
	fs.mkdirSync(DIR, { recursive: true });
	gen(file('a'), 8, 2);
	gen(file('b'), 4, 3, STORIES, 'F16');
	gen(file('c'), 16, 4, STORIES, 'BF16');
	gen(file('d'), 8, 5);
	gen(file('other'), 4, 6, path.join(SHARED, 'models/ref-llama-F32.gguf'));
	const whole = fs.readFileSync(file('a'));
	fs.writeFileSync(file('cut'), whole.subarray(0, Math.floor(whole.length * 0.8)));
	const loras = ['--lora', `a=${file('a')}`, '--lora', `b=${file('b')}:0.5`, '--lora', file('c')];
	// rows priced as cheap beside a round's fixed cost: n-gram drafts pay, on any machine
	S1 = await startServer(['-m', STORIES, '--api-key', KEY, '--lanes', '8', '--max-lora', '4', '--price-row-us', '100', '--price-fixed-us', '20000',
		'--adapters-dir', DIR, ...loras]);
	S2 = await startServer(['-m', STORIES, '--api-key', KEY, '--lanes', '4', '--piece', '7', '--draft', 'off', ...loras]);
	oai = new OpenAI({ baseURL: `${S1.url}/v1`, apiKey: KEY, maxRetries: 0 });
	ant = new Anthropic({ baseURL: S1.url, apiKey: KEY, maxRetries: 0 });
});

after(() => {
	for (const s of [S1, S2]) if (s && s.proc.exitCode === null) s.proc.kill('SIGKILL');
});

const adapters = async (url) => (await getJSON(`${url}/v1/adapters`, { headers: auth })).body;

test('/v1/models and /v1/adapters list the base and its adapters', async () => {
	const models = (await getJSON(`${S1.url}/v1/models`)).body.data;
	assert.deepEqual(models.map((m) => m.id), ['stories260K', 'a', 'b', 'c']);
	for (const m of models.slice(1)) {
		assert.equal(m.parent, 'stories260K');
		assert.equal(m.root, file(m.id));
	}
	assert.equal((await getJSON(`${S1.url}/v1/models/b`)).body.parent, 'stories260K');
	const list = await adapters(S1.url);
	assert.equal(list.max_lora, 4);
	const b = list.data.find((x) => x.name === 'b');
	assert.deepEqual([b.id, b.version, b.status, b.scale, b.rank, b.path], [1, 1, 'ready', 0.5, 4, file('b')]);
	assert.ok(b.targets.includes('attn_q') && b.targets.includes('ffn_down') && b.bytes > 0);
	assert.deepEqual([b.requests_running, b.requests_waiting], [0, 0]);
	assert.equal(list.data.find((x) => x.name === 'c').rank, 16);
});

test('the residency beacon lists the adapters a peer may forward to, and drops one as it unloads', async () => {
	const beacon = async () => (await getJSON(`${S1.url}/v1/residency`)).body.models[0].adapters;
	assert.deepEqual(await beacon(), ['a', 'b', 'c']);
	const r = await postJSON(`${S1.url}/v1/adapters`, { name: 'd', file: 'a.gguf' });
	assert.equal(r.status, 200, JSON.stringify(r.body));
	assert.deepEqual(await beacon(), ['a', 'b', 'c', 'd']);
	const del = await fetch(`${S1.url}/v1/adapters/d`, { method: 'DELETE', headers: auth });
	assert.ok(del.status === 200 || del.status === 202);
	assert.deepEqual(await beacon(), ['a', 'b', 'c']);
});

test('"model" picks an adapter in chat, messages and responses, and changes the output', async () => {
	const msgs = [{ role: 'user', content: 'Once upon a time' }];
	const chat = async (model) => oai.chat.completions.create({ model, messages: msgs, max_tokens: 24, temperature: 0, ignore_eos: true });
	const base = await chat('stories260K'), a = await chat('a'), a2 = await chat('a');
	assert.equal(a.model, 'a');
	assert.equal(a.choices[0].message.content, a2.choices[0].message.content);
	assert.notEqual(a.choices[0].token_sha, base.choices[0].token_sha, 'the adapter changes the tokens');
	const m = await ant.messages.create({ model: 'a', max_tokens: 24, messages: msgs, temperature: 0, ignore_eos: true });
	assert.equal(m.model, 'a');
	assert.equal(m.content[0].text, a.choices[0].message.content, 'messages with the adapter = chat with it');
	const mb = await ant.messages.create({ model: 'stories260K', max_tokens: 24, messages: msgs, temperature: 0, ignore_eos: true });
	assert.equal(mb.content[0].text, base.choices[0].message.content);
	const r = await oai.responses.create({ model: 'a', input: 'Once upon a time', max_output_tokens: 24, temperature: 0, ignore_eos: true });
	assert.equal(r.model, 'a');
	assert.equal(r.output_text, a.choices[0].message.content, 'responses with the adapter = chat with it');
	// Ollama's model names an adapter too, with or without its tag
	for (const model of ['a', 'a:latest']) {
		const o = await postJSON(`${S1.url}/api/chat`, { model, messages: msgs, stream: false, options: { temperature: 0, num_predict: 24, repeat_penalty: 1 } });
		assert.equal(o.status, 200, JSON.stringify(o.body));
		assert.equal(o.body.message.content, a.choices[0].message.content.slice(0, o.body.message.content.length));
	}
});

test('"lora": by name or id, scales, several at once; scale 0 is the base', async () => {
	const body = { prompt: 'The little dog', max_tokens: 20, temperature: 0, ignore_eos: true };
	const sha = async (extra) => (await oai.completions.create({ ...body, ...extra })).choices[0].token_sha;
	const ids = Object.fromEntries((await adapters(S1.url)).data.map((x) => [x.name, x.id]));
	const a = await sha({ model: 'a' });
	assert.equal(await sha({ lora: [{ name: 'a' }] }), a);
	assert.equal(await sha({ lora: [{ id: ids.a, scale: 1 }] }), a);
	assert.equal(await sha({ model: 'stories260K', lora: [{ name: 'a', scale: 1 }] }), a);
	const base = await sha({});
	assert.equal(await sha({ lora: [{ name: 'a', scale: 0 }] }), base, 'scale 0 turns an adapter off');
	const ab = await sha({ lora: [{ name: 'a' }, { name: 'b', scale: 0.5 }] });
	assert.equal(await sha({ model: 'a', lora: [{ name: 'b' }] }), ab, '"model" first, then "lora" (b at its own 0.5)');
	assert.notEqual(ab, a);
	assert.notEqual(await sha({ lora: [{ name: 'a', scale: 2 }] }), a);
	const bad = [[{ name: 'a' }, { name: 'a' }], [{ name: 'a', id: 0 }], [{}], [{ name: 'a', scale: 'x' }], [{ name: 'a', scale: 1e9 }], [{ name: 'a', extra: 1 }], 'a'];
	for (const lora of bad) {
		const r = await postJSON(`${S1.url}/v1/completions`, { ...body, lora });
		assert.equal(r.status, 400, JSON.stringify(lora));
		assert.match(r.body.error.param, /^lora/);
	}
});

test('an unknown adapter is a 404 in each API\'s shape, with or without --strict-model', async () => {
	await assert.rejects(oai.chat.completions.create({ model: 'nope', messages: [{ role: 'user', content: 'hi' }] }),
		(e) => e.status === 404 && e.code === 'model_not_found');
	await assert.rejects(oai.responses.create({ model: 'nope', input: 'hi' }), (e) => e.status === 404 && e.code === 'model_not_found');
	await assert.rejects(ant.messages.create({ model: 'nope', max_tokens: 8, messages: [{ role: 'user', content: 'hi' }] }),
		(e) => e.status === 404 && e.error.error.type === 'not_found_error');
	await assert.rejects(oai.completions.create({ prompt: 'hi', lora: [{ name: 'nope' }] }), (e) => e.status === 404 && e.param === 'lora[0]');
	await assert.rejects(oai.completions.create({ prompt: 'hi', lora: [{ id: 99 }] }), (e) => e.status === 404);
	const o = await postJSON(`${S1.url}/api/chat`, { model: 'nope', messages: [{ role: 'user', content: 'hi' }], stream: false });
	assert.equal(o.status, 404);
	assert.match(o.body.error, /not found/);
	assert.equal((await getJSON(`${S1.url}/v1/models/nope`)).status, 404);
});

// 16 requests: every fourth on the base, a, b and a+c; prompts share one long head, every
// third repeats a phrase (for n-gram drafts); greedy and seeded sampling.
const HEAD = 'Once upon a time, in a little town by the sea, there lived a girl named Lily who loved to play in the sand with her dog.';
const sets = [{}, { model: 'a' }, { model: 'b' }, { lora: [{ name: 'a' }, { name: 'c', scale: 1.5 }] }];
const reqs = Array.from({ length: 16 }, (_, i) => ({
	...sets[i % 4],
	prompt: HEAD + (i % 3 === 0 ? ' Tom said hi. Tom said hi. Tom said hi.' : ` Day ${i}: the`),
	max_tokens: 32,
	temperature: i % 2 ? 0.9 : 0,
	seed: 40 + i,
	ignore_eos: true,
}));

async function complete(url, body) {
	const r = await postJSON(`${url}/v1/completions`, body);
	assert.equal(r.status, 200, JSON.stringify(r.body));
	return { sha: r.body.choices[0].token_sha, text: r.body.choices[0].text, cached: r.body.usage.prompt_tokens_details.cached_tokens };
}

test('16 requests over three adapters and the base: solo = concurrent = pieces = prefix-cache hit = drafted', async () => {
	const solo = [];
	for (const q of reqs) solo.push(await complete(S1.url, { ...q, draft: false }));
	// the first request of each adapter set finds the head cached under another set only
	for (let i = 1; i < 4; i++) assert.equal(solo[i].cached, 0, `request ${i}: no page of another set`);
	assert.ok(solo.slice(4).every((x) => x.cached >= 16), 'later requests of every set run from their own cached head');
	const together = await Promise.all(reqs.map((q) => complete(S1.url, { ...q, draft: false })));
	const drafted = await Promise.all(reqs.map((q) => complete(S1.url, q)));
	const pieces = await Promise.all(reqs.map((q) => complete(S2.url, q)));
	for (let i = 0; i < reqs.length; i++) {
		assert.equal(together[i].sha, solo[i].sha, `request ${i}: concurrent`);
		assert.equal(drafted[i].sha, solo[i].sha, `request ${i}: drafted`);
		assert.equal(pieces[i].sha, solo[i].sha, `request ${i}: in pieces of 7`);
		assert.equal(drafted[i].text, solo[i].text);
	}
	assert.ok(new Set(solo.slice(0, 4).map((x) => x.sha)).size === 4, 'each set gives its own tokens');
	const m = await (await fetch(`${S1.url}/metrics`)).text();
	assert.match(m, /lanes_draft_accepted_tokens_total\{proposer="ngram"\} [1-9]/);
	assert.match(m, /lanes_lora_requests_total\{adapter="a"\} [1-9]/);
});

test('bad adapter files and requests get a clear 4xx, and the server keeps serving', async () => {
	const post = (body) => postJSON(`${S1.url}/v1/adapters`, body);
	let r = await post({ name: 'x', file: 'other.gguf' });
	assert.equal(r.status, 400);
	assert.match(r.body.error.message, /other\.gguf: lora: tensor blk\.0\.\S+\.lora_[ab] has shape/);
	r = await post({ name: 'x', file: 'cut.gguf' });
	assert.equal(r.status, 400);
	assert.match(r.body.error.message, /cut\.gguf/);
	fs.copyFileSync(STORIES, path.join(DIR, 'model.gguf'));
	r = await post({ name: 'x', file: 'model.gguf' });
	assert.equal(r.status, 400);
	assert.match(r.body.error.message, /general\.type/);
	r = await post({ name: 'x', file: 'none.gguf' });
	assert.equal(r.status, 400);
	r = await post({ name: 'x', path: file('d') });
	assert.equal(r.status, 400, 'a path is not taken over HTTP');
	assert.match(r.body.error.message, /--adapters-dir/);
	assert.equal((await post({ name: 'a', file: 'd.gguf' })).status, 409, 'a name taken');
	assert.equal((await post({ name: 'stories260K', file: 'd.gguf' })).status, 409, 'the base model\'s name');
	assert.equal((await post({ name: 'no/slash', file: 'd.gguf' })).status, 400);
	assert.equal((await post({})).status, 400);
	assert.equal((await post({ name: 'x' })).status, 400, 'x.gguf is not in the folder');
	assert.equal((await post({ name: 'x', file: 'd.gguf', scale: 'big' })).status, 400);
	assert.equal((await post({ name: 'x', file: 'd.gguf', extra: 1 })).status, 400);
	assert.equal((await post({ name: 'zz', file: 'd.gguf', replace: true })).status, 404);
	const noKey = await fetch(`${S1.url}/v1/adapters`, { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify({ name: 'x', file: 'd.gguf' }) });
	assert.equal(noKey.status, 401);
	assert.equal((await fetch(`${S1.url}/v1/adapters/zz`, { method: 'DELETE', headers: auth })).status, 404);
	assert.deepEqual((await adapters(S1.url)).data.map((x) => x.name), ['a', 'b', 'c'], 'nothing was added');
	const ok = await oai.completions.create({ model: 'b', prompt: 'Hi', max_tokens: 4 });
	assert.equal(ok.choices[0].finish_reason, 'length');
});

test('--max-lora bounds the adapters loaded; a POSTed one serves at once and DELETE frees its name', async () => {
	let r = await postJSON(`${S1.url}/v1/adapters`, { name: 'd', file: 'd.gguf', scale: 0.75 });
	assert.equal(r.status, 200, JSON.stringify(r.body));
	assert.deepEqual([r.body.name, r.body.version, r.body.scale, r.body.rank, r.body.status], ['d', 1, 0.75, 8, 'ready']);
	assert.ok(r.body.load_ms >= 0);
	r = await postJSON(`${S1.url}/v1/adapters`, { name: 'e', file: 'd.gguf' });
	assert.equal(r.status, 409);
	assert.match(r.body.error.message, /--max-lora 4/);
	const viaName = await complete(S1.url, { model: 'd', prompt: 'The sun', max_tokens: 12, temperature: 0 });
	const viaFile = await complete(S1.url, { lora: [{ name: 'a', scale: 0 }, { name: 'd' }], prompt: 'The sun', max_tokens: 12, temperature: 0 });
	assert.equal(viaName.sha, viaFile.sha);
	const del = await fetch(`${S1.url}/v1/adapters/d`, { method: 'DELETE', headers: auth });
	assert.equal(del.status, 200);
	assert.equal((await del.json()).status, 'unloaded');
	assert.equal((await postJSON(`${S1.url}/v1/completions`, { model: 'd', prompt: 'x' })).status, 404);
});

test('loading, replacing and unloading adapters while 8 streams run changes none of their tokens', async () => {
	const bodies = Array.from({ length: 8 }, (_, i) => ({ ...[{}, { model: 'a' }, { model: 'b' }, { model: 'a' }][i % 4], prompt: `Story ${i}:`,
		max_tokens: 200, temperature: i % 2 ? 0.7 : 0, seed: 90 + i, ignore_eos: true }));
	const reference = await Promise.all(bodies.map((b) => complete(S1.url, b)));
	// the same requests streamed; once each has its first token, adapters come and go
	const firsts = [], done = [];
	const streams = bodies.map((b, i) => new Promise((resolve, reject) => {
		let first = null;
		firsts.push(new Promise((r) => (first = r)));
		(async () => {
			let text = '', sha = null;
			for await (const ch of await oai.completions.create({ ...b, stream: true })) {
				first();
				text += ch.choices[0]?.text || '';
				if (ch.choices[0]?.token_sha) sha = ch.choices[0].token_sha;
			}
			first();
			done[i] = true;
			resolve({ text, sha });
		})().catch(reject);
	}));
	await Promise.all(firsts);
	const info = (await (await fetch(`${S1.url}/metrics`)).text()).split('\n');
	const line = info.find((l) => l.startsWith('vllm:lora_requests_info{'));
	assert.match(line, /running_lora_adapters="[^"]*\ba\b[^"]*",waiting_lora_adapters="[^"]*",max_lora="4"\} \d+\.\d+$/);
	assert.equal(info.find((l) => l.startsWith('lanes_lora_requests_info{')).replace('lanes_', 'vllm:'), line);
	let r = await postJSON(`${S1.url}/v1/adapters`, { name: 'd', file: 'd.gguf' });
	assert.equal(r.status, 200);
	r = await postJSON(`${S1.url}/v1/adapters`, { name: 'b', file: 'd.gguf', replace: true });
	assert.equal(r.status, 200);
	assert.equal(r.body.version, 2);
	const inUse = !done[1] || !done[3]; // the streams on a (a machine fast enough may have ended them)
	const del = await fetch(`${S1.url}/v1/adapters/a`, { method: 'DELETE', headers: auth });
	const delBody = await del.json();
	if (inUse) {
		assert.equal(del.status, 202, 'a is in use: it goes when its requests end');
		assert.equal(delBody.status, 'unloading');
	}
	assert.equal((await postJSON(`${S1.url}/v1/completions`, { model: 'a', prompt: 'x', max_tokens: 2 })).status, 404, 'new requests get 404 at once');
	const during = (await adapters(S1.url)).data;
	if (!done[1] && !done[3]) assert.ok(during.some((x) => x.name === 'a' && x.status === 'retired'), JSON.stringify(during));
	if (!done[2]) assert.ok(during.some((x) => x.name === 'b' && x.status === 'retired'), 'b\'s first version serves its running request');
	const got = await Promise.all(streams);
	for (let i = 0; i < bodies.length; i++) {
		assert.equal(got[i].sha, reference[i].sha, `stream ${i}: tokens`);
		assert.equal(got[i].text, reference[i].text, `stream ${i}: text`);
	}
	// the retired versions go once their requests ended
	let left;
	for (let k = 0; k < 100; k++) {
		left = (await adapters(S1.url)).data.filter((x) => x.status === 'retired');
		if (!left.length) break;
		await sleep(20);
	}
	assert.deepEqual(left, []);
	assert.deepEqual((await adapters(S1.url)).data.map((x) => [x.name, x.version]), [['b', 2], ['c', 1], ['d', 1]]);
	const b2 = await complete(S1.url, { model: 'b', prompt: 'The sun', max_tokens: 12, temperature: 0 });
	const d = await complete(S1.url, { model: 'd', prompt: 'The sun', max_tokens: 12, temperature: 0 });
	assert.notEqual(b2.sha, d.sha, 'b is now d\'s file at b\'s scale (0.5)');
	const b2full = await complete(S1.url, { lora: [{ name: 'b', scale: 1 }], prompt: 'The sun', max_tokens: 12, temperature: 0 });
	assert.equal(b2full.sha, d.sha, 'b version 2 at scale 1 is d');
});

test('lanes serve stops with a message naming the file when a --lora adapter cannot be loaded', () => {
	const run = (...args) => spawnSync(BIN, ['serve', '-m', STORIES, '--port', '0', ...args], { encoding: 'utf8', timeout: 60000 });
	let r = run('--lora', `x=${file('other')}`);
	assert.equal(r.status, 1);
	assert.match(r.stderr, /--lora x: .*other\.gguf: lora: tensor blk\.0\.\S+ has shape/);
	r = run('--lora', `a=${file('a')}`, '--lora', `b=${file('b')}`, '--max-lora', '1');
	assert.equal(r.status, 1);
	assert.match(r.stderr, /2 --lora adapters, more than --max-lora 1/);
	r = run('--lora', `stories260K=${file('a')}`);
	assert.equal(r.status, 1);
	assert.match(r.stderr, /the name is the base model's/);
	r = run('--lora', `a=${file('a')}`, '--lora', `a=${file('b')}`);
	assert.equal(r.status, 1);
	assert.match(r.stderr, /--lora a: two adapters have that name/);
});

test('every request that waited for an adapter load, its route or the engine was woken exactly once', async () => {
	await assertWaitsSettled(assert, S1.url, ['load', 'work', 'engine']);
});
