// The MoE expert observer over HTTP (ref-moe, 8 experts, top 2): requests labelled with a domain
// through the official openai and anthropic clients (chat, responses, messages) and the
// x-lanes-domain header; GET /v1/experts counts every row the requests ran (by their usage),
// its figures equal an independent recomputation here from its raw counts, two domains of
// different texts have different hot sets, ?reset=1 begins a new window; the SVG and the
// Prometheus lines; clear errors for bad labels; 404 for a dense model and for the observer
// off; tokens the same with the observer on and off; and /v1/experts answers while a long
// prompt fills (a larger generated MoE), shown by the order of events.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import path from 'node:path';
import OpenAI from 'openai';
import Anthropic from '@anthropic-ai/sdk';
import { startServer, getJSON, postJSON, KEY, SHARED, STORIES, sleep, shapeModel } from './lib.mjs';

const MOE = path.join(SHARED, 'models/ref-moe-Q8_0.gguf');
let srv, off, oai, ant;
before(async () => {
	srv = await startServer(['-m', MOE, '--api-key', KEY, '--metrics-experts', '--draft', 'off', '--lanes', '4']);
	off = await startServer(['-m', MOE, '--api-key', KEY, '--experts', 'off', '--draft', 'off', '--lanes', '1']);
	oai = new OpenAI({ baseURL: srv.url + '/v1', apiKey: KEY, maxRetries: 0 });
	ant = new Anthropic({ baseURL: srv.url, apiKey: KEY, maxRetries: 0 });
});
after(() => {
	srv?.proc.kill('SIGKILL');
	off?.proc.kill('SIGKILL');
});

const experts = async (url, q = '') => getJSON(`${url}/v1/experts${q}`);
// rows a request ran: its prompt less what came from the prefix cache, and each token fed back
// the last token is never fed back; sampled requests ignore the end token, which the usage leaves out
const rowsOf = (prompt, cached, generated) => prompt - cached + generated - 1;

const STORY = 'Once upon a time there was a little girl named Lily. She loved to play in the park with her dog Max. ' +
	'One day they found a big red ball under a tree, and they played with it until the sun went down.';
const CODE = 'int main(void) { for (int i = 0; i < n; i++) { if (a[i] > max) max = a[i]; } printf("%d\\n", max); return 0; } ' +
	'static void swap(int *x, int *y) { int t = *x; *x = *y; *y = t; }';

// ---- an independent recomputation of the report from its raw counts -------------------------
const LEVELS = [50, 80, 90, 95];
function ranking(mass) {
	return mass.map((m, i) => i).sort((a, b) => mass[b] - mass[a] || a - b);
}
function workingSet(mass) {
	const rk = ranking(mass);
	const cum = [0];
	for (const i of rk) cum.push(cum[cum.length - 1] + mass[i]);
	const total = cum[cum.length - 1];
	const ws = {};
	for (const p of LEVELS) {
		let c = 0;
		while (total > 0 && c < mass.length && !(cum[c] >= (p / 100) * total)) c++;
		ws[p] = c;
	}
	return { rk, cum, total, ws };
}
const hotSet = (layers) => new Set(layers.flatMap((ly, l) => { const w = workingSet(ly.mass); return w.rk.slice(0, w.ws[90]).map((x) => `${l}:${x}`); }));
const close = (a, b) => Math.abs(a - b) <= 1e-9 * Math.max(1, Math.abs(b));

function checkLayers(layers, E, K, rows, what) {
	for (const ly of layers) {
		const w = workingSet(ly.mass);
		const n10 = Math.ceil(E / 10);
		assert.deepEqual(ly.ranking, w.rk, `${what} layer ${ly.layer}: ranking`);
		for (const p of LEVELS) assert.equal(ly.working_set[p], w.ws[p], `${what} layer ${ly.layer}: working set ${p}%`);
		assert.ok(close(ly.top10_share, w.total ? w.cum[n10] / w.total : 0), `${what} layer ${ly.layer}: top10_share`);
		assert.equal(ly.activations.reduce((a, b) => a + b, 0), rows * K, `${what} layer ${ly.layer}: activations sum to rows x k`);
		// 28 pairs of 8 experts: all of them are listed, most first
		assert.equal(ly.pairs.reduce((a, p) => a + p[2], 0), (rows * K * (K - 1)) / 2, `${what} layer ${ly.layer}: pairs`);
		for (let i = 1; i < ly.pairs.length; i++) assert.ok(ly.pairs[i - 1][2] >= ly.pairs[i][2]);
		for (const [i, j, c] of ly.pairs) assert.ok(i < j && j < E && c > 0);
	}
}

test('domains from chat, responses, messages and the header; every row counted; figures recomputed', async () => {
	await experts(srv.url, '?reset=1');
	const expect = { all: 0, story: 0, code: 0, prose: 0 };
	const add = (d, n) => { expect.all += n; if (d) expect[d] += n; };
	const c = await oai.chat.completions.create({ model: 'm', messages: [{ role: 'user', content: CODE }], max_tokens: 6, temperature: 0, metadata: { domain: 'code' } });
	add('code', rowsOf(c.usage.prompt_tokens, c.usage.prompt_tokens_details.cached_tokens, c.usage.completion_tokens));
	const r = await oai.responses.create({ model: 'm', input: CODE + ' ' + CODE, max_output_tokens: 5, temperature: 0, metadata: { domain: 'code' } });
	add('code', rowsOf(r.usage.input_tokens, r.usage.input_tokens_details.cached_tokens, r.usage.output_tokens));
	for (const text of [STORY, STORY.split(' ').reverse().join(' ')]) {
		const m = await ant.messages.create({ model: 'm', max_tokens: 5, messages: [{ role: 'user', content: text }], temperature: 0, metadata: { domain: 'story' } });
		add('story', rowsOf(m.usage.input_tokens + m.usage.cache_read_input_tokens, m.usage.cache_read_input_tokens, m.usage.output_tokens));
	}
	const h = await postJSON(`${srv.url}/v1/completions`, { prompt: 'The sea was calm and the sky was grey over the little town.', max_tokens: 4, ignore_eos: true }, { 'x-lanes-domain': 'prose' });
	assert.equal(h.status, 200);
	add('prose', rowsOf(h.body.usage.prompt_tokens, h.body.usage.prompt_tokens_details.cached_tokens, h.body.usage.completion_tokens));
	const u = await postJSON(`${srv.url}/v1/completions`, { prompt: 'no label here', max_tokens: 3, ignore_eos: true });
	add(null, rowsOf(u.body.usage.prompt_tokens, u.body.usage.prompt_tokens_details.cached_tokens, u.body.usage.completion_tokens));

	const { status, body: x } = await experts(srv.url);
	assert.equal(status, 200);
	assert.equal(x.model, 'ref-moe-Q8_0');
	assert.equal(x.experts, 8);
	assert.equal(x.experts_per_token, 2);
	assert.equal(x.layers.length, 3);
	assert.equal(x.rows, expect.all, 'rows: every prompt and decode row the requests ran');
	assert.equal(x.prompt_rows + x.generated_rows, x.rows);
	assert.deepEqual(Object.keys(x.domains), ['code', 'story', 'prose']);
	for (const d of ['code', 'story', 'prose']) assert.equal(x.domains[d].rows, expect[d], `${d} rows`);
	assert.equal(x.uniform_top10_share, 1 / 8);
	checkLayers(x.layers, x.experts, x.experts_per_token, x.rows, 'all');
	for (const ly of x.layers)
		ly.activations.forEach((a, i) => assert.equal(a, ly.prompt_activations[i] + ly.generated_activations[i]));
	for (const [name, d] of Object.entries(x.domains)) checkLayers(d.layers, x.experts, x.experts_per_token, d.rows, name);
	// Jaccard of hot sets, and the mass on experts hot everywhere / in one domain alone
	const names = Object.keys(x.domains), hot = Object.fromEntries(names.map((n) => [n, hotSet(x.domains[n].layers)]));
	for (let i = 0; i < names.length; i++)
		for (let j = i + 1; j < names.length; j++) {
			const a = hot[names[i]], b = hot[names[j]];
			const both = [...a].filter((k) => b.has(k)).length, any = new Set([...a, ...b]).size;
			assert.ok(close(x.jaccard[[names[i], names[j]].sort().join('|')], any ? both / any : 0), `jaccard ${names[i]}|${names[j]}`);
		}
	for (const n of names) {
		let total = 0, shared = 0, own = 0;
		x.domains[n].layers.forEach((ly, l) => ly.mass.forEach((m, e) => {
			const k = `${l}:${e}`, inAll = names.every((o) => hot[o].has(k)), only = hot[n].has(k) && names.filter((o) => hot[o].has(k)).length === 1;
			total += m;
			if (inAll) shared += m;
			if (only) own += m;
		}));
		assert.ok(close(x.shared_mass[n], shared / total), `shared_mass ${n}`);
		assert.ok(close(x.own_mass[n], own / total), `own_mass ${n}`);
	}
});

test('two domains of different texts have different hot sets', async () => {
	await experts(srv.url, '?reset=1');
	const stories = [STORY, 'The little dog ran to the river and jumped in the water. His friend the cat watched from the grass and laughed.',
		'Sara had a kite. The wind took it high into the blue sky, and she ran after it with her brother Ben.'];
	const code = [CODE, 'for (size_t i = 0; i < len; i++) { buf[i] = (char)toupper((unsigned char)src[i]); } buf[len] = 0;',
		'def parse(line): key, _, value = line.partition("="); return key.strip(), value.strip()'];
	await Promise.all([...stories.map((p) => postJSON(`${srv.url}/v1/completions`, { prompt: p, max_tokens: 2, metadata: { domain: 'story' } })),
		...code.map((p) => postJSON(`${srv.url}/v1/completions`, { prompt: p, max_tokens: 2, metadata: { domain: 'code' } }))]);
	const x = (await experts(srv.url)).body;
	const a = hotSet(x.domains.story.layers), b = hotSet(x.domains.code.layers);
	assert.ok([...a].some((k) => !b.has(k)) || [...b].some((k) => !a.has(k)), 'the hot sets differ');
	assert.ok(x.jaccard['code|story'] < 1, `jaccard ${JSON.stringify(x.jaccard)}`);
	assert.notDeepEqual(x.domains.story.layers.map((l) => l.ranking), x.domains.code.layers.map((l) => l.ranking));
});

test('?reset=1 returns the window and begins a new one', async () => {
	await postJSON(`${srv.url}/v1/completions`, { prompt: 'a b c', max_tokens: 2, metadata: { domain: 'w' } });
	const before = (await experts(srv.url, '?reset=1')).body;
	assert.ok(before.rows > 0 && before.domains.w);
	const now = (await experts(srv.url)).body;
	assert.equal(now.rows, 0);
	assert.equal(now.window, before.window + 1);
	assert.deepEqual(now.domains, {});
	assert.ok(now.layers.every((l) => l.activations.every((a) => a === 0) && l.working_set['90'] === 0));
	assert.equal((await experts(srv.url, '?reset=maybe')).status, 400);
});

test('/v1/experts.svg and the Prometheus lines', async () => {
	await postJSON(`${srv.url}/v1/completions`, { prompt: STORY, max_tokens: 3, metadata: { domain: 'story' } });
	const r = await fetch(`${srv.url}/v1/experts.svg`);
	assert.equal(r.status, 200);
	assert.equal(r.headers.get('content-type'), 'image/svg+xml');
	assert.match(r.headers.get('content-security-policy'), /default-src 'none'/);
	const svg = await r.text();
	assert.match(svg, /^<svg xmlns="http:\/\/www.w3.org\/2000\/svg"/);
	assert.ok((svg.match(/<rect [^>]*fill="#[0-9a-f]{6}"/g) || []).length >= 2 * 8 * 3, 'a cell per expert and layer, for all and the domain');
	assert.match(svg, />story \(\d+ rows\)</);
	assert.match(svg, /<polyline/);
	const x = (await experts(srv.url)).body;
	const lines = (await (await fetch(`${srv.url}/metrics`)).text()).split('\n').filter((l) => l.startsWith('lanes_expert_activations_total{'));
	assert.equal(lines.length, 8 * 3);
	const sum = lines.reduce((a, l) => a + Number(l.split(' ')[1]), 0);
	assert.equal(sum, x.rows * 3 * 2);
	assert.match(lines[9], /^lanes_expert_activations_total\{layer="1",expert="1"\} \d+$/);
});

test('bad labels get a clear error in the API shape', async () => {
	const b = await postJSON(`${srv.url}/v1/completions`, { prompt: 'x', max_tokens: 1, metadata: { domain: '<b>x</b>' } });
	assert.equal(b.status, 400);
	assert.equal(b.body.error.param, 'metadata.domain');
	assert.match(b.body.error.message, /letters, digits/);
	assert.equal((await postJSON(`${srv.url}/v1/chat/completions`, { messages: [{ role: 'user', content: 'x' }], metadata: 'code' })).status, 400);
	const a = await postJSON(`${srv.url}/v1/messages`, { model: 'm', max_tokens: 1, messages: [{ role: 'user', content: 'x' }], metadata: { domain: 7 } });
	assert.equal(a.status, 400);
	assert.equal(a.body.type, 'error');
	assert.match(a.body.error.message, /metadata.domain: must be a string/);
	const h = await postJSON(`${srv.url}/v1/completions`, { prompt: 'x', max_tokens: 1 }, { 'x-lanes-domain': 'a'.repeat(33) });
	assert.equal(h.status, 400);
	assert.match(h.body.error.message, /x-lanes-domain/);
});

test('a dense model, and the observer off, answer 404 saying why', async () => {
	const dense = await startServer(['-m', STORIES, '--metrics-experts']);
	const d = await experts(dense.url);
	assert.equal(d.status, 404);
	assert.match(d.body.error.message, /has no experts/);
	assert.equal((await fetch(`${dense.url}/v1/experts.svg`)).status, 404);
	assert.ok(!(await (await fetch(`${dense.url}/metrics`)).text()).includes('lanes_expert_activations_total'));
	dense.proc.kill('SIGKILL');
	const o = await experts(off.url);
	assert.equal(o.status, 404);
	assert.match(o.body.error.message, /observer is off/);
});

test('tokens are the same with the observer on (concurrent) and off (one at a time)', async () => {
	const reqs = [STORY, CODE, 'The sea', 'x = 1; y = 2;'].map((p, i) => ({ prompt: p, max_tokens: 12, temperature: 0.9, seed: 40 + i, ignore_eos: true, metadata: { domain: i % 2 ? 'code' : 'story' } }));
	const on = await Promise.all(reqs.map((b) => postJSON(`${srv.url}/v1/completions`, b)));
	for (let i = 0; i < reqs.length; i++) {
		const o = await postJSON(`${off.url}/v1/completions`, reqs[i]);
		assert.equal(o.status, 200);
		assert.equal(on[i].body.choices[0].token_sha, o.body.choices[0].token_sha, `request ${i}`);
		assert.equal(on[i].body.choices[0].text, o.body.choices[0].text);
	}
});

// a MoE model whose prompts take seconds (`lanes gen --shape moe-mid`, Q4_0), made once
const midModel = () => shapeModel('moe-mid');

test('/v1/experts answers while a long prompt fills, and shows its rows counted so far', async () => {
	const s = await startServer(['-m', midModel(), '--piece', '32', '--draft', 'off']);
	try {
		const N = 800, ids = [];
		for (let i = 0, x = 7; i < N; i++) { x = (Math.imul(x, 1664525) + 1013904223) >>> 0; ids.push(3 + (x % 500)); }
		let replied = false;
		const reply = postJSON(`${s.url}/v1/completions`, { prompt: ids, max_tokens: 1, metadata: { domain: 'long' } }).then((r) => ((replied = true), r));
		const filling = (sl) => sl.lanes.find((l) => l.phase === 'filling' && l.filled_tokens > 0 && l.filled_tokens < l.prompt_tokens);
		let seen = null;
		for (let i = 0; i < 20000 && !seen && !replied; i++) seen = filling((await getJSON(`${s.url}/slots`)).body);
		assert.ok(seen, 'the prompt was seen filling');
		const x = await experts(s.url);
		const svg = await fetch(`${s.url}/v1/experts.svg`);
		const wasReplied = replied;
		const later = filling((await getJSON(`${s.url}/slots`)).body);
		assert.equal(x.status, 200);
		assert.equal(svg.status, 200);
		assert.ok(!wasReplied && later && !replied, 'the prompt was still filling after /v1/experts answered');
		// a pass is counted as it ends, a moment before the round publishes /slots: one piece of slack
		assert.ok(x.body.rows >= seen.filled_tokens && x.body.rows <= later.filled_tokens + 32, `rows ${x.body.rows} between ${seen.filled_tokens} and ${later.filled_tokens}`);
		assert.equal(x.body.domains.long.rows, x.body.rows);
		const r = await reply;
		assert.equal(r.status, 200);
		assert.equal((await experts(s.url)).body.rows, N);
	} finally {
		s.proc.kill('SIGKILL');
	}
});
