// `lanes pull` against a local server that acts as the hub: the tree listing, resolve with a
// 302 to a CDN path carrying X-Linked-ETag/X-Linked-Size, Range requests, and a connection cut
// halfway through the first transfer; retries spaced by a doubling wait (the hub counts the
// tries and their spacing), ORG/REPO's default quantization. Then `lanes ls`, `lanes rm`,
// `-m NAME` with every name ls prints, and `lanes serve -m hf:`.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import crypto from 'node:crypto';
import fs from 'node:fs';
import http from 'node:http';
import path from 'node:path';
import { spawn } from 'node:child_process';
import { BIN, STORIES, TMP, startServer } from './lib.mjs';

const gguf = fs.readFileSync(STORIES);
const sha = (b) => crypto.createHash('sha256').update(b).digest('hex');
const notGguf = Buffer.alloc(4096, 7);
// the repository: FILE -> {body, oid (what the hub publishes), cut (cut the first transfer)}
const files = {
	'stories-Q8_0.gguf': { body: gguf, oid: sha(gguf), cut: true },
	'stories-F32.gguf': { body: gguf, oid: sha(gguf) },
	'wrong-Q4_0.gguf': { body: gguf, oid: sha(Buffer.from('something else')) },
	'text-Q5_0.gguf': { body: notGguf, oid: sha(notGguf) },
};
// more repositories: the names a listing holds (each file's body is the model)
const repos = {
	'org/multi': ['m-Q8_0.gguf', 'mmproj-m-Q4_K_M.gguf', 'm-Q4_K_S.gguf', 'm-Q4_K_M.gguf', 'm-Q4_K_M-00001-of-00002.gguf'],
	'org/noq4': ['mmproj-n-Q4_K_M.gguf', 'n-F16.gguf', 'n-Q8_0.gguf'],
	'org/plain': ['README.md', 'model.gguf'],
	'org/many': ['a.gguf', 'b.gguf', 'mmproj.gguf'],
};
// routes that fail before they answer: each keeps the times its requests came
const flaky = {
	'/org/repo/resolve/main/flaky-Q8_0.gguf': { fails: 5, status: 503, at: [] }, // then the file
	'/api/models/org/down/tree/main': { fails: Infinity, status: 503, retryAfter: 1, at: [] },
};
const seen = []; // [path, range] of every CDN request
let hub, endpoint;
// A gated repository: its listing and resolve need the token; its files come from a CDN at
// another origin, which records the Authorization header of each request.
const TOKEN = 'hf_test_token';
const gatedSeen = []; // {where, auth}
let cdn, cdnUrl;

before(async () => {
	cdn = http.createServer((req, res) => {
		gatedSeen.push({ where: 'cdn', auth: req.headers.authorization || null });
		const r = (req.headers.range || '').match(/^bytes=(\d+)-$/);
		const body = gguf.subarray(r ? Number(r[1]) : 0);
		res.writeHead(r ? 206 : 200, { 'content-length': body.length });
		res.end(body);
	});
	await new Promise((r) => cdn.listen(0, '127.0.0.1', r));
	cdnUrl = `http://127.0.0.1:${cdn.address().port}`;
	hub = http.createServer(hubRoutes);
	await new Promise((r) => hub.listen(0, '127.0.0.1', r));
	endpoint = `http://127.0.0.1:${hub.address().port}`;
});
after(() => {
	hub?.close();
	cdn?.close();
});

function hubRoutes(req, res) {
	const u = new URL(req.url, 'http://x');
	const f = flaky[u.pathname];
	if (f) {
		f.at.push(performance.now());
		if (f.at.length <= f.fails) {
			res.writeHead(f.status, { 'content-type': 'text/plain', ...(f.retryAfter ? { 'retry-after': String(f.retryAfter) } : {}) });
			return res.end('starting');
		}
		res.writeHead(302, { location: '/cdn/stories-F32.gguf', 'x-linked-etag': `"${sha(gguf)}"`, 'x-linked-size': String(gguf.length) });
		return res.end();
	}
	const repo = Object.keys(repos).find((r) => u.pathname.startsWith(`/api/models/${r}/`) || u.pathname.startsWith(`/${r}/`));
	if (repo && u.pathname === `/api/models/${repo}/tree/main`) {
		res.setHeader('content-type', 'application/json');
		return res.end(JSON.stringify(repos[repo].map((p) => ({ type: 'file', path: p, size: gguf.length }))));
	}
	if (repo && repos[repo].includes(u.pathname.split('/resolve/main/')[1])) {
		res.writeHead(302, { location: '/cdn/stories-F32.gguf', 'x-linked-etag': `"${sha(gguf)}"`, 'x-linked-size': String(gguf.length) });
		return res.end();
	}
	if (u.pathname.startsWith('/api/models/org/gated/') || u.pathname.startsWith('/org/gated/')) {
		const auth = req.headers.authorization || null;
		gatedSeen.push({ where: 'hub', auth });
		if (auth !== `Bearer ${TOKEN}`) {
			res.writeHead(401, { 'content-type': 'text/plain' });
			return res.end('Access to model org/gated is restricted. You must have access to it and be authenticated.');
		}
		if (u.pathname === '/api/models/org/gated/tree/main') {
			res.setHeader('content-type', 'application/json');
			return res.end(JSON.stringify([{ type: 'file', path: 'gated-Q8_0.gguf', size: gguf.length }]));
		}
		res.writeHead(302, { location: `${cdnUrl}/gated-Q8_0.gguf`, 'x-linked-etag': `"${sha(gguf)}"`, 'x-linked-size': String(gguf.length) });
		return res.end();
	}
	if (u.pathname === '/api/models/org/repo/tree/main') {
		res.setHeader('content-type', 'application/json');
		return res.end(JSON.stringify(Object.entries(files).map(([p, f]) => ({ type: 'file', path: p, size: f.body.length, lfs: { oid: f.oid, size: f.body.length } }))));
	}
	let m = u.pathname.match(/^\/org\/repo\/resolve\/main\/(.+)$/);
	if (m && files[m[1]]) {
		const f = files[m[1]];
		res.writeHead(302, { location: `/cdn/${m[1]}?sig=1`, 'x-linked-etag': `"${f.oid}"`, 'x-linked-size': String(f.body.length) });
		return res.end();
	}
	m = u.pathname.match(/^\/cdn\/(.+)$/);
	if (m && files[m[1]]) {
		const f = files[m[1]];
		seen.push([m[1], req.headers.range || null]);
		let start = 0;
		const r = (req.headers.range || '').match(/^bytes=(\d+)-$/);
		if (r) start = Number(r[1]);
		if (start >= f.body.length && r) { res.writeHead(416, { 'content-range': `bytes */${f.body.length}` }); return res.end(); }
		const body = f.body.subarray(start);
		res.writeHead(r ? 206 : 200, { 'content-length': body.length, ...(r ? { 'content-range': `bytes ${start}-${f.body.length - 1}/${f.body.length}` } : {}) });
		if (f.cut) { // the first transfer stops halfway: the connection is destroyed
			f.cut = false;
			res.write(body.subarray(0, body.length >> 1), () => res.destroy());
			return;
		}
		return res.end(body);
	}
	res.writeHead(404);
	res.end('not found');
}

const cache = fs.mkdtempSync(path.join(TMP, 'models-'));
// onErr hears stderr as it comes; stdin (a string) is written and closed
function lanes(args, env = {}, { onErr, stdin } = {}) {
	return new Promise((resolve) => {
		const p = spawn(BIN, args, { env: { ...process.env, LANES_MODELS: cache, LANES_HF_ENDPOINT: endpoint, LANES_PULL_RETRY_MS: '100', ...env } });
		let out = '', err = '';
		p.stdout.on('data', (d) => (out += d));
		p.stderr.on('data', (d) => {
			err += d;
			onErr?.(err);
		});
		// a lanes that refuses before reading its input closes the pipe: that is no failure of the test
		p.stdin.on('error', () => {});
		if (stdin !== undefined) p.stdin.end(stdin);
		// 'close', not 'exit': the last of stderr may arrive after the process has gone
		p.on('close', (code) => resolve({ code, out, err }));
	});
}
const inCache = (rel) => path.join(cache, rel);

test('ORG/REPO:QUANT picks the file from the listing; a cut transfer resumes with Range and arrives whole', async () => {
	const r = await lanes(['pull', 'org/repo:Q8_0']);
	assert.equal(r.code, 0, r.err);
	assert.equal(r.out.trim(), inCache('org/repo/stories-Q8_0.gguf'));
	assert.ok(sha(fs.readFileSync(inCache('org/repo/stories-Q8_0.gguf'))) === files['stories-Q8_0.gguf'].oid, 'byte-identical');
	const reqs = seen.filter(([p]) => p === 'stories-Q8_0.gguf');
	assert.equal(reqs[0][1], null);
	assert.equal(reqs[1][1], `bytes=${(gguf.length >> 1)}-`, 'the second transfer resumed where the first stopped');
	assert.ok(!fs.existsSync(inCache('org/repo/stories-Q8_0.gguf.part')));
	assert.doesNotMatch(r.err, /\r/, 'no progress bar when stderr is not a terminal');
	assert.match(r.err, new RegExp(`try 1 of 6\\): resuming from byte ${gguf.length >> 1} in 0\\.1 s`), 'the cut said where it resumes');
	assert.match(r.err, /pull: 100%/);
	// pulled again: the cache answers, nothing is fetched
	const n = seen.length;
	assert.equal((await lanes(['pull', 'hf:org/repo/stories-Q8_0.gguf'])).code, 0);
	assert.equal(seen.length, n);
});

test('a .part file left by an earlier run is resumed, and the result is byte-identical', async () => {
	const part = inCache('org/repo/stories-F32.gguf.part');
	fs.mkdirSync(path.dirname(part), { recursive: true });
	fs.writeFileSync(part, gguf.subarray(0, 1000));
	const r = await lanes(['pull', 'hf:org/repo/stories-F32.gguf']);
	assert.equal(r.code, 0, r.err);
	assert.deepEqual(seen.filter(([p]) => p === 'stories-F32.gguf').map(([, range]) => range), ['bytes=1000-']);
	assert.ok(fs.readFileSync(inCache('org/repo/stories-F32.gguf')).equals(gguf));
});

test('a wrong checksum is refused and the download removed; so is a file that is not GGUF', async () => {
	let r = await lanes(['pull', 'hf:org/repo/wrong-Q4_0.gguf']);
	assert.equal(r.code, 1);
	assert.match(r.err, /SHA-256 .* removed/);
	assert.ok(!fs.existsSync(inCache('org/repo/wrong-Q4_0.gguf')) && !fs.existsSync(inCache('org/repo/wrong-Q4_0.gguf.part')));
	r = await lanes(['pull', 'org/repo:Q5_0']);
	assert.equal(r.code, 1);
	assert.match(r.err, /not a GGUF file/);
	assert.ok(!fs.existsSync(inCache('org/repo/text-Q5_0.gguf')) && !fs.existsSync(inCache('org/repo/text-Q5_0.gguf.part')));
	r = await lanes(['pull', 'org/repo:Q2_K']);
	assert.equal(r.code, 1);
	assert.match(r.err, /no \.gguf file matching/);
	r = await lanes(['pull', 'hf:org/../etc/passwd.gguf']);
	assert.equal(r.code, 1);
	assert.match(r.err, /not a model reference/);
});

test('an http URL is pulled too; lanes ls lists the cache and lanes rm deletes', async () => {
	const r = await lanes(['pull', `${endpoint}/cdn/stories-F32.gguf?x=1`]);
	assert.equal(r.code, 0, r.err);
	assert.ok(fs.readFileSync(r.out.trim()).equals(gguf));
	const ls = await lanes(['ls']);
	assert.equal(ls.code, 0);
	assert.match(ls.out, /org\/repo\/stories-Q8_0\.gguf/);
	assert.match(ls.out, /org\/repo\/stories-F32\.gguf/);
	assert.match(ls.out, /url\/127\.0\.0\.1_\d+\/stories-F32\.gguf/);
	assert.equal((await lanes(['rm', 'org/repo/stories-F32.gguf'])).code, 0);
	assert.doesNotMatch((await lanes(['ls'])).out, /org\/repo\/stories-F32/);
	assert.equal((await lanes(['rm', 'org/repo/stories-F32.gguf'])).code, 1);
});

test('lanes serve -m hf:... pulls, then serves the model', async () => {
	const s = await startServer(['-m', 'hf:org/repo/stories-F32.gguf'], { LANES_MODELS: cache, LANES_HF_ENDPOINT: endpoint });
	try {
		const m = await (await fetch(`${s.url}/v1/models`)).json();
		assert.equal(m.data[0].id, 'stories-F32');
		assert.ok(fs.existsSync(inCache('org/repo/stories-F32.gguf')));
	} finally {
		s.proc.kill('SIGKILL');
	}
});

test('a gated repository: refused without a token (with a hint, no partial file); HF_TOKEN and --hf-token reach the hub, never the CDN', async () => {
	const file = inCache('org/gated/gated-Q8_0.gguf');
	let r = await lanes(['pull', 'hf:org/gated/gated-Q8_0.gguf'], { HF_TOKEN: '' });
	assert.equal(r.code, 1);
	assert.match(r.err, /HTTP 401 .*--hf-token or HF_TOKEN/);
	assert.ok(!fs.existsSync(file) && !fs.existsSync(file + '.part'), 'the refusal left no file');
	r = await lanes(['pull', 'org/gated:Q8_0'], { HF_TOKEN: '' });
	assert.equal(r.code, 1);
	assert.match(r.err, /HTTP 401 .*--hf-token or HF_TOKEN/, 'the listing says so too');
	// the environment's token: the listing and resolve carry it, the CDN at another origin does not
	gatedSeen.length = 0;
	r = await lanes(['pull', 'org/gated:Q8_0'], { HF_TOKEN: TOKEN });
	assert.equal(r.code, 0, r.err);
	assert.ok(fs.readFileSync(file).equals(gguf), 'byte-identical');
	assert.deepEqual(gatedSeen, [{ where: 'hub', auth: `Bearer ${TOKEN}` }, { where: 'hub', auth: `Bearer ${TOKEN}` }, { where: 'cdn', auth: null }]);
	// the flag's token, over an environment without one
	assert.equal((await lanes(['rm', 'org/gated/gated-Q8_0.gguf'])).code, 0);
	gatedSeen.length = 0;
	r = await lanes(['pull', '--hf-token', TOKEN, 'hf:org/gated/gated-Q8_0.gguf'], { HF_TOKEN: '' });
	assert.equal(r.code, 0, r.err);
	assert.deepEqual(gatedSeen, [{ where: 'hub', auth: `Bearer ${TOKEN}` }, { where: 'cdn', auth: null }]);
	// a URL is not the hub: the token stays home
	gatedSeen.length = 0;
	r = await lanes(['pull', `${cdnUrl}/other.gguf`], { HF_TOKEN: TOKEN });
	assert.equal(r.code, 0, r.err);
	assert.deepEqual(gatedSeen, [{ where: 'cdn', auth: null }]);
});

// The gaps between the times of a route's requests, in ms.
const gaps = (at) => at.slice(1).map((t, i) => t - at[i]);

test('a hub that answers 503 is tried again after a wait that doubles up to its cap; "resuming" only with bytes to resume', async () => {
	const f = flaky['/org/repo/resolve/main/flaky-Q8_0.gguf'];
	const r = await lanes(['pull', 'hf:org/repo/flaky-Q8_0.gguf'], { LANES_PULL_RETRY_MS: '250', LANES_PULL_RETRY_MAX_MS: '1000' });
	assert.equal(r.code, 0, r.err);
	assert.ok(fs.readFileSync(r.out.trim()).equals(gguf));
	assert.equal(f.at.length, 6, 'five failures, then the file');
	// the waits the pull said, in order: doubled from 0.25 s, capped at 1 s
	const said = [...r.err.matchAll(/HTTP 503 \(try (\d) of 6\): trying again in ([\d.]+) s/g)].map((m) => [Number(m[1]), m[2]]);
	assert.deepEqual(said, [[1, '0.25'], [2, '0.5'], [3, '1'], [4, '1'], [5, '1']]);
	assert.doesNotMatch(r.err, /resuming/, 'nothing had arrived: nothing to resume');
	// the hub saw the tries spaced at least as long as said, the doubling ones each longer than the last
	const g = gaps(f.at);
	[250, 500, 1000, 1000, 1000].forEach((w, i) => assert.ok(g[i] >= w - 5, `gap ${i + 1} ${g[i].toFixed(0)} ms >= ${w} ms`));
	assert.ok(g[0] < g[1] && g[1] < g[2], `the waits grow: ${g.map((x) => x.toFixed(0))}`);
});

test('a hub that keeps failing: tried LANES_PULL_TRIES times, its Retry-After waited out within the cap, then one clear line', async () => {
	const f = flaky['/api/models/org/down/tree/main'];
	const r = await lanes(['pull', 'org/down:Q8_0'], { LANES_PULL_TRIES: '3', LANES_PULL_RETRY_MS: '100', LANES_PULL_RETRY_MAX_MS: '2000' });
	assert.equal(r.code, 1);
	assert.equal(f.at.length, 3, 'three tries in all');
	assert.match(r.err.trimEnd().split('\n').at(-1), /^lanes pull: http:\/\/127\.0\.0\.1:\d+\/api\/models\/org\/down\/tree\/main: HTTP 503; gave up after 3 tries over [\d.]+ s \(LANES_PULL_TRIES\)$/);
	assert.equal([...r.err.matchAll(/trying again in 1 s/g)].length, 2, 'Retry-After: 1 is longer than the backoff: it is waited');
	gaps(f.at).forEach((x) => assert.ok(x >= 995, `the hub's Retry-After kept (${x.toFixed(0)} ms)`));
	// a Retry-After past the cap waits the cap
	const again = await lanes(['pull', 'org/down:Q8_0'], { LANES_PULL_TRIES: '2', LANES_PULL_RETRY_MS: '100', LANES_PULL_RETRY_MAX_MS: '500' });
	assert.equal(again.code, 1);
	assert.match(again.err, /HTTP 503 \(try 1 of 2\): trying again in 0\.5 s/);
});

test('a hub still starting: the pull waits for it and gets the file', async () => {
	// a port nothing listens on yet; the hub opens on it once the pull has said it waits
	const probe = http.createServer();
	await new Promise((r) => probe.listen(0, '127.0.0.1', r));
	const port = probe.address().port;
	await new Promise((r) => probe.close(r));
	const late = http.createServer(hubRoutes);
	let opened = false;
	const r = await lanes(['pull', 'org/repo:F32'], { LANES_HF_ENDPOINT: `http://127.0.0.1:${port}`, LANES_MODELS: fs.mkdtempSync(path.join(TMP, 'models-late-')) }, {
		onErr: (err) => {
			if (!opened && /trying again in/.test(err)) late.listen(port, '127.0.0.1'), (opened = true);
		},
	});
	late.close();
	assert.equal(r.code, 0, r.err);
	assert.match(r.err, /(Couldn't connect|Could not connect|Connection refused)[^\n]*\(try 1 of 6\): trying again in 0\.1 s/i);
	assert.ok(fs.readFileSync(r.out.trim()).equals(gguf));
});

test('ORG/REPO without :QUANT takes Q4_K_M, else the next usual quantization, never a projector, and says which', async () => {
	let r = await lanes(['pull', 'org/multi']);
	assert.equal(r.code, 0, r.err);
	assert.equal(r.out.trim(), inCache('org/multi/m-Q4_K_M.gguf'), 'Q4_K_M, a single file over a split one, not Q4_K_S nor the projector');
	assert.match(r.err, /org\/multi: no quantization given, taking Q4_K_M \(m-Q4_K_M\.gguf\); name another as org\/multi:QUANT/);
	r = await lanes(['pull', 'hf.co/org/noq4']);
	assert.equal(r.code, 0, r.err);
	assert.equal(r.out.trim(), inCache('org/noq4/n-Q8_0.gguf'), 'no Q4 model: Q8_0 before F16; the Q4_K_M projector is no model');
	assert.match(r.err, /taking Q8_0 \(n-Q8_0\.gguf\)/);
	r = await lanes(['pull', 'hf:org/plain']);
	assert.equal(r.code, 0, r.err);
	assert.equal(r.out.trim(), inCache('org/plain/model.gguf'));
	assert.match(r.err, /taking its one model model\.gguf/);
	r = await lanes(['pull', 'org/many']);
	assert.equal(r.code, 1);
	assert.match(r.err, /org\/many has 2 \.gguf files and none of the usual quantizations \(Q4_K_M, Q8_0, \.\.\.\): name one as org\/many:QUANT or hf:org\/many\/FILE\.gguf \(a\.gguf, b\.gguf\)/);
	// a name that is a file of its own is still not a reference
	assert.match((await lanes(['pull', 'org/x.gguf'])).err, /not a model reference: hf:ORG\/REPO\/FILE\.gguf, ORG\/REPO\[:QUANT\]/);
});

test('-m takes every name lanes ls prints, and the forms a pull was given; a partial download is listed as incomplete, refused by -m, removed by rm', async () => {
	fs.copyFileSync(STORIES, inCache('mine.gguf')); // a copy's name, as /api/copy writes it
	const part = inCache('org/repo/half-Q8_0.gguf.part');
	fs.writeFileSync(part, gguf.subarray(0, 1000));
	const ls = await lanes(['ls']);
	assert.equal(ls.code, 0, ls.err);
	const names = ls.out.trim().split('\n').map((l) => l.trim().split(/\s+/)[2]);
	assert.ok(names.includes('org/repo/half-Q8_0.gguf'), ls.out);
	assert.ok(!names.some((n) => n.endsWith('.part')), 'a partial download is listed by its model name');
	assert.match(ls.out, /org\/repo\/half-Q8_0\.gguf  \(incomplete: `lanes pull hf:org\/repo\/half-Q8_0\.gguf` resumes it, `lanes rm org\/repo\/half-Q8_0\.gguf` deletes it\)/);
	assert.deepEqual(names, [...names].sort(), 'in order');
	const ids = (await lanes(['tokenize', '-m', STORIES], {}, { stdin: 'Once upon' })).out.trim();
	assert.match(ids, /^\[1, \d+/);
	for (const n of names.filter((x) => x !== 'org/repo/half-Q8_0.gguf')) {
		const t = await lanes(['tokenize', '-m', n], {}, { stdin: 'Once upon' });
		assert.equal(t.code, 0, `${n}: ${t.err}`);
		assert.equal(t.out.trim(), ids, n);
	}
	for (const n of ['org/repo/stories-Q8_0', 'hf:org/repo/stories-Q8_0.gguf', 'org/repo:Q8_0', 'hf.co/org/repo:Q8_0', 'org/multi', 'mine', 'mine:latest']) {
		const t = await lanes(['tokenize', '-m', n], {}, { stdin: 'Once upon' });
		assert.equal(t.code, 0, `${n}: ${t.err}`);
		assert.equal(t.out.trim(), ids, n);
	}
	let r = await lanes(['tokenize', '-m', 'org/repo/half-Q8_0.gguf'], {}, { stdin: 'x' });
	assert.equal(r.code, 1);
	assert.match(r.err, /'org\/repo\/half-Q8_0\.gguf' is only partly downloaded \(org\/repo\/half-Q8_0\.gguf\.part\): pull it again to resume it, or remove it/);
	r = await lanes(['tokenize', '-m', 'org/absent:Q8_0'], {}, { stdin: 'x' });
	assert.equal(r.code, 1);
	assert.match(r.err, /'org\/absent:Q8_0' is neither a file nor in the model cache: `lanes pull org\/absent:Q8_0` first/);
	r = await lanes(['rm', 'org/repo/half-Q8_0.gguf']);
	assert.equal(r.code, 0, r.err);
	assert.ok(!fs.existsSync(part));
	assert.doesNotMatch((await lanes(['ls'])).out, /half-Q8_0/);
	assert.equal((await lanes(['rm', 'mine'])).code, 0);
	assert.ok(!fs.existsSync(inCache('mine.gguf')));
	// serve -m a name ls prints, cached: served as it is, nothing asked of the hub
	const n = seen.length;
	const s = await startServer(['-m', 'org/multi'], { LANES_MODELS: cache, LANES_HF_ENDPOINT: 'http://127.0.0.1:9' });
	try {
		const m = await (await fetch(`${s.url}/v1/models`)).json();
		assert.equal(m.data[0].id, 'm-Q4_K_M');
		assert.equal(seen.length, n);
	} finally {
		s.proc.kill('SIGKILL');
	}
});

test('a finished pull leaves no .part file, even one an earlier run left beside the whole file', async () => {
	const whole = inCache('org/repo/stories-Q8_0.gguf');
	fs.writeFileSync(whole + '.part', gguf.subarray(0, 10));
	const r = await lanes(['pull', 'org/repo:Q8_0']);
	assert.equal(r.code, 0, r.err);
	assert.ok(!fs.existsSync(whole + '.part'));
	assert.ok(fs.readFileSync(whole).equals(gguf));
});
