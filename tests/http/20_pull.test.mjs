// `lanes pull` against a local server that acts as the hub: the tree listing, resolve with a
// 302 to a CDN path carrying X-Linked-ETag/X-Linked-Size, Range requests, and a connection cut
// halfway through the first transfer. Then `lanes ls`, `lanes rm` and `lanes serve -m hf:`.
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
	hub = http.createServer((req, res) => {
		const u = new URL(req.url, 'http://x');
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
	});
	await new Promise((r) => hub.listen(0, '127.0.0.1', r));
	endpoint = `http://127.0.0.1:${hub.address().port}`;
});
after(() => {
	hub?.close();
	cdn?.close();
});

const cache = fs.mkdtempSync(path.join(TMP, 'models-'));
function lanes(args, env = {}) {
	return new Promise((resolve) => {
		const p = spawn(BIN, args, { env: { ...process.env, LANES_MODELS: cache, LANES_HF_ENDPOINT: endpoint, ...env } });
		let out = '', err = '';
		p.stdout.on('data', (d) => (out += d));
		p.stderr.on('data', (d) => (err += d));
		p.on('exit', (code) => resolve({ code, out, err }));
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
