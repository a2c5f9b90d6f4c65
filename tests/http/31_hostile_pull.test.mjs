// `lanes pull` against a hostile hub: wrong checksums, redirect loops and chains, bodies past
// the published size or never ending, names that climb out of the cache, stalls, errors with
// HTML or endless bodies. Each pull runs with HOME in a fresh folder and must exit 1 with one
// line naming the problem, in bounded time, leaving no file outside HOME/.cache/lanes/models
// and no .part file there unless it is a resumable partial download.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import crypto from 'node:crypto';
import fs from 'node:fs';
import http from 'node:http';
import path from 'node:path';
import { spawn } from 'node:child_process';
import { BIN, STORIES, TMP } from './lib.mjs';

const gguf = fs.readFileSync(STORIES);
const sha = (b) => crypto.createHash('sha256').update(b).digest('hex');
const SANITIZER = /ERROR: (AddressSanitizer|LeakSanitizer)|runtime error:|SUMMARY: (Address|Undefined|Leak)/;
const STALL_S = 1; // LANES_PULL_STALL_S for every pull here
const TRIES = 6; // a stalled or broken transfer is tried this often (LANES_PULL_TRIES's default)
const RETRY_MS = { LANES_PULL_RETRY_MS: '50', LANES_PULL_RETRY_MAX_MS: '200' }; // short waits between tries
const ROOT = fs.mkdtempSync(path.join(TMP, 'pull-hostile-'));
// a file an absolute name from the hub would reach, were it ever written
const ABS = path.join(ROOT, 'absolute-Q4_0.gguf');

let hub, endpoint;
const sent = {}; // bytes written to each endless body before the client stopped reading
const open = new Set(); // sockets, destroyed at the end (stalled ones never close on their own)

// An endless body: 64 KiB chunks as fast as the socket takes them, until it closes.
function endless(res, key, head) {
	sent[key] = 0;
	res.writeHead(head.status ?? 200, head.headers);
	const chunk = Buffer.alloc(65536, 0x41);
	const pump = () => {
		while (!res.destroyed && res.write(chunk)) sent[key] += chunk.length;
		if (!res.destroyed) res.once('drain', pump);
	};
	res.on('close', () => (sent[key] += 0));
	pump();
}

function resumeFrom(req, res, from) {
	if (!req.headers.range) {
		res.writeHead(200, { 'content-length': gguf.length });
		res.write(gguf.subarray(0, gguf.length >> 1), () => res.destroy());
		return;
	}
	res.writeHead(206, { 'content-length': gguf.length - from, 'content-range': `bytes ${from}-${gguf.length - 1}/${gguf.length}` });
	res.end(gguf.subarray(from));
}

// Raw bytes on the request's socket, bypassing node's framing (lengths that lie).
function raw(req, text, body) {
	req.socket.write(text);
	if (body) req.socket.write(body);
}

const routes = {
	// a checksum that is not the body's
	'/evil/repo/resolve/main/badsha-Q8_0.gguf': (req, res) => {
		res.writeHead(302, { location: '/cdn/whole', 'x-linked-etag': `"${sha(Buffer.from('not it'))}"`, 'x-linked-size': String(gguf.length) });
		res.end();
	},
	'/cdn/whole': (req, res) => {
		res.writeHead(200, { 'content-length': gguf.length });
		res.end(gguf);
	},
	// A -> B -> A -> ...
	'/evil/repo/resolve/main/loop.gguf': (req, res) => {
		res.writeHead(302, { location: '/loop/b' });
		res.end();
	},
	'/loop/b': (req, res) => {
		res.writeHead(302, { location: '/evil/repo/resolve/main/loop.gguf' });
		res.end();
	},
	// a chain that never repeats a URL
	'/evil/repo/resolve/main/chain.gguf': (req, res) => {
		res.writeHead(302, { location: '/chain/1' });
		res.end();
	},
	'/evil/repo/resolve/main/noloc.gguf': (req, res) => {
		res.writeHead(302, { 'content-length': 0 });
		res.end();
	},
	'/evil/repo/resolve/main/file-Q8_0.gguf': (req, res) => {
		res.writeHead(302, { location: `file://${STORIES}` });
		res.end();
	},
	// the published size is 4096 bytes; the body never ends
	'/evil/repo/resolve/main/endless-Q8_0.gguf': (req, res) => {
		res.writeHead(302, { location: '/cdn/endless-linked', 'x-linked-size': '4096' });
		res.end();
	},
	'/cdn/endless-linked': (req, res) => endless(res, 'linked', {}),
	// no size at all, chunked and endless
	'/raw/endless.gguf': (req, res) => endless(res, 'unsized', {}),
	// a Content-Length of 10 TB
	'/raw/huge.gguf': (req, res) => endless(res, 'huge', { headers: { 'content-length': String(1e13) } }),
	// more bytes than Content-Length says, on a connection that closes
	'/raw/overlong.gguf': (req) => {
		raw(req, `HTTP/1.1 200 OK\r\nContent-Length: ${gguf.length}\r\nConnection: close\r\n\r\n`, Buffer.concat([gguf, Buffer.alloc(1 << 20, 0x42)]));
		req.socket.end();
	},
	// the first transfer breaks halfway; asked for the rest, a 206 that starts at FROM
	'/raw/range-from-0.gguf': (req, res) => resumeFrom(req, res, 0),
	'/raw/range-from-5.gguf': (req, res) => resumeFrom(req, res, 5),
	// names that climb out of the cache, absolute ones, and odd bytes
	'/api/models/evil/names/tree/main': (req, res) => {
		res.setHeader('content-type', 'application/json');
		res.end(JSON.stringify(['../../../../../escape-Q4_0.gguf', ABS, 'a/../../../x-Q4_0.gguf', 'odd\u001b[31mred-Q4_0.gguf',
			'nl\n-Q4_0.gguf', 'back\\..\\..\\slash-Q4_0.gguf', 'sp ace-Q4_0.gguf', `${'l'.repeat(3000)}-Q4_0.gguf`]
			.map((p) => ({ type: 'file', path: p, size: gguf.length }))));
	},
	// a Content-Disposition that names somewhere else: the name is the reference's, always
	'/evil/repo/resolve/main/cd-Q8_0.gguf': (req, res) => {
		res.writeHead(200, { 'content-length': gguf.length, 'content-disposition': 'attachment; filename="../../../../../../cd-escape.gguf"' });
		res.end(gguf);
	},
	// stalls: nothing at all, or half the body then nothing
	'/evil/repo/resolve/main/stall-Q8_0.gguf': () => {},
	'/api/models/evil/stall/tree/main': () => {},
	'/evil/repo/resolve/main/halfstall-Q8_0.gguf': (req, res) => {
		const r = (req.headers.range || '').match(/^bytes=(\d+)-$/);
		const start = r ? Number(r[1]) : 0;
		res.writeHead(r ? 206 : 200, { 'content-length': gguf.length - start, ...(r ? { 'content-range': `bytes ${start}-${gguf.length - 1}/${gguf.length}` } : {}) });
		if (start === 0) res.write(gguf.subarray(0, 1000));
	},
	// errors with HTML, and with endless bodies
	'/evil/repo/resolve/main/html-Q8_0.gguf': (req, res) => {
		res.writeHead(500, { 'content-type': 'text/html' });
		res.end(`<!DOCTYPE html>\n<html><body><h1>Internal Server Error</h1>${'<p>oops</p>\n'.repeat(5000)}</body></html>\n`);
	},
	'/evil/repo/resolve/main/huge404-Q8_0.gguf': (req, res) => endless(res, 'err404', { status: 404, headers: { 'content-type': 'text/html' } }),
	'/api/models/evil/down/tree/main': (req, res) => endless(res, 'list503', { status: 503, headers: { 'content-type': 'text/html' } }),
	'/api/models/evil/biglist/tree/main': (req, res) => endless(res, 'biglist', { headers: { 'content-type': 'application/json' } }),
};

before(async () => {
	hub = http.createServer((req, res) => {
		open.add(req.socket);
		req.socket.on('close', () => open.delete(req.socket));
		const u = new URL(req.url, 'http://x');
		const chain = u.pathname.match(/^\/chain\/(\d+)$/);
		if (chain) {
			res.writeHead(302, { location: `/chain/${Number(chain[1]) + 1}` });
			return res.end();
		}
		const h = routes[u.pathname];
		if (h) return h(req, res);
		res.writeHead(404, { 'content-type': 'text/plain' });
		res.end('not found');
	});
	await new Promise((r) => hub.listen(0, '127.0.0.1', r));
	endpoint = `http://127.0.0.1:${hub.address().port}`;
});
after(() => {
	for (const s of open) s.destroy();
	hub?.close();
});

// Every file under dir, relative to it.
function walk(dir, rel = '') {
	const out = [];
	for (const e of fs.readdirSync(path.join(dir, rel), { withFileTypes: true })) {
		const r = path.join(rel, e.name);
		if (e.isDirectory()) out.push(...walk(dir, r));
		else out.push(r);
	}
	return out;
}

let homes = 0;
// `lanes pull ARGS` with HOME a fresh folder under ROOT: exit code, stderr, time, and the files
// it left (relative to the model cache; any outside it are `outside`).
function pull(args, env = {}, home = path.join(ROOT, `home-${homes++}`)) {
	fs.mkdirSync(home, { recursive: true });
	const e = { ...process.env, HOME: home, LANES_HF_ENDPOINT: endpoint, LANES_PULL_STALL_S: String(STALL_S), ...RETRY_MS, ...env };
	delete e.LANES_MODELS;
	delete e.HF_TOKEN;
	const t0 = Date.now();
	return new Promise((resolve) => {
		const p = spawn(BIN, ['pull', ...args], { env: e });
		let out = '', err = '';
		p.stdout.on('data', (d) => (out += d));
		p.stderr.on('data', (d) => (err += d));
		p.on('close', (code) => {
			const models = path.join('.cache', 'lanes', 'models');
			const files = walk(home);
			resolve({
				code, out, err, ms: Date.now() - t0, home,
				last: err.trimEnd().split('\n').at(-1),
				cached: files.filter((f) => f.startsWith(models + path.sep)).map((f) => f.slice(models.length + 1)),
				outside: files.filter((f) => !f.startsWith(models + path.sep)),
			});
		});
	});
}

// The shared checks of a refused pull: exit 1, the last line names the problem, in time, no
// file outside the cache, no file at the final name, and only `partial` as a .part file.
function refused(r, msg, { withinMs = 10000, partial = null } = {}) {
	assert.doesNotMatch(r.err, SANITIZER, r.err);
	assert.equal(r.code, 1, `exit status 1: ${r.err}`);
	assert.equal(r.out, '', 'no path printed');
	assert.match(r.last, /^lanes pull: /, `the last line is the error: ${r.err}`);
	assert.match(r.last, msg);
	assert.ok(r.last.length < 600, `one short line: ${r.last.length} characters`);
	assert.doesNotMatch(r.err, /<html|<p>|\u001b/i, 'no HTML or terminal escapes from the hub on the terminal');
	assert.ok(r.ms < withinMs, `answered within ${withinMs} ms (took ${r.ms})`);
	assert.deepEqual(r.outside, [], 'nothing outside the model cache');
	assert.deepEqual(r.cached.filter((f) => f.endsWith('.gguf')), [], 'no file at a final name');
	assert.deepEqual(r.cached.filter((f) => f.endsWith('.part')), partial ? [partial] : [], 'no stray partial file');
	assert.deepEqual(walk(ROOT).filter((f) => !/^home-\d+\//.test(f)), [], 'nothing written beside the HOME folders');
}

test('a checksum that is not the body\'s: refused, and the download removed', async () => {
	refused(await pull(['hf:evil/repo/badsha-Q8_0.gguf']), /badsha-Q8_0\.gguf: SHA-256 [0-9a-f]{64}, the hub publishes [0-9a-f]{64}: removed/);
});

test('redirects: a loop, an endless chain, one without a Location, one to file://', async () => {
	refused(await pull(['hf:evil/repo/loop.gguf']), /too many redirects/i);
	refused(await pull(['hf:evil/repo/chain.gguf']), /too many redirects/i);
	refused(await pull(['hf:evil/repo/noloc.gguf']), /HTTP 302/);
	refused(await pull(['hf:evil/repo/file-Q8_0.gguf']), /unsupported protocol|not allowed/i);
});

test('a body past the published size, or with none and never ending, is cut off and removed', async () => {
	let r = await pull(['hf:evil/repo/endless-Q8_0.gguf']);
	refused(r, /more than the 4096 bytes the hub publishes/);
	assert.ok(sent.linked < 64 << 20, `the transfer stopped early (${sent.linked} bytes sent)`);
	r = await pull([`${endpoint}/raw/endless.gguf`], { LANES_PULL_MAX_BYTES: String(1 << 20) });
	refused(r, /larger than 1048576 bytes \(LANES_PULL_MAX_BYTES\)/);
	assert.ok(sent.unsized < 64 << 20, `the transfer stopped early (${sent.unsized} bytes sent)`);
	r = await pull([`${endpoint}/raw/huge.gguf`]);
	refused(r, /10000000000000 bytes, larger than \d+ bytes \(LANES_PULL_MAX_BYTES\)/);
	assert.ok(sent.huge < 64 << 20, `refused before the body (${sent.huge} bytes sent)`);
	// more bytes than Content-Length: only Content-Length of them are taken, and they are the model
	r = await pull([`${endpoint}/raw/overlong.gguf`]);
	assert.equal(r.code, 0, r.err);
	assert.ok(fs.readFileSync(r.out.trim()).equals(gguf));
	// a resumed transfer whose 206 starts at 0 starts the file over; one that starts elsewhere is
	// refused, and what came before stays for a later pull
	r = await pull([`${endpoint}/raw/range-from-0.gguf`]);
	assert.equal(r.code, 0, r.err);
	assert.ok(fs.readFileSync(r.out.trim()).equals(gguf), 'never appended');
	r = await pull([`${endpoint}/raw/range-from-5.gguf`]);
	refused(r, /the hub answered 206 from byte 5 when asked for bytes \d+-$/, { partial: `url/127.0.0.1_${hub.address().port}/range-from-5.gguf.part` });
});

test('names from the hub that leave the cache, are absolute or hold odd bytes: refused, each named safely', async () => {
	const r = await pull(['evil/names:Q4_0']);
	refused(r, /evil\/names lists no \.gguf file matching 'Q4_0' with a safe name \(refused 8, such as '\.\.\/\.\.\/\.\.\/\.\.\/\.\.\/escape-Q4_0\.gguf'\)/);
	assert.ok(!fs.existsSync(ABS));
	assert.ok(!fs.existsSync(path.join(TMP, 'escape-Q4_0.gguf')) && !fs.existsSync('/escape-Q4_0.gguf'));
	// Content-Disposition names nothing: the file takes the reference's name
	const ok = await pull(['hf:evil/repo/cd-Q8_0.gguf']);
	assert.equal(ok.code, 0, ok.err);
	assert.deepEqual(ok.cached, ['evil/repo/cd-Q8_0.gguf']);
	assert.deepEqual(ok.outside, []);
});

test(`stalls: nothing sent, or half the body then nothing, end after ${TRIES} tries of ${STALL_S} s; a partial download resumes`, async () => {
	const bound = (TRIES * 2 * STALL_S + 10) * 1000; // a try that got bytes first stalls for up to twice STALL_S
	const [a, b, c] = await Promise.all([
		pull(['hf:evil/repo/stall-Q8_0.gguf']),
		pull(['evil/stall:Q8_0']),
		pull(['hf:evil/repo/halfstall-Q8_0.gguf']),
	]);
	const stalled = new RegExp(`nothing arrived for ${STALL_S} s \\(LANES_PULL_STALL_S\\); gave up after ${TRIES} tries over [\\d.]+ s`);
	refused(a, stalled, { withinMs: bound });
	assert.ok(a.ms >= TRIES * STALL_S * 1000 - 500, `each try waited its ${STALL_S} s (${a.ms} ms)`);
	refused(b, new RegExp(`nothing arrived for ${STALL_S} s \\(LANES_PULL_STALL_S\\)`), { withinMs: bound });
	// the 1000 bytes that came stay as a resumable .part file, which `lanes ls` lists
	refused(c, stalled, { withinMs: bound, partial: 'evil/repo/halfstall-Q8_0.gguf.part' });
	assert.equal(fs.statSync(path.join(c.home, '.cache/lanes/models/evil/repo/halfstall-Q8_0.gguf.part')).size, 1000);
	const ls = spawn(BIN, ['ls'], { env: { ...process.env, HOME: c.home, LANES_MODELS: '' } });
	let out = '';
	ls.stdout.on('data', (d) => (out += d));
	await new Promise((r) => ls.on('close', r));
	assert.match(out, /evil\/repo\/halfstall-Q8_0\.gguf  \(incomplete: `lanes pull hf:evil\/repo\/halfstall-Q8_0\.gguf` resumes it/);
	// the hub recovers: the next pull asks for the rest and the file arrives whole
	routes['/evil/repo/resolve/main/halfstall-Q8_0.gguf'] = (req, res) => {
		const start = Number((req.headers.range || 'bytes=0-').match(/^bytes=(\d+)-$/)[1]);
		assert.equal(start, 1000, 'resumed where it stopped');
		res.writeHead(206, { 'content-length': gguf.length - start, 'content-range': `bytes ${start}-${gguf.length - 1}/${gguf.length}` });
		res.end(gguf.subarray(start));
	};
	const d = await pull(['hf:evil/repo/halfstall-Q8_0.gguf'], {}, c.home);
	assert.equal(d.code, 0, d.err);
	assert.deepEqual(d.cached, ['evil/repo/halfstall-Q8_0.gguf']);
	assert.ok(fs.readFileSync(path.join(c.home, '.cache/lanes/models', d.cached[0])).equals(gguf));
});

test('errors with an HTML page or an endless body: the status in one line, in bounded time', async () => {
	refused(await pull(['hf:evil/repo/html-Q8_0.gguf']), /: HTTP 500$/);
	refused(await pull(['hf:evil/repo/huge404-Q8_0.gguf']), /: HTTP 404$/);
	assert.ok(sent.err404 < 64 << 20, `the error's body was not read to its end (${sent.err404} bytes sent)`);
	refused(await pull(['evil/down:Q4_0']), new RegExp(`: HTTP 503; gave up after ${TRIES} tries over [\\d.]+ s \\(LANES_PULL_TRIES\\)$`));
	refused(await pull(['evil/biglist:Q4_0']), /the file listing is larger than 64 MiB/, { withinMs: 30000 });
});
