// A standing hostile-input run: a few thousand seeded cases (hostile.mjs) against a server of
// its own, which must answer every one with a status line, a well-formed reply, no 5xx and an
// error body in its API's shape, and end alive, with every lane free and no sanitizer report.
// LANES_HOSTILE_SEED (a number, or `random`), LANES_HOSTILE_N, LANES_HOSTILE_CASE=i,j (only those),
// LANES_HOSTILE_ALL=1 (the families in KNOWN too) or =family,family (those of them).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import path from 'node:path';
import { startServer, STORIES, TMP, getJSON, waitIdle } from './lib.mjs';
import { makeCase, send, judge, describe, KNOWN, KEY } from './hostile.mjs';

const envSeed = process.env.LANES_HOSTILE_SEED;
const SEED = envSeed === 'random' ? (Math.random() * 2 ** 32) >>> 0 : Number(envSeed ?? 24) >>> 0;
const N = Number(process.env.LANES_HOSTILE_N ?? 4000);
const ONLY = process.env.LANES_HOSTILE_CASE ? process.env.LANES_HOSTILE_CASE.split(',').map(Number) : null;
// `1`: every family in KNOWN too; else a comma list of those to run
const ALL_ENV = process.env.LANES_HOSTILE_ALL || '';
const ALL = ALL_ENV === '1';
const RUN_KNOWN = new Set(ALL ? Object.keys(KNOWN) : ALL_ENV.split(',').filter(Boolean));
const CONCURRENCY = 6;
const TIMEOUT_MS = 15000; // a reply slower than this is a hang, even under the sanitizers

// What the sanitizers print when they find something.
const SANITIZER = /ERROR: (AddressSanitizer|LeakSanitizer)|runtime error:|SUMMARY: (Address|Undefined|Leak)|==\d+==ERROR/;

test(`hostile requests (seed ${SEED}, ${ONLY ? ONLY.length : N} cases): every one answered, the server intact`, { timeout: 300000 }, async (t) => {
	console.log(`# hostile: seed ${SEED} (rerun: LANES_HOSTILE_SEED=${SEED} LANES_HOSTILE_N=${N})`);
	// a cache folder of its own: the slot actions write and read files there
	const srv = await startServer(['-m', STORIES, '--api-key', KEY, '--max-body', '262144', '--lanes', '4', '--cache-dir', path.join(TMP, `hostile-cache-${process.pid}`)]);
	let died = null;
	srv.exited.then((e) => (died = e));
	const failures = [];
	const skipped = {};
	const statuses = {};
	const inFlight = new Set();
	const indices = ONLY ?? Array.from({ length: N }, (_, i) => i);
	let next = 0;
	const t0 = Date.now();
	const fail = (c, what) => failures.push({ index: c.index, family: c.api ? `${c.family} ${c.api}` : c.family, what, req: describe(c) });
	const worker = async () => {
		while (next < indices.length && !died) {
			const c = makeCase(SEED, indices[next++]);
			const known = c.tags.filter((f) => f in KNOWN && !RUN_KNOWN.has(f));
			if (known.length && !ONLY) {
				skipped[known[0]] = (skipped[known[0]] || 0) + 1;
				continue;
			}
			inFlight.add(c);
			const res = await send(srv.port, c, { timeoutMs: TIMEOUT_MS });
			inFlight.delete(c);
			if (died) {
				fail(c, `the server died (${JSON.stringify(died)}) with this case in flight`);
				break;
			}
			for (const rep of res.replies) {
				statuses[rep.status] = (statuses[rep.status] || 0) + 1;
				const bad = judge(c, rep);
				if (bad) fail(c, bad);
			}
			if (res.bad) fail(c, res.bad);
			else if (res.vanished || c.replies === 0) continue;
			else if (res.timedOut) fail(c, `no complete reply in ${TIMEOUT_MS} ms (${res.bytes} bytes read)`);
			else if (res.replies.length < c.replies && !/close/i.test(res.replies.at(-1)?.headers.connection || '')) {
				const how = res.error ? ` (${res.error})` : '';
				fail(c, res.bytes ? `${res.replies.length} of ${c.replies} replies, then the connection closed${how}` : `the connection closed with no status line${how}`);
			}
		}
	};
	await Promise.all(Array.from({ length: CONCURRENCY }, worker));
	if (died) failures.unshift({ index: -1, family: 'server', what: `the server died: ${JSON.stringify(died)}\n${srv.log().slice(-3000)}`, req: '' });
	const ms = Date.now() - t0;
	console.log(`# hostile: ${indices.length} cases in ${ms} ms; statuses ${JSON.stringify(statuses)}; skipped ${JSON.stringify(skipped)}`);

	if (!died) {
		assert.equal((await getJSON(`${srv.url}/health`)).status, 200, '/health answers after the run');
		const idle = await waitIdle(srv.url, 20000);
		const slots = (await getJSON(`${srv.url}/slots`)).body;
		assert.ok(idle >= 0, `every lane is free after the run: ${JSON.stringify(slots.lanes)} queue ${slots.queue_depth}`);
		srv.proc.kill('SIGTERM');
	}
	const exit = await srv.exited;
	const log = srv.log();
	const report = log.match(SANITIZER);
	if (report) {
		const i = log.indexOf(report[0]);
		failures.push({ index: -1, family: 'sanitizer', what: log.slice(Math.max(0, i - 200), i + 3000), req: '' });
	}
	if (failures.length) {
		const seen = new Map();
		for (const f of failures) {
			const k = f.family + ': ' + f.what.replace(/\d+/g, 'N').slice(0, 80);
			if (!seen.has(k)) seen.set(k, { ...f, count: 0 });
			seen.get(k).count++;
		}
		const lines = [...seen.values()].map((f) => `case ${f.index} [${f.family}] ×${f.count}: ${f.what}\n    ${f.req}`);
		assert.fail(`${failures.length} failures (seed ${SEED}; rerun one with LANES_HOSTILE_SEED=${SEED} LANES_HOSTILE_CASE=i):\n${lines.join('\n')}`);
	}
	assert.equal(died ? died.code : exit.code, 0, `the server exits 0 after SIGTERM: ${JSON.stringify(exit)}\n${log.slice(-2000)}`);
});

test('the judge refuses a 5xx, a body out of shape, an unfinished stream', () => {
	const oa = { shape: 'openai' };
	const an = { shape: 'anthropic' };
	const json = { 'content-type': 'application/json' };
	const err = (status, body, h = json) => ({ status, headers: h, body: JSON.stringify(body) });
	const e = { error: { message: 'm', type: 't' } };
	const ae = { type: 'error', error: { type: 't', message: 'm' } };
	assert.equal(judge(oa, err(400, e)), null);
	assert.equal(judge(an, err(400, ae)), null);
	assert.equal(judge(an, err(529, ae, { ...json, 'retry-after': '1' })), null);
	assert.equal(judge({ shape: 'any', badVersion: true }, err(505, e)), null);
	assert.match(judge({ shape: 'any', badVersion: true }, { status: 505, headers: {}, body: '<html></html>' }), /not JSON/);
	assert.match(judge({ shape: 'any' }, err(505, e)), /status 505/);
	assert.match(judge(oa, err(500, e)), /status 500/);
	assert.match(judge(oa, err(503, e)), /status 503/);
	assert.match(judge(oa, err(529, e, { ...json, 'retry-after': '1' })), /status 529/);
	assert.match(judge(oa, err(400, ae)), /OpenAI error shape/);
	assert.match(judge(an, err(400, e)), /Anthropic error shape/);
	assert.match(judge(oa, { status: 400, headers: {}, body: '<html>x</html>' }), /not JSON/);
	assert.match(judge({ shape: 'any', protocol: true }, { status: 400, headers: {}, body: '<html>x</html>' }), /not JSON/);
	assert.match(judge(oa, { status: 200, headers: json, body: '{"a":' }), /not JSON/);
	const sse = { 'content-type': 'text/event-stream' };
	assert.match(judge(oa, { status: 200, headers: sse, body: 'data: {"choices":[]}\n\n' }), /does not end/);
	assert.equal(judge(oa, { status: 200, headers: sse, body: 'data: {"choices":[]}\n\ndata: [DONE]\n\n' }), null);
});
