// The grid: three servers on loopback — A (1 lane, queue 2, --overflow-queue 1, peers B and C),
// B (the same model), C (another model) — and D (1 lane, peer B) for leases and the drain.
// A burst to A spills to B, never C, with the texts A gives alone; B killed mid-stream ends the
// forwarded streams with one error event naming B; leases grant, hold, go to the lessee first,
// release, lapse and are refused; the vLLM-named gauges parse and follow the load.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import path from 'node:path';
import { startServer, STORIES, SHARED, KEY, getJSON, postJSON, readSSE, readNDJSON, sleep, assertWaitsSettled } from './lib.mjs';

const OTHER = path.join(SHARED, 'models/ref-llama-Q4_0.gguf');
const MODEL = 'stories260K';
let A, B, C, D;

// Prometheus text (format 0.0.4): every line a HELP, a TYPE or a sample of a typed family.
function prom(text) {
	const types = {}, samples = [];
	for (const line of text.split('\n')) {
		if (!line) continue;
		if (line.startsWith('# HELP ')) {
			assert.match(line, /^# HELP [a-zA-Z_:][a-zA-Z0-9_:]* \S/);
			continue;
		}
		const t = line.match(/^# TYPE ([a-zA-Z_:][a-zA-Z0-9_:]*) (counter|gauge|histogram|summary|untyped)$/);
		if (line.startsWith('#')) {
			assert.ok(t, `a TYPE line: ${line}`);
			types[t[1]] = t[2];
			continue;
		}
		const m = line.match(/^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{((?:[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\]|\\.)*",?)*)\})? (\S+)$/);
		assert.ok(m, `a sample line: ${line}`);
		const labels = {};
		for (const l of (m[2] || '').matchAll(/([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g)) labels[l[1]] = l[2];
		const value = Number(m[3]);
		assert.ok(!Number.isNaN(value) || m[3] === '+Inf', `a number: ${line}`);
		const family = m[1].replace(/_(bucket|sum|count)$/, '');
		assert.ok(types[m[1]] || types[family], `${m[1]} has a TYPE`);
		samples.push({ name: m[1], labels, value });
	}
	return samples;
}

async function metrics(url) {
	return prom(await (await fetch(`${url}/metrics`)).text());
}

const sample = (ss, name, labels = {}) =>
	ss.find((s) => s.name === name && Object.entries(labels).every(([k, v]) => s.labels[k] === v))?.value;

// Twelve requests across the APIs, each with its own seed and a temperature: their text is a
// function of the request alone, wherever it runs.
function request(i) {
	const gen = { max_tokens: 64, ignore_eos: true, seed: 100 + i, temperature: 0.8 };
	const msgs = [{ role: 'user', content: `Story ${i}: once upon a time` }];
	const sse = (ev) => ev.filter((e) => e.data !== '[DONE]' && !e.data.error);
	switch (i % 6) {
	case 0:
		return { path: '/v1/completions', body: { prompt: `Story ${i}:`, ...gen }, text: (j) => j.choices[0].text };
	case 1:
		return { path: '/v1/completions', body: { prompt: `Story ${i}:`, ...gen, stream: true },
			text: (ev) => sse(ev).map((e) => e.data.choices[0].text).join(''),
			ends: (ev) => ev.filter((e) => e.data === '[DONE]' || e.data.error).length };
	case 2:
		return { path: '/v1/chat/completions', body: { messages: msgs, ...gen }, text: (j) => j.choices[0].message.content };
	case 3:
		return { path: '/v1/chat/completions', body: { messages: msgs, ...gen, stream: true },
			text: (ev) => sse(ev).map((e) => e.data.choices[0]?.delta?.content || '').join(''),
			ends: (ev) => ev.filter((e) => e.data === '[DONE]' || e.data.error).length };
	case 4:
		return { path: '/v1/messages', body: { model: MODEL, messages: msgs, ...gen, stream: true },
			text: (ev) => ev.filter((e) => e.event === 'content_block_delta').map((e) => e.data.delta.text).join(''),
			ends: (ev) => ev.filter((e) => e.event === 'message_stop' || e.event === 'error').length };
	default:
		return { path: '/api/generate', ndjson: true,
			body: { model: MODEL, prompt: `Story ${i}:`, stream: true, options: { num_predict: 64, seed: 100 + i, temperature: 0.8 } },
			text: (ls) => ls.map((l) => l.response || '').join(''), ends: (ls) => ls.filter((l) => l.done || l.error).length };
	}
}

// Runs r on url: status, the peer that answered (x-lanes-peer), its text and terminal events.
async function run(url, r, onEvent) {
	const res = await fetch(url + r.path, {
		method: 'POST',
		headers: { 'Content-Type': 'application/json', Authorization: `Bearer ${KEY}` },
		body: JSON.stringify(r.body),
	});
	const peer = res.headers.get('x-lanes-peer');
	if (res.status !== 200 || !r.ends) return { status: res.status, peer, body: await res.json(), get text() { return r.text(this.body); } };
	const events = r.ndjson ? await readNDJSON(res) : await readSSE(res, onEvent);
	return { status: res.status, peer, events, text: r.text(events), ends: r.ends(events) };
}

async function peersUp(url, peers) {
	for (let i = 0; i < 1200; i++) {
		const ss = await metrics(url);
		if (peers.every((p) => sample(ss, 'lanes_peer_up', { peer: p.url }) === 1)) return;
		await sleep(25);
	}
	assert.fail(`the peers of ${url} never came up`);
}

before(async () => {
	[B, C] = await Promise.all([
		startServer(['-m', STORIES, '--api-key', KEY, '--lanes', '12']),
		startServer(['-m', OTHER, '--api-key', KEY]),
	]);
	const peer = ['--peer-poll-ms', '100', '--peer', B.url];
	[A, D] = await Promise.all([
		startServer(['-m', STORIES, '--api-key', KEY, '--lanes', '1', '--queue', '2', '--overflow-queue', '1', ...peer, '--peer', C.url]),
		startServer(['-m', STORIES, '--api-key', KEY, '--lanes', '1', '--overflow-queue', '10', ...peer]),
	]);
	await Promise.all([peersUp(A.url, [B, C]), peersUp(D.url, [B])]);
});

after(() => {
	for (const s of [A, B, C, D]) if (s && s.proc.exitCode === null) s.proc.kill('SIGKILL');
});

test('the residency beacon: what each server holds and what it could take now', async () => {
	for (const [s, id] of [[A, MODEL], [B, MODEL], [C, 'ref-llama-Q4_0']]) {
		const { status, body } = await getJSON(`${s.url}/v1/residency`);
		assert.equal(status, 200);
		assert.equal(typeof body.node, 'string');
		assert.ok(Number.isInteger(body.sequence) && Number.isInteger(body.clock_us));
		assert.equal(body.draining, false);
		assert.equal(body.models.length, 1);
		const m = body.models[0];
		assert.equal(m.id, id);
		assert.deepEqual(m.adapters, []);
		assert.ok(m.window > 0 && m.lanes_total >= 1 && m.lanes_free === m.lanes_total && m.kv_free_bytes > 0);
		assert.equal(m.queue_depth, 0);
	}
	assert.equal((await getJSON(`${B.url}/v1/residency`)).body.models[0].lanes_total, 12);
});

test('a burst of 12 to A: every one answers, the overflow ran on B (never C), each text as A alone gives it', async () => {
	const before = { a: await metrics(A.url), b: await metrics(B.url), c: await metrics(C.url) };
	const reqs = Array.from({ length: 12 }, (_, i) => request(i));
	const got = await Promise.all(reqs.map((r) => run(A.url, r)));
	for (const [i, g] of got.entries()) {
		assert.equal(g.status, 200, `request ${i}: ${JSON.stringify(g.body)}`);
		if (reqs[i].ends) assert.equal(g.ends, 1, `request ${i}: exactly one terminal event`);
		assert.ok(g.peer === null || g.peer === B.url, `request ${i} ran here or on B, not ${g.peer}`);
	}
	const forwarded = got.filter((g) => g.peer === B.url).length;
	// the first two find at most one waiting and stay; of the rest, those that find two waiting go
	assert.ok(forwarded >= 1 && forwarded <= 10, `A (1 lane, 2 queued) passed ${forwarded} of 12 to B`);
	const after_ = { a: await metrics(A.url), b: await metrics(B.url), c: await metrics(C.url) };
	const delta = (k, name, labels) => sample(after_[k], name, labels) - (sample(before[k], name, labels) || 0);
	// B's counters are published at its next round boundary, which may come after its last reply
	for (let i = 0; i < 600 && delta('b', 'lanes_requests_total', { outcome: 'finished' }) < forwarded; i++) {
		await sleep(50);
		after_.b = await metrics(B.url);
	}
	assert.equal(delta('a', 'lanes_overflow_requests_total', { peer: B.url, outcome: 'forwarded' }), forwarded);
	assert.equal(delta('a', 'lanes_overflow_requests_total', { peer: C.url, outcome: 'forwarded' }), 0);
	assert.equal(delta('b', 'lanes_requests_total', { outcome: 'finished' }), forwarded);
	assert.equal(delta('b', 'lanes_leases_total', { outcome: 'granted' }), forwarded);
	assert.equal(delta('c', 'lanes_requests_total', { outcome: 'finished' }), 0);
	assert.equal(delta('c', 'lanes_leases_total', { outcome: 'granted' }) || 0, 0);
	assert.match(A.log(), /forwarded via=http:\/\/127\.0\.0\.1:\d+/);
	// alone on A (idle, so nothing overflows): the same text, token for token
	for (const [i, r] of reqs.entries()) {
		const solo = await run(A.url, r);
		assert.equal(solo.peer, null);
		assert.equal(got[i].text, solo.text, `request ${i} (${got[i].peer ? 'on B' : 'on A'}) as alone on A`);
	}
});

test('the vLLM-named gauges parse as Prometheus text and follow the load', async () => {
	const ss = await metrics(C.url);
	for (const n of ['vllm:num_requests_waiting', 'vllm:num_requests_running', 'vllm:kv_cache_usage_perc', 'vllm:gpu_cache_usage_perc'])
		assert.equal(sample(ss, n, { model_name: 'ref-llama-Q4_0' }), 0, n);
	const cfg = ss.find((s) => s.name === 'vllm:cache_config_info');
	assert.equal(cfg.value, 1);
	assert.equal(cfg.labels.block_size, '16');
	assert.ok(Number(cfg.labels.num_gpu_blocks) > 0);
	const q0 = sample(ss, 'vllm:prefix_cache_queries_total'), h0 = sample(ss, 'vllm:prefix_cache_hits_total');
	// a burst of 12 on 4 lanes: requests wait, lanes run, pages fill; then all of it returns to 0
	const prompt = 'The same long beginning for every request, so the prefix cache has work to do. ';
	const burst = Promise.all(Array.from({ length: 12 }, (_, i) =>
		postJSON(`${C.url}/v1/completions`, { prompt: prompt + i, max_tokens: 48, ignore_eos: true })));
	let done = false, waiting = 0, running = 0, usage = 0;
	burst.then(() => (done = true));
	while (!done) {
		const m = await metrics(C.url);
		waiting = Math.max(waiting, sample(m, 'vllm:num_requests_waiting'));
		running = Math.max(running, sample(m, 'vllm:num_requests_running'));
		usage = Math.max(usage, sample(m, 'vllm:kv_cache_usage_perc'));
		assert.equal(sample(m, 'vllm:kv_cache_usage_perc'), sample(m, 'vllm:gpu_cache_usage_perc'));
		await sleep(5);
	}
	for (const r of await burst) assert.equal(r.status, 200);
	assert.ok(waiting >= 1, `requests waited (${waiting})`);
	assert.ok(running >= 1 && running <= 4, `lanes ran (${running})`);
	assert.ok(usage > 0 && usage <= 1, `KV pages in use (${usage})`);
	const end = await metrics(C.url);
	assert.equal(sample(end, 'vllm:num_requests_waiting'), 0);
	assert.equal(sample(end, 'vllm:num_requests_running'), 0);
	assert.equal(sample(end, 'vllm:kv_cache_usage_perc'), 0);
	assert.ok(sample(end, 'vllm:prefix_cache_queries_total') > q0);
	assert.ok(sample(end, 'vllm:prefix_cache_hits_total') > h0, 'the shared beginning hit the prefix cache');
	// A's page, with peers and leases, parses too
	assert.ok((await metrics(A.url)).some((s) => s.name === 'lanes_peer_up'));
});

const lease = (url, body, key = KEY) =>
	getJSON(`${url}/v1/leases`, { method: 'POST', headers: { 'Content-Type': 'application/json', Authorization: `Bearer ${key}` }, body: JSON.stringify(body) });
const release = (url, id) => getJSON(`${url}/v1/leases/${id}`, { method: 'DELETE', headers: { Authorization: `Bearer ${KEY}` } });
const lanesFree = async (url) => (await getJSON(`${url}/v1/residency`)).body.models[0].lanes_free;

test('leases: grant, hold, use before the queue, release, lapse; full, wrong model and bad bodies refused', async () => {
	const url = D.url;
	assert.equal((await lease(url, { model: MODEL }, 'wrong')).status, 401);
	assert.equal((await lease(url, { model: MODEL, want_concurrency: 0 })).status, 400);
	assert.equal((await lease(url, { model: MODEL, ttl: 5 })).status, 400);
	const wrong = await lease(url, { model: 'ref-llama-Q4_0' });
	assert.equal(wrong.status, 404);
	assert.equal(wrong.body.error.code, 'model_not_found');
	// grant: one lane of one (two wanted), with the pages of the spike
	const t0 = Date.now();
	const g = await lease(url, { model: MODEL, want_concurrency: 2, spike_bytes: 4096, ttl_ms: 20000 });
	assert.equal(g.status, 201, JSON.stringify(g.body));
	assert.match(g.body.id, /^lease-[0-9a-f]{16}$/);
	assert.equal(g.body.granted, 1);
	assert.ok(g.body.kv_bytes >= 4096);
	assert.ok(g.body.expires_at >= t0 + 19000 && g.body.expires_at <= Date.now() + 21000);
	assert.equal(await lanesFree(url), 0);
	// full: 409 with the free figures
	const full = await lease(url, { model: MODEL });
	assert.equal(full.status, 409);
	assert.equal(full.body.error.code, 'no_capacity');
	assert.equal(full.body.lanes_free, 0);
	assert.ok(full.body.kv_free_bytes > 0);
	// held: a request without the lease waits though the lane is idle
	// the held request is the longer one, so its end trails the lessee's by far more than the
	// client's reading order can swap (stories260K makes 24 tokens in a few milliseconds)
	const body = { prompt: 'Once', max_tokens: 24, ignore_eos: true };
	let localAt = 0, leasedAt = 0;
	const local = postJSON(`${url}/v1/completions`, { ...body, max_tokens: 400 }).then((r) => ((localAt = Date.now()), r));
	// queued once it has arrived, however slow the machine; then it stays there
	for (let i = 0; i < 3000 && (await getJSON(`${url}/slots`)).body.queue_depth !== 1; i++) await sleep(10);
	for (let i = 0; i < 10; i++) {
		await sleep(30);
		assert.equal((await getJSON(`${url}/slots`)).body.queue_depth, 1, 'held back by the lease');
	}
	// use: the lessee's request goes first
	const leased = await postJSON(`${url}/v1/completions`, body, { 'x-lanes-lease': g.body.id }).then((r) => ((leasedAt = Date.now()), r));
	assert.equal(leased.status, 200);
	assert.equal((await local).status, 200);
	assert.ok(leasedAt <= localAt, 'the leased request ended first');
	assert.equal((await release(url, g.body.id)).status, 404, 'a used lease is gone');
	assert.equal(await lanesFree(url), 1);
	// release gives the lane back
	const r = await lease(url, { model: MODEL });
	assert.equal(r.status, 201);
	assert.equal(await lanesFree(url), 0);
	const rel = await release(url, r.body.id);
	assert.deepEqual([rel.status, rel.body], [200, { id: r.body.id, released: true }]);
	assert.equal(await lanesFree(url), 1);
	assert.equal((await release(url, r.body.id)).status, 404);
	// expiry: the lane comes back on its own
	const x = await lease(url, { model: MODEL, ttl_ms: 300 });
	assert.equal(x.status, 201);
	assert.equal(await lanesFree(url), 0);
	// the lane comes back once the 300 ms lapse, however slow the machine: waited for, not slept on
	let free = 0;
	for (let i = 0; i < 3000 && (free = await lanesFree(url)) !== 1; i++) await sleep(10);
	assert.equal(free, 1);
	assert.equal((await release(url, x.body.id)).status, 404);
	const ss = await metrics(url);
	assert.equal(sample(ss, 'lanes_leases_total', { outcome: 'granted' }), 3);
	assert.equal(sample(ss, 'lanes_leases_total', { outcome: 'refused' }), 1);
	assert.equal(sample(ss, 'lanes_leases_open'), 0);
});

test('draining: no leases, the beacon says so, and new requests still go to a peer', async () => {
	const url = D.url;
	// a long stream keeps the drain open
	const long = fetch(`${url}/v1/completions`, {
		method: 'POST', headers: { 'Content-Type': 'application/json', Authorization: `Bearer ${KEY}` },
		body: JSON.stringify({ prompt: 'Once', max_tokens: 400, ignore_eos: true, stream: true }),
	}).then(readSSE);
	for (let i = 0; i < 3000 && (await getJSON(`${url}/slots`)).body.lanes[0].phase === 'idle'; i++) await sleep(10);
	D.proc.kill('SIGTERM');
	for (let i = 0; i < 3000 && (await getJSON(`${url}/health`)).status !== 503; i++) await sleep(10);
	const beacon = (await getJSON(`${url}/v1/residency`)).body;
	assert.equal(beacon.draining, true);
	const l = await lease(url, { model: MODEL });
	assert.equal(l.status, 503);
	assert.match(l.body.error.message, /draining/);
	const r = await run(url, request(3));
	assert.equal(r.status, 200);
	assert.equal(r.peer, B.url, 'forwarded while draining');
	assert.equal(r.ends, 1);
	assert.equal((await long).at(-1).data, '[DONE]');
	const { code } = await D.exited;
	assert.equal(code, 0, D.log());
});

test('--peer-key: a peer with another key takes the overflow; the client\'s key is not what it sees', async () => {
	const OTHER_KEY = 'peer-only-key';
	const E = await startServer(['-m', STORIES, '--api-key', OTHER_KEY, '--lanes', '4']);
	const F = await startServer(['-m', STORIES, '--api-key', KEY, '--lanes', '1', '--queue', '4', '--overflow-queue', '1',
		'--peer-poll-ms', '100', '--peer', E.url, '--peer-key', OTHER_KEY]);
	try {
		await peersUp(F.url, [E]);
		const busy = run(F.url, {
			path: '/v1/completions', body: { prompt: 'Once', max_tokens: 400, ignore_eos: true, stream: true },
			text: () => '', ends: (ev) => ev.filter((e) => e.data === '[DONE]' || e.data.error).length,
		});
		for (let i = 0; i < 2000 && (await getJSON(`${F.url}/slots`)).body.lanes[0].phase === 'idle'; i++) await sleep(2);
		// six at once, the lane taken: the queue here holds --overflow-queue of them, the peer the
		// rest, however the arrivals fall between the host's rounds
		const rs = await Promise.all([0, 1, 2, 3, 4, 5].map((i) => run(F.url, request(i))));
		for (const r of rs) assert.equal(r.status, 200, JSON.stringify(r.body));
		const where = rs.map((r) => r.peer ?? 'here');
		assert.equal(where.filter((p) => p === E.url).length, 4, `four ran on the peer with its own key: ${where}`);
		assert.equal(where.filter((p) => p === 'here').length, 2, `two waited here: ${where}`);
		assert.equal((await busy).ends, 1);
		// the peer refuses the client's key: only --peer-key opened it
		const direct = await postJSON(`${E.url}/v1/completions`, { prompt: 'x', max_tokens: 1 });
		assert.equal(direct.status, 401);
	} finally {
		for (const s of [E, F]) s.proc.kill('SIGKILL');
	}
});

test('B killed mid-stream: each forwarded stream ends with one error event naming B; A keeps serving', async () => {
	const url = A.url;
	// A's lane and queue taken, one request at a time: what comes next overflows
	const local = [];
	const held = (s, k) => s.lanes[0].phase !== 'idle' && s.queue_depth === k - 1;
	for (let k = 1; k <= 3; k++) {
		local.push(run(url, {
			path: '/v1/completions', body: { prompt: 'Once', max_tokens: 300, ignore_eos: true, stream: true },
			text: () => '', ends: (ev) => ev.filter((e) => e.data === '[DONE]' || e.data.error).length,
		}));
		for (let i = 0; i < 2000 && !held((await getJSON(`${url}/slots`)).body, k); i++) await sleep(2);
	}
	assert.equal((await getJSON(`${url}/slots`)).body.queue_depth, 2);
	const long = (i) => {
		const r = request(i);
		r.body = { ...r.body, max_tokens: 1500 };
		return r;
	};
	// a request a peer forwarded is never forwarded again: here it finds the queue full
	const hop = await postJSON(`${url}/v1/completions`, { prompt: 'x', max_tokens: 2 }, { 'x-lanes-hop': '1' });
	assert.equal(hop.status, 429);
	assert.equal(hop.headers.get('x-lanes-peer'), null);
	const seen = [0, 0, 0];
	const fwd = [1, 3, 4].map((i, k) => run(url, long(i), () => seen[k]++));
	for (let i = 0; i < 2000 && seen.some((n) => n < 3); i++) await sleep(5);
	assert.ok(seen.every((n) => n >= 3), `every forwarded stream is under way (${seen})`);
	B.proc.kill('SIGKILL');
	for (const [k, r] of (await Promise.all(fwd)).entries()) {
		assert.equal(r.peer, B.url, `stream ${k} was forwarded`);
		assert.equal(r.ends, 1, `stream ${k}: exactly one terminal event`);
		const msg = r.events.at(-1).data.error.message; // OpenAI's and Anthropic's error events alike
		assert.ok(msg.includes(B.url), `the error names the peer: ${msg}`);
	}
	// A's own streams finish, and A answers new requests
	for (const r of await Promise.all(local)) {
		assert.equal(r.status, 200);
		assert.equal(r.events.at(-1).data, '[DONE]');
	}
	const after_ = await run(url, request(0));
	assert.equal(after_.status, 200);
	assert.equal(after_.peer, null);
	// B's beacon lapses: it is no longer a peer to lean on
	let up = 1;
	for (let i = 0; i < 1500 && up !== 0; i++) {
		up = sample(await metrics(url), 'lanes_peer_up', { peer: B.url });
		if (up !== 0) await sleep(20);
	}
	assert.equal(up, 0);
	assert.ok(sample(await metrics(url), 'lanes_overflow_requests_total', { peer: B.url, outcome: 'failed' }) >= 3);
});

test('every request that waited for a peer, or for its route, was woken exactly once on A', async () => {
	await assertWaitsSettled(assert, A.url, ['work', 'peer']);
});
