// Through HTTP, the same 16 requests give identical text and token hashes whether they run
// one at a time or all at once (lanes share rounds; a request's tokens never depend on them).
import { test, before } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import { spawn, execFileSync } from 'node:child_process';
import path from 'node:path';
import { mainServer, metric, shapeModel, startServer, BIN, STORIES, KEY, TMP, SHARED } from './lib.mjs';

let client;
before(async () => {
	const { url } = await mainServer();
	client = new OpenAI({ baseURL: `${url}/v1`, apiKey: KEY, maxRetries: 0 });
});

const starts = ['Once upon a time', 'The little dog', 'Lily and Tom', 'One sunny day', 'The big red ball', 'A girl named Sue',
	'In the park', 'The cat was sad', 'Mom said', 'The bird flew', 'Ben had a toy', 'It was raining', 'The tree was tall',
	'Anna liked to', 'The boat', 'At night'];

// half chat, half completions; greedy and sampled; streamed and not
const requests = starts.map((s, i) => ({
	kind: i % 2 ? 'chat' : 'completion',
	stream: i % 4 < 2,
	body: { max_tokens: 24 + (i % 5) * 8, temperature: i % 3 ? 0.8 : 0, seed: 1000 + i, ...(i % 2 ? { messages: [{ role: 'user', content: s }] } : { prompt: s }) },
}));

async function run(r) {
	const api = r.kind === 'chat' ? client.chat.completions : client.completions;
	if (!r.stream) {
		const x = await api.create(r.body);
		const c = x.choices[0];
		return { text: r.kind === 'chat' ? c.message.content : c.text, sha: c.token_sha };
	}
	let text = '', sha = null;
	for await (const ch of await api.create({ ...r.body, stream: true }))
		for (const c of ch.choices) {
			text += (r.kind === 'chat' ? c.delta.content : c.text) || '';
			if (c.token_sha) sha = c.token_sha;
		}
	return { text, sha };
}

test('16 requests: solo and concurrent give identical text', async () => {
	const solo = [];
	for (const r of requests) solo.push(await run(r));
	const together = await Promise.all(requests.map(run));
	for (let i = 0; i < requests.length; i++) {
		assert.match(solo[i].sha, /^[0-9a-f]{64}$/);
		assert.equal(together[i].text, solo[i].text, `request ${i} text`);
		assert.equal(together[i].sha, solo[i].sha, `request ${i} tokens`);
	}
	assert.ok(new Set(solo.map((s) => s.text)).size > 8, 'the requests differ from each other');
});

// Speculative decoding never changes a token: the same requests with "draft": false give
// the same text and receipts, and on repetitive text the drafts are accepted.
test('drafted = "draft": false, and drafts get accepted on repetitive text', async () => {
	const { url } = await mainServer();
	const rep = 'Lily saw a cat. Lily saw a cat. Lily saw a cat. Lily saw a cat.';
	const reqs = [...requests.slice(0, 8), { kind: 'completion', stream: false, body: { prompt: rep, max_tokens: 48, temperature: 0, seed: 7 } }];
	const before = await metric(url, 'lanes_draft_accepted_tokens_total{proposer="ngram"}');
	const drafted = await Promise.all(reqs.map(run));
	const plain = await Promise.all(reqs.map((r) => run({ ...r, body: { ...r.body, draft: false } })));
	for (let i = 0; i < reqs.length; i++) {
		assert.equal(drafted[i].sha, plain[i].sha, `request ${i} tokens`);
		assert.equal(drafted[i].text, plain[i].text, `request ${i} text`);
	}
	const after = await metric(url, 'lanes_draft_accepted_tokens_total{proposer="ngram"}');
	assert.ok(after > before, `n-gram drafts accepted (${before} -> ${after})`);
	const slots = await (await fetch(`${url}/slots`)).json();
	assert.ok(slots.lanes.every((l) => typeof l.draft_acceptance === 'number'), '/slots shows each lane\'s acceptance');
});

// A conversation's second turn repeats the first turn's reply: the reply's pages are in the
// prefix cache (cached_tokens past the whole first prompt), and its tokens are a fresh server's.
test('a second turn finds the first turn\'s reply in the prefix cache, with a fresh server\'s bits', async () => {
	const servers = [await startServer(['-m', STORIES, '--api-key', KEY]), await startServer(['-m', STORIES, '--api-key', KEY])];
	try {
		const [warm, fresh] = servers.map((s) => new OpenAI({ baseURL: `${s.url}/v1`, apiKey: KEY, maxRetries: 0 }));
		const m1 = [{ role: 'user', content: 'Tell me a story about a dog named Max.' }];
		const a = await warm.chat.completions.create({ messages: m1, max_tokens: 80, temperature: 0, ignore_eos: true });
		const m2 = [...m1, { role: 'assistant', content: a.choices[0].message.content }, { role: 'user', content: 'What happened next?' }];
		const turn2 = { messages: m2, max_tokens: 24, temperature: 0.7, seed: 5, ignore_eos: true };
		const b = await warm.chat.completions.create(turn2);
		const f = await fresh.chat.completions.create(turn2);
		assert.ok(b.usage.prompt_tokens_details.cached_tokens > a.usage.prompt_tokens,
			`turn 2 took ${b.usage.prompt_tokens_details.cached_tokens} tokens from the cache, turn 1's prompt was ${a.usage.prompt_tokens}`);
		assert.equal(f.usage.prompt_tokens_details.cached_tokens, 0);
		assert.equal(b.choices[0].token_sha, f.choices[0].token_sha, 'cached = fresh');
	} finally {
		for (const s of servers) s.proc.kill('SIGKILL');
	}
});

// A hybrid model (Gated DeltaNet layers with a recurrent state) drafts too: a rejected draft
// rewinds the state to the decode row's, the accepted ones are fed again; the tokens are those
// of "draft": false, concurrent and solo.
test('a recurrent model drafts, and drafted = "draft": false', async () => {
	const srv = await startServer(['-m', shapeModel('qwen3-next-test'), '--api-key', KEY, '--lanes', '4', '--price-row-us', '1', '--price-fixed-us', '1000']);
	try {
		const c = new OpenAI({ baseURL: `${srv.url}/v1`, apiKey: KEY, maxRetries: 0 });
		const go = (r, extra) => (r.kind === 'chat' ? c.chat.completions : c.completions).create({ ...r.body, ...extra });
		const sha = (x) => x.choices[0].token_sha;
		const rep = { kind: 'completion', body: { prompt: 'Lily saw a cat. Lily saw a cat. Lily saw a cat.', max_tokens: 64, temperature: 0 } };
		const reqs = [...requests.slice(0, 7), rep].map((r) => ({ ...r, body: { ...r.body, max_tokens: 64, ignore_eos: true } }));
		const drafted = await Promise.all(reqs.map((r) => go(r, {})));
		const plain = await Promise.all(reqs.map((r) => go(r, { draft: false })));
		const solo = [];
		for (const r of reqs.slice(0, 3)) solo.push(await go(r, {}));
		for (let i = 0; i < reqs.length; i++) assert.equal(sha(drafted[i]), sha(plain[i]), `request ${i} tokens`);
		for (let i = 0; i < solo.length; i++) assert.equal(sha(solo[i]), sha(plain[i]), `request ${i} solo`);
		const proposed = await metric(srv.url, 'lanes_draft_tokens_total{proposer="ngram"}');
		const accepted = await metric(srv.url, 'lanes_draft_accepted_tokens_total{proposer="ngram"}');
		assert.ok(accepted > 0 && accepted < proposed, `drafts accepted and rejected (${accepted} of ${proposed})`);
		assert.ok((await metric(srv.url, 'lanes_draft_replayed_tokens_total')) > 0, 'accepted drafts fed again after a rewind');
	} finally {
		srv.proc.kill('SIGKILL');
	}
});

// A model with an MTP head drafts with it (priced so that every round drafts): the tokens are
// those of "draft": false, the head's proposals count under proposer="mtp"; --draft mtp is
// refused for a model without a head.
test('the MTP head drafts, and drafted = "draft": false', async () => {
	const srv = await startServer(['-m', shapeModel('mtp-test'), '--api-key', KEY, '--lanes', '4', '--price-row-us', '1', '--price-fixed-us', '1000', '--draft', 'mtp']);
	try {
		const mtp = new OpenAI({ baseURL: `${srv.url}/v1`, apiKey: KEY, maxRetries: 0 });
		const go = (r, extra) => (r.kind === 'chat' ? mtp.chat.completions : mtp.completions).create({ ...r.body, ...extra });
		const sha = (x) => x.choices[0].token_sha;
		const reqs = requests.slice(0, 8).map((r) => ({ ...r, body: { ...r.body, ignore_eos: true } }));
		const drafted = await Promise.all(reqs.map((r) => go(r, {})));
		const plain = await Promise.all(reqs.map((r) => go(r, { draft: false })));
		for (let i = 0; i < reqs.length; i++) assert.equal(sha(drafted[i]), sha(plain[i]), `request ${i} tokens`);
		const proposed = await metric(srv.url, 'lanes_draft_tokens_total{proposer="mtp"}');
		assert.ok(proposed > 0, `the MTP head proposed (${proposed})`);
		// a live lane's acceptance at each place of its proposals, the first place reached first
		const long = go({ kind: 'completion', body: { prompt: 'Once upon a time', max_tokens: 200, ignore_eos: true } }, {});
		let seen = null;
		for (let i = 0; i < 400 && !seen; i++) {
			const slots = await (await fetch(`${srv.url}/slots`)).json();
			seen = slots.lanes.find((l) => l.phase === 'live' && l.draft_acceptance_by_position.length > 0);
		}
		await long;
		assert.ok(seen, '/slots shows a live lane\'s acceptance by position');
		assert.ok(seen.draft_acceptance_by_position.every((a) => a >= 0 && a <= 1), JSON.stringify(seen));
	} finally {
		srv.proc.kill('SIGKILL');
	}
	// with learning on, a head may be learned (49_learn_head); with it off there is none to draft with
	const bad = spawn(BIN, ['serve', '--port', '0', '-m', STORIES, '--draft', 'mtp', '--learn-share', '0'], { stdio: ['ignore', 'ignore', 'pipe'] });
	let log = '';
	await new Promise((done) => {
		bad.stderr.on('data', (d) => /no MTP layer/.test((log += d)) && done());
		bad.on('exit', done);
	});
	bad.kill('SIGKILL');
	assert.match(log, /cannot load .*draft mtp: the model has no MTP layer .*no head can be learned here/);
});

// A head trained by `lanes learn --mtp` and served with --draft-head: its drafts are accepted,
// the tokens are those of "draft": false; a head that does not fit the model, or --draft-head
// without -m, stops the server with the reason.
test('--draft-head: a trained MTP head drafts, and drafted = "draft": false', async () => {
	const head = path.join(TMP, 'stories-head.gguf');
	execFileSync(BIN, ['learn', '--mtp', '-m', STORIES, '--data', 'tests/data/learn/stories-train.jsonl', '--gen', '32', '--temp', '1',
		'--steps', '40', '--batch', '8', '--lr', '0.006', '-t', '2', '-o', head], { stdio: 'ignore', env: { ...process.env, LANES_LOG: 'error' } });
	const srv = await startServer(['-m', STORIES, '--draft-head', head, '--api-key', KEY, '--lanes', '4', '--price-row-us', '1', '--price-fixed-us', '1000']);
	try {
		const c = new OpenAI({ baseURL: `${srv.url}/v1`, apiKey: KEY, maxRetries: 0 });
		const go = (r, extra) => (r.kind === 'chat' ? c.chat.completions : c.completions).create({ ...r.body, ...extra });
		const reqs = requests.slice(0, 8).map((r) => ({ ...r, body: { ...r.body, ignore_eos: true } }));
		const drafted = await Promise.all(reqs.map((r) => go(r, {})));
		const plain = await Promise.all(reqs.map((r) => go(r, { draft: false })));
		for (let i = 0; i < reqs.length; i++) assert.equal(drafted[i].choices[0].token_sha, plain[i].choices[0].token_sha, `request ${i} tokens`);
		const proposed = await metric(srv.url, 'lanes_draft_tokens_total{proposer="mtp"}');
		const accepted = await metric(srv.url, 'lanes_draft_accepted_tokens_total{proposer="mtp"}');
		assert.ok(proposed > 0 && accepted > 0, `the trained head proposed ${proposed} and had ${accepted} accepted`);
	} finally {
		srv.proc.kill('SIGKILL');
	}
	const refused = async (args, want) => {
		const p = spawn(BIN, ['serve', '--port', '0', ...args], { stdio: ['ignore', 'ignore', 'pipe'] });
		let log = '';
		p.stderr.on('data', (d) => (log += d));
		const code = await new Promise((done) => p.on('exit', done));
		assert.notEqual(code, 0, `${args.join(' ')} exits with an error`);
		assert.match(log, want);
	};
	await refused(['-m', path.join(SHARED, 'models', 'ref-llama-F32.gguf'), '--draft-head', head], /the draft head follows a trunk of 5 layers, the model's has 4/);
	await refused(['-m', STORIES, '--draft-head', STORIES], /not an MTP head file/);
	await refused(['--models-dir', TMP, '--draft-head', head], /--draft-head needs a model given with -m/);
});

