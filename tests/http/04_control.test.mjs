// Control reads never wait for the engine: /health, /metrics and /slots each answer while a
// long prompt (a larger `lanes gen` model) is still being processed — shown by the order of
// events (the prompt is seen
// filling before and after the reads, and its reply has not come), not by a time limit.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { startServer, bigModel, KEY, getJSON, postJSON, sleep, STORIES } from './lib.mjs';

let srv, loading;
before(async () => {
	const model = bigModel();
	// the server listens before the model is loaded: the first reads see it loading
	srv = await startServer(['-m', model, '--api-key', KEY, '--piece', '64'], {}, {
		onListening: async (url) => {
			const h = await getJSON(`${url}/health`);
			const api = await postJSON(`${url}/v1/completions`, { prompt: 'x', max_tokens: 1 });
			const slots = await getJSON(`${url}/slots`);
			// then /health as fast as it answers, until the model is ready: what it said, in order
			const seen = [];
			for (let i = 0; i < 100000; i++) {
				const r = await getJSON(`${url}/health`);
				if (r.status !== 503 || r.body.status !== 'loading') break;
				seen.push(r.body);
			}
			loading = { h, api, slots, seen };
		},
	});
});
after(() => srv && srv.proc.kill('SIGKILL'));

// deterministic pseudo-random token ids (a prompt the prefix cache has never seen)
function ids(n, seed) {
	const out = [];
	let x = seed >>> 0;
	for (let i = 0; i < n; i++) {
		x = (Math.imul(x, 1664525) + 1013904223) >>> 0;
		out.push(3 + (x % 500));
	}
	return out;
}

const filling = (slots) => slots.lanes.find((l) => l.phase === 'filling' && l.filled_tokens > 0 && l.filled_tokens < l.prompt_tokens);

test('the server listens before the model loads: /health 503 loading, API 503', async () => {
	assert.equal(loading.h.status, 503);
	assert.equal(loading.h.body.status, 'loading');
	assert.ok(loading.h.body.progress >= 0 && loading.h.body.progress < 1);
	assert.equal(loading.api.status, 503);
	assert.ok(Number(loading.api.headers.get('retry-after')) >= 1);
	assert.match(loading.api.body.error.message, /loading/);
	assert.equal(loading.slots.status, 503);
	assert.equal((await getJSON(`${srv.url}/health`)).status, 200);
});

const STAGES = ['opening the model file', 'reading and repacking weights', 'reading the vocabulary',
	'compiling the chat template', 'loading the draft model', 'starting the engine', 'loading the LoRA adapters'];

test('/health reports the load in fine steps: progress and stage only move forward', () => {
	const seen = loading.seen;
	assert.ok(seen.length > 0, 'the load was seen');
	for (const [i, h] of seen.entries()) {
		assert.ok(h.progress >= 0 && h.progress < 1, `progress ${h.progress}`);
		assert.ok(STAGES.includes(h.stage), `stage ${h.stage}`);
		if (!i) continue;
		assert.ok(h.progress >= seen[i - 1].progress, `progress fell: ${seen[i - 1].progress} then ${h.progress}`);
		assert.ok(STAGES.indexOf(h.stage) >= STAGES.indexOf(seen[i - 1].stage), `stage went back: ${seen[i - 1].stage} then ${h.stage}`);
	}
	// the weights are reported matrix by matrix: several values inside that stage, not one jump
	// (granularity shows only when the polls came often: a starved client may see few answers)
	const weights = new Set(seen.filter((h) => h.stage === STAGES[1]).map((h) => h.progress));
	if (seen.length >= 50) assert.ok(weights.size >= 3, `progress while reading the weights: ${[...weights]} (${seen.length} answers)`);
	console.log(`# /health while loading: ${seen.length} answers, ${new Set(seen.map((h) => h.progress)).size} distinct values`);
});

test('/health, /metrics and /slots answer while a long prompt is processed', async () => {
	const url = srv.url;
	const N = 600;
	let replied = false;
	const reply = postJSON(`${url}/v1/completions`, { prompt: ids(N, 42), max_tokens: 1 }).then((r) => ((replied = true), r));
	let seen = null;
	for (let i = 0; i < 20000 && !seen && !replied; i++) seen = filling((await getJSON(`${url}/slots`)).body);
	assert.ok(seen, 'the prompt was seen filling');
	const order = [];
	for (const path of ['/health', '/metrics', '/slots']) {
		const r = await fetch(url + path);
		const text = await r.text();
		assert.equal(r.status, 200, path);
		order.push({ path, replied, text });
	}
	const later = filling((await getJSON(`${url}/slots`)).body);
	assert.ok(later && !replied, 'the prompt was still filling after the control reads');
	assert.ok(later.filled_tokens >= seen.filled_tokens);
	for (const o of order) assert.equal(o.replied, false, `${o.path} answered before the prompt finished`);
	assert.match(order[1].text, /lanes_lanes_busy 1/);
	assert.deepEqual(JSON.parse(order[0].text), { status: 'ok' });
	// latency of the reads while the prompt fills (a figure, not a test)
	const lat = { '/health': [], '/metrics': [], '/slots': [] };
	while (!replied) {
		for (const p of Object.keys(lat)) {
			const t0 = process.hrtime.bigint();
			await (await fetch(url + p)).text();
			lat[p].push(Number(process.hrtime.bigint() - t0) / 1e6);
		}
		await sleep(5);
	}
	for (const [p, v] of Object.entries(lat)) {
		v.sort((a, b) => a - b);
		const q = (f) => (v.length ? v[Math.min(v.length - 1, Math.floor(f * v.length))].toFixed(2) : 'n/a');
		console.log(`# ${p} during prefill: n=${v.length} p50=${q(0.5)} ms p99=${q(0.99)} ms`);
	}
	const r = await reply;
	assert.equal(r.status, 200);
	assert.equal(r.body.usage.prompt_tokens, N);
});

test('/props: the build as `lanes --version` says it, the kernel set and the model', async () => {
	const { spawnSync } = await import('node:child_process');
	const { BIN, URL_ } = await import('./lib.mjs');
	const first = spawnSync(BIN, ['--version'], { encoding: 'utf8' }).stdout.split('\n')[0];
	assert.match(first, /^lanes \S+ \(commit \S+\)$/);
	const { status, body } = await getJSON(`${URL_}/props`);
	assert.equal(status, 200);
	assert.equal(body.version, first);
	assert.ok(['ref', 'avx2', 'avx512'].includes(body.kernels), body.kernels);
	assert.equal(body.model, 'stories260K');
	assert.ok(body.total_slots >= 1);
	assert.ok(body.build_flags.includes('-std=c11'));
	// what llama-server's web UIs read
	assert.ok(body.default_generation_settings.n_ctx > 0);
	assert.equal(typeof body.chat_template, 'string');
	assert.ok(body.chat_template.length > 0, 'the template in use (ChatML for stories260K)');
	assert.equal(body.modalities.vision, false);
	assert.equal(body.build_info, first);
});

test('HEAD is answered wherever GET is, and a trailing slash names the same path', async () => {
	for (const p of ['/health', '/metrics', '/slots', '/v1/models', '/props', '/api/version']) {
		const r = await fetch(`${srv.url}${p}`, { method: 'HEAD' });
		assert.equal(r.status, 200, p);
		assert.equal(await r.text(), '', `${p}: no body`);
	}
	assert.equal((await fetch(`${srv.url}/v1/chat/completions`, { method: 'HEAD' })).status, 405);
	const list = await (await fetch(`${srv.url}/v1/models/`)).json();
	assert.equal(list.object, 'list');
	const one = await (await fetch(`${srv.url}/v1/models/${list.data[0].id}/`)).json();
	assert.equal(one.id, list.data[0].id);
	assert.equal((await fetch(`${srv.url}/health/`)).status, 200);
});

test('/v1/models, /slots and /props name the activation width: q16 by default, q8 when asked', async () => {
	const models = (await getJSON(`${srv.url}/v1/models`)).body;
	assert.equal(models.data[0].activations, 'q16');
	assert.equal((await getJSON(`${srv.url}/slots`)).body.activations, 'q16');
	const q8 = await startServer(['-m', STORIES, '--activations', 'q8']);
	try {
		const m = await getJSON(`${q8.url}/v1/models`);
		assert.equal(m.status, 200);
		assert.equal(m.body.data[0].activations, 'q8');
		assert.equal((await getJSON(`${q8.url}/v1/models/${m.body.data[0].id}`)).body.activations, 'q8');
		assert.equal((await getJSON(`${q8.url}/slots`)).body.activations, 'q8');
		assert.equal((await getJSON(`${q8.url}/props`)).body.activations, 'q8');
	} finally {
		q8.proc.kill('SIGKILL');
	}
});
