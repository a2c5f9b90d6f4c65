// Connections against hostile and odd clients, on raw sockets: hundreds of slow sockets
// (from one address and from several) leave /health and completions answering; requests
// libmicrohttpd would accept and then wait on, or close without a word, get a 400 or 408
// at once; a half-closed client gets its whole reply; an upload cut by SIGTERM gets a 503.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import net from 'node:net';
import { startServer, STORIES, KEY, rawExchange, httpRequest, statusOf, bodyOf, sleep, getJSON } from './lib.mjs';

async function server(t, args = []) {
	const srv = await startServer(['-m', STORIES, '--api-key', KEY, ...args]);
	t.after(() => srv.proc.exitCode === null && srv.proc.kill('SIGKILL'));
	return srv;
}

// n sockets from the given local addresses, each sending one header line every 2 s and
// never finishing its request.
async function slowSockets(port, n, addrs) {
	const socks = [];
	for (let i = 0; i < n; i++) {
		const s = net.connect({ port, host: '127.0.0.1', localAddress: addrs[i % addrs.length] });
		s.on('error', () => {});
		s.on('connect', () => s.write('POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n'));
		socks.push(s);
	}
	const timer = setInterval(() => {
		for (const s of socks) if (!s.destroyed && s.writable) s.write('X-Slow: 1\r\n');
	}, 2000);
	await sleep(800);
	return () => {
		clearInterval(timer);
		for (const s of socks) s.destroy();
	};
}

const ok = (p) => p.then((r) => r.status, (e) => String(e.name || e));

const health = (url) => ok(fetch(`${url}/health`, { signal: AbortSignal.timeout(10000) }));
const complete = (url) =>
	ok(
		fetch(`${url}/v1/completions`, {
			method: 'POST',
			headers: { 'Content-Type': 'application/json', Authorization: `Bearer ${KEY}` },
			body: JSON.stringify({ prompt: 'Once upon', max_tokens: 4 }),
			signal: AbortSignal.timeout(10000),
		}),
	);

test('300 slow sockets from one address: 15 health checks and 15 completions from another all succeed', async (t) => {
	const srv = await server(t);
	const stop = await slowSockets(srv.port, 300, ['127.0.0.2']);
	t.after(stop);
	const got = await Promise.all([...Array(15)].map(() => health(srv.url)).concat([...Array(15)].map(() => complete(srv.url))));
	assert.deepEqual(got, Array(30).fill(200));
});

test('300 slow sockets from ten addresses leave /health answering', async (t) => {
	const srv = await server(t);
	const addrs = [...Array(10)].map((_, i) => `127.0.0.${i + 2}`);
	const stop = await slowSockets(srv.port, 300, addrs);
	t.after(stop);
	const got = await Promise.all([...Array(15)].map(() => health(srv.url)));
	assert.deepEqual(got, Array(15).fill(200));
});

test('a connection past --max-connections-per-ip gets a 429 with Retry-After and is closed; other addresses are served', async (t) => {
	const srv = await server(t, ['--max-connections-per-ip', '2']);
	const open = [];
	const read = (localAddress) =>
		new Promise((resolve) => {
			const s = net.connect({ port: srv.port, host: '127.0.0.1', localAddress });
			let got = '';
			s.on('error', () => {});
			s.on('data', (d) => (got += d.toString('latin1')));
			s.on('close', () => resolve(got));
			setTimeout(() => resolve(null), 1500); // still open: within the limit
			open.push(s);
		});
	t.after(() => open.forEach((s) => s.destroy()));
	assert.deepEqual(await Promise.all([read('127.0.0.5'), read('127.0.0.5')]), [null, null]);
	const got = await read('127.0.0.5');
	assert.equal(statusOf(got), 429, JSON.stringify(got));
	assert.match(got, /\r\nretry-after: 1\r\n/i);
	const e = JSON.parse(bodyOf(got)).error;
	assert.equal(e.type, 'rate_limit_error');
	assert.match(e.message, /max-connections-per-ip 2/);
	assert.equal((await fetch(`${srv.url}/health`)).status, 200);
});

const errorOf = (raw) => JSON.parse(bodyOf(raw)).error;

test('framing a server cannot honour gets a 400 at once, in the API shape', async (t) => {
	const { port } = await server(t);
	const once = { keepOpen: true, timeoutMs: 3000 };
	// an unsupported transfer encoding: no reply and a held connection before
	let r = await rawExchange(port, httpRequest('POST', '/v1/completions', 'abc', { 'Transfer-Encoding': 'gzip' }), once);
	assert.equal(statusOf(r.text), 400, r.text.slice(0, 80));
	assert.match(errorOf(r.text).message, /Transfer-Encoding 'gzip'/);
	// a request line with no spaces: closed with nothing sent before
	r = await rawExchange(port, 'GARBAGE\r\n\r\n', once);
	assert.equal(statusOf(r.text), 400, r.text.slice(0, 80));
	assert.match(errorOf(r.text).message, /malformed/);
	// binary junk (a TLS hello sent to the plain port)
	const junk = Buffer.from([0x16, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00, 0x01, 0xfc, 0x03, 0x03, 0x0a, 0xff, 0x00, 0x0d, 0x0a]);
	r = await rawExchange(port, junk, once);
	assert.equal(statusOf(r.text), 400, r.text.slice(0, 80));
	// two different Content-Length headers: the first one was used before
	const body = JSON.stringify({ content: 'Once upon a time' });
	const two =
		`POST /tokenize HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer ${KEY}\r\nContent-Type: application/json\r\n` +
		`Content-Length: ${body.length}\r\nContent-Length: ${body.length + 5}\r\nConnection: close\r\n\r\n${body}`;
	r = await rawExchange(port, two, once);
	assert.equal(statusOf(r.text), 400, r.text.slice(0, 80));
	assert.match(errorOf(r.text).message, /Content-Length/);
	// HTTP/1.1 without Host
	r = await rawExchange(port, 'GET /health HTTP/1.1\r\nConnection: close\r\n\r\n', once);
	assert.equal(statusOf(r.text), 400, r.text.slice(0, 80));
	assert.match(errorOf(r.text).message, /Host/);
	// HTTP/1.0 needs none
	r = await rawExchange(port, 'GET /health HTTP/1.0\r\n\r\n', once);
	assert.equal(statusOf(r.text), 200);
});

test('a chunked body is judged before libmicrohttpd reads it: malformed framing gets JSON, sound framing its reply', async (t) => {
	const { port } = await server(t);
	const once = { keepOpen: true, timeoutMs: 3000 };
	const ok = JSON.stringify({ prompt: 'Once', max_tokens: 2 });
	const chunked = (path, body) => httpRequest('POST', path, body, { 'Transfer-Encoding': 'chunked' });
	// each got libmicrohttpd's HTML 400 or 413 before (or a wait for bytes that never come)
	const bad = [
		['zz\r\n', 400, /hex digits/],
		['-1\r\n', 400, /hex digits/],
		['ffffffffffffffffffff\r\n', 413, /larger than the limit/],
		['900000\r\n', 413, /larger than the limit of 8388608 bytes/],
		[`3\r\n${ok}\r\n0\r\n\r\n`, 400, /longer than its size/],
		[`${ok.length.toString(16)}\r\n${ok}\r\n0\r\nNoColon\r\n\r\n`, 400, /Name: value/],
		[`${ok.length.toString(16)} junk\r\n${ok}\r\n0\r\n\r\n`, 400, /chunk size line/],
	];
	for (const [path, shape] of [['/v1/completions', 'openai'], ['/v1/messages', 'anthropic']]) {
		for (const [body, status, msg] of bad) {
			const r = await rawExchange(port, chunked(path, body), once);
			assert.equal(statusOf(r.text), status, `${JSON.stringify(body.slice(0, 30))}: ${JSON.stringify(r.text.slice(0, 200))}`);
			assert.match(jsonError(r.text, shape).message, msg);
		}
	}
	// a body cut short by the client's close
	let r = await rawExchange(port, chunked('/v1/completions', `${ok.length.toString(16)}\r\n${ok.slice(0, 5)}`), { timeoutMs: 3000 });
	assert.equal(statusOf(r.text), 400, r.text.slice(0, 200));
	assert.match(jsonError(r.text).message, /closed before its last chunk/);
	// sound framing: extensions, a trailer, and chunks that arrive in pieces
	const parts = [ok.slice(0, 7), ok.slice(7)];
	const sound = [
		[chunked('/v1/completions', `${ok.length.toString(16)};name=v\r\n${ok}\r\n0\r\nX-Trailer: 1\r\n\r\n`)],
		[chunked('/v1/completions', `${parts[0].length.toString(16)}\r\n${parts[0]}\r\n`), `${parts[1].length.toString(16)}\r\n${parts[1]}\r\n`, '0\r\n\r\n'],
	];
	for (const pieces of sound) {
		const c = await session(port);
		for (const p of pieces) {
			c.write(p);
			await sleep(30);
		}
		const rep = await c.reply();
		assert.equal(statusOf(rep), 200, rep.slice(0, 200));
		assert.equal(JSON.parse(bodyOf(rep)).usage.completion_tokens, 2);
		c.s.destroy();
	}
	// a body longer than the part the gate reads is passed on once that part is sound
	const long = JSON.stringify({ content: 'Once upon a time. '.repeat(6000) });
	let framed = '';
	for (let i = 0; i < long.length; i += 5000) framed += `${Math.min(5000, long.length - i).toString(16)}\r\n${long.slice(i, i + 5000)}\r\n`;
	r = await rawExchange(port, httpRequest('POST', '/tokenize', `${framed}0\r\n\r\n`, { 'Transfer-Encoding': 'chunked' }), once);
	assert.equal(statusOf(r.text), 200, r.text.slice(0, 200));
	assert.ok(JSON.parse(bodyOf(r.text)).tokens.length > 6000);
});

test('a request head trickled past --header-timeout is closed with a 408', async (t) => {
	const { port } = await server(t, ['--header-timeout', '1']);
	const s = net.connect(port, '127.0.0.1');
	s.on('error', () => {});
	let got = '';
	s.on('data', (d) => (got += d.toString('latin1')));
	const closed = new Promise((r) => s.on('close', r));
	await new Promise((r) => s.on('connect', r));
	s.write('GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n');
	const timer = setInterval(() => s.writable && s.write('X-Slow: 1\r\n'), 200);
	await Promise.race([closed, sleep(6000)]);
	clearInterval(timer);
	s.destroy();
	assert.equal(statusOf(got), 408, got.slice(0, 80));
	assert.match(errorOf(got).message, /header-timeout/);
});

test('a client that half-closes after its request gets the whole reply', async (t) => {
	const { port } = await server(t);
	// rawExchange ends its side (shutdown(SHUT_WR)) once the request is written
	let r = await rawExchange(port, httpRequest('POST', '/v1/completions', { prompt: 'Once upon', max_tokens: 8 }), { timeoutMs: 10000 });
	assert.ok(!r.timedOut);
	assert.match(r.text, /HTTP\/1\.1 200 OK/);
	assert.equal(JSON.parse(bodyOf(r.text.slice(r.text.lastIndexOf('HTTP/1.1 200')))).usage.completion_tokens, 8);
	r = await rawExchange(port, httpRequest('POST', '/v1/completions', { prompt: 'Once upon', max_tokens: 8, stream: true }), { timeoutMs: 10000 });
	assert.equal(statusOf(r.text), 200);
	assert.match(r.text, /data: \[DONE\]/);
});

test('an upload in flight at SIGTERM gets the 503 with Retry-After, then the server exits', async (t) => {
	const srv = await server(t);
	const body = JSON.stringify({ prompt: 'Once upon', max_tokens: 4 });
	const head =
		`POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer ${KEY}\r\n` +
		`Content-Type: application/json\r\nContent-Length: ${body.length}\r\nConnection: close\r\n\r\n`;
	const s = net.connect(srv.port, '127.0.0.1');
	s.on('error', () => {});
	let got = '';
	s.on('data', (d) => (got += d.toString('latin1')));
	const closed = new Promise((r) => s.on('close', r));
	await new Promise((r) => s.on('connect', r));
	s.write(head + body.slice(0, 5));
	await sleep(200);
	srv.proc.kill('SIGTERM');
	// the rest of the body once the drain has begun, however long the signal takes to land
	for (let i = 0; i < 3000 && (await getJSON(`${srv.url}/health`)).status !== 503; i++) await sleep(10);
	s.write(body.slice(5));
	await Promise.race([closed, sleep(5000)]);
	s.destroy();
	assert.equal(statusOf(got), 503, got.slice(0, 80));
	assert.ok(Number(/retry-after: (\d+)/i.exec(got)?.[1]) >= 1);
	assert.match(errorOf(got).message, /draining/);
	const { code } = await srv.exited;
	assert.equal(code, 0);
});

// ---- request heads libmicrohttpd would answer itself (HTML, a status line twice) or wait on ----

// Every status line in a raw reply: a reply must have exactly one.
const statusLines = (raw) => raw.match(/HTTP\/1\.[01] \d{3}/g) || [];

// The error of a raw reply, checked to be the one reply, JSON, and in the API's shape.
function jsonError(raw, shape = 'openai') {
	assert.equal(statusLines(raw).length, 1, `one status line: ${JSON.stringify(raw.slice(0, 300))}`);
	assert.match(raw, /\r\ncontent-type: application\/json\r\n/i, raw.slice(0, 200));
	const b = JSON.parse(bodyOf(raw));
	if (shape === 'anthropic') {
		assert.equal(b.type, 'error');
		assert.equal(typeof b.error.message, 'string');
		return b.error;
	}
	if (shape === 'ollama') {
		assert.deepEqual(Object.keys(b), ['error']);
		return { message: b.error };
	}
	assert.equal(typeof b.error.message, 'string');
	assert.equal(b.error.type, 'invalid_request_error');
	return b.error;
}

const get = (path, extra = '', version = 'HTTP/1.1') => `GET ${path} ${version}\r\nHost: 127.0.0.1\r\n${extra}Connection: close\r\n\r\n`;
const post = (path, extra, body = '{}') =>
	`POST ${path} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer ${KEY}\r\nContent-Type: application/json\r\n${extra}Connection: close\r\n\r\n${body}`;

test('binary junk with no line end gets a 400 at once, not a 408 at the deadline', async (t) => {
	const { port } = await server(t);
	// a TLS hello sent to the plain port, with no CR or LF in it
	const junk = Buffer.from([0x16, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00, 0x01, 0xfc, 0x03, 0x03, 0x0a]);
	const r = await rawExchange(port, junk.subarray(0, 11), { keepOpen: true, timeoutMs: 3000 });
	assert.equal(statusOf(r.text), 400, JSON.stringify(r.text.slice(0, 120)));
	assert.match(jsonError(r.text).message, /malformed request line \(byte 0x16 at offset 0\)/);
	// a method that is not a token, with a line end still to come
	const r2 = await rawExchange(port, 'GE(T /health', { keepOpen: true, timeoutMs: 3000 });
	assert.equal(statusOf(r2.text), 400);
	assert.match(jsonError(r2.text).message, /malformed request line/);
});

test('an invalid Content-Length gets one JSON reply in the API shape, its status line once', async (t) => {
	const { port } = await server(t);
	const once = { keepOpen: true, timeoutMs: 3000 };
	for (const v of ['abc', '-1', '1e3', '0x10', '+5', '12 ', '']) {
		const r = await rawExchange(port, post('/v1/completions', `Content-Length: ${v}\r\n`), once);
		assert.equal(statusOf(r.text), 400, `Content-Length '${v}': ${JSON.stringify(r.text.slice(0, 120))}`);
		assert.match(jsonError(r.text).message, /Content-Length/);
	}
	let r = await rawExchange(port, post('/v1/messages', 'Content-Length: -1\r\n'), once);
	assert.equal(statusOf(r.text), 400);
	assert.match(jsonError(r.text, 'anthropic').message, /Content-Length '-1'/);
	// past 2^64: libmicrohttpd's own 413 before
	r = await rawExchange(port, post('/v1/completions', 'Content-Length: 99999999999999999999999\r\n'), once);
	assert.equal(statusOf(r.text), 413);
	assert.equal(jsonError(r.text).code, 'request_too_large');
	// a sound one still works
	const body = JSON.stringify({ prompt: 'Once', max_tokens: 2 });
	r = await rawExchange(port, post('/v1/completions', ` Content-Length:  ${body.length}\r\n`.trimStart(), body), once);
	assert.equal(statusOf(r.text), 200);
});

test("libmicrohttpd's own protocol errors are JSON in the API's shape: 400, 414, 431, 505", async (t) => {
	const { port } = await server(t);
	const once = { keepOpen: true, timeoutMs: 3000 };
	const many = (n, f) => Array.from({ length: n }, (_, i) => f(i)).join('');
	const cases = [
		[get(`/v1/models/${'a'.repeat(9000)}`), 414, 'openai', /longer than 8192/],
		[get(`/v1/messages/${'a'.repeat(9000)}`), 414, 'anthropic', /longer than 8192/],
		[get('/health', `X-Big: ${'b'.repeat(20000)}\r\n`), 431, 'openai', /larger than 16384/],
		[get('/api/tags', many(101, (i) => `X-H${i}: v\r\n`)), 431, 'ollama', /header lines/],
		[get(`/health?${'a&'.repeat(300)}`), 431, 'openai', /query arguments/],
		[get('/health', `Cookie: ${'c=1; '.repeat(300)}\r\n`), 431, 'openai', /cookies/],
		[get('/health', '', 'HTTP/2.0'), 505, 'openai', /HTTP\/2\.0 is not supported/],
		[get('/api/tags', '', 'HTTP/0.9'), 505, 'ollama', /HTTP\/0\.9 is not supported/],
		[get('/health', '', 'HTTP/1.x'), 400, 'openai', /version/],
		[get('/health', 'NoColonHere\r\n'), 400, 'openai', /Name: value/],
		[get('/health', 'X-Sp : v\r\n'), 400, 'openai', /no space before the colon/],
		[get('/health', 'X-Fold: a\r\n  folded\r\n'), 400, 'openai', /folded/],
		[get('/health', 'X-Nul: a\x00b\r\n'), 400, 'openai', /control byte 0x00/],
		[get('/health', 'X-Cr: a\rb\r\n'), 400, 'openai', /control byte 0x0d|CR not followed/],
		['GET /health\r\n\r\n', 400, 'openai', /malformed request line/],
		['GET /a b HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n', 400, 'openai', /%20/],
	];
	for (const [bytes, status, shape, msg] of cases) {
		const r = await rawExchange(port, bytes, once);
		const what = JSON.stringify(bytes.slice(0, 60));
		assert.equal(statusOf(r.text), status, `${what}: ${JSON.stringify(r.text.slice(0, 160))}`);
		assert.match(jsonError(r.text, shape).message, msg, what);
	}
	// HEAD gets the status and headers alone
	const r = await rawExchange(port, 'HEAD /health HTTP/3.0\r\nHost: 127.0.0.1\r\n\r\n', once);
	assert.equal(statusOf(r.text), 505);
	assert.equal(bodyOf(r.text), '');
});

test('the largest head the gate lets through reaches its route; one byte more is a 431', async (t) => {
	const { port } = await server(t);
	// 99 header lines, a cookie of 100 pairs and 50 query arguments (255 records), padded to the limit
	const head = (pad) => {
		let s = `GET /v1/models?${Array.from({ length: 49 }, (_, i) => `q${i}=1`).join('&')}&q=1 HTTP/1.1\r\nHost: 127.0.0.1\r\n`;
		s += `Cookie: ${Array.from({ length: 100 }, (_, i) => `c${i}=v`).join('; ')}\r\n`;
		for (let i = 0; i < 96; i++) s += `X-H${i}: v\r\n`;
		s += 'Connection: close\r\nX-Pad: ';
		return s + 'p'.repeat(pad - s.length - 4) + '\r\n\r\n';
	};
	let r = await rawExchange(port, head(16384), { keepOpen: true, timeoutMs: 3000 });
	assert.equal(statusOf(r.text), 200, JSON.stringify(r.text.slice(0, 200)));
	assert.equal(JSON.parse(bodyOf(r.text)).object, 'list');
	r = await rawExchange(port, head(16385), { keepOpen: true, timeoutMs: 3000 });
	assert.equal(statusOf(r.text), 431);
	jsonError(r.text);
});

// A socket whose replies are read one at a time.
async function session(port) {
	const s = net.connect(port, '127.0.0.1');
	s.on('error', () => {});
	let buf = '';
	let closed = false;
	const waiters = [];
	const poke = () => waiters.splice(0).forEach((w) => w());
	s.on('data', (d) => ((buf += d.toString('latin1')), poke()));
	s.on('close', () => ((closed = true), poke()));
	await new Promise((r) => s.on('connect', r));
	// the next whole reply (by Content-Length), or what came before the close or the time limit
	const reply = async (ms = 3000) => {
		const end = Date.now() + ms;
		for (;;) {
			const he = buf.indexOf('\r\n\r\n');
			const len = he < 0 ? -1 : Number(/content-length: (\d+)/i.exec(buf.slice(0, he))?.[1] ?? -1);
			if (he >= 0 && len >= 0 && buf.length >= he + 4 + len) {
				const r = buf.slice(0, he + 4 + len);
				buf = buf.slice(he + 4 + len);
				return r;
			}
			if (closed || Date.now() >= end) {
				const r = buf;
				buf = '';
				return r;
			}
			await Promise.race([new Promise((r) => waiters.push(r)), sleep(Math.max(1, end - Date.now()))]);
		}
	};
	return { s, reply, write: (b) => s.write(b), closed: () => closed, rest: () => buf };
}

const keep = (path) => `GET ${path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n`;
const keep10 = (path) => `GET ${path} HTTP/1.0\r\nConnection: keep-alive\r\n\r\n`;

test('the next request on a kept-alive connection is judged the same way', async (t) => {
	const { port } = await server(t);
	const bad = [
		[Buffer.from([0x16, 0x03, 0x01, 0x02, 0x00]), 400, 'openai', /malformed request line/],
		[post('/v1/completions', 'Content-Length: abc\r\n'), 400, 'openai', /Content-Length 'abc'/],
		[post('/v1/messages', 'Content-Length: 1x\r\n'), 400, 'anthropic', /Content-Length '1x'/],
		[get('/health', '', 'HTTP/2.0'), 505, 'openai', /HTTP\/2\.0/],
		[get(`/${'a'.repeat(9000)}`), 414, 'openai', /longer than 8192/],
	];
	const tokenize = (framing) => {
		const b = JSON.stringify({ content: 'Once upon a time' });
		const h = `POST /tokenize HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer ${KEY}\r\nContent-Type: application/json\r\n`;
		return framing === 'chunked' ? `${h}Transfer-Encoding: chunked\r\n\r\n${b.length.toString(16)}\r\n${b}\r\n0\r\n\r\n` : `${h}Content-Length: ${b.length}\r\n\r\n${b}`;
	};
	for (const [bytes, status, shape, msg] of bad) {
		const c = await session(port);
		// requests with and without bodies before it, a chunked one and HTTP/1.0 keep-alive too;
		// each reply read before the next is sent
		for (const req of [keep('/health'), tokenize('length'), tokenize('chunked'), keep10('/v1/models')]) {
			c.write(req);
			assert.equal(statusOf(await c.reply()), 200);
		}
		c.write(bytes);
		const r = await c.reply();
		assert.equal(statusOf(r), status, `${JSON.stringify(String(bytes).slice(0, 40))}: ${JSON.stringify(r.slice(0, 200))}`);
		assert.match(jsonError(r, shape).message, msg);
		for (let i = 0; i < 100 && !c.closed(); i++) await sleep(20);
		assert.ok(c.closed(), 'the connection closes after the error');
		assert.equal(c.rest(), '', 'nothing after the one reply');
		c.s.destroy();
	}
	// requests written together (pipelined) are all answered, in order
	const c = await session(port);
	c.write(keep('/health') + keep('/v1/models') + keep('/health'));
	assert.equal(statusOf(await c.reply()), 200);
	assert.equal(JSON.parse(bodyOf(await c.reply())).object, 'list');
	assert.equal(statusOf(await c.reply()), 200);
	// and the connection still judges the next one
	c.write(get('/health', '', 'HTTP/2.0'));
	assert.equal(statusOf(await c.reply()), 505);
	c.s.destroy();
	// an HTTP/1.0 keep-alive stream has no length: it ends by closing, at once
	const e = await session(port);
	const sb = JSON.stringify({ prompt: 'Once', max_tokens: 3, stream: true });
	e.write(`POST /v1/completions HTTP/1.0\r\nConnection: keep-alive\r\nAuthorization: Bearer ${KEY}\r\n` +
		`Content-Type: application/json\r\nContent-Length: ${sb.length}\r\n\r\n${sb}`);
	const streamed = await e.reply(2000);
	assert.ok(e.closed(), `closed after the stream: ${JSON.stringify(streamed.slice(-60))}`);
	assert.match(streamed, /data: \[DONE\]\n\n$/);
	e.s.destroy();
});

test('a kept-alive connection: idle past --idle-timeout it closes with nothing sent; a head begun then stalled gets the 408', async (t) => {
	const { port } = await server(t, ['--idle-timeout', '1', '--header-timeout', '1']);
	let c = await session(port);
	c.write(keep('/health'));
	assert.equal(statusOf(await c.reply()), 200);
	const t0 = Date.now();
	for (let i = 0; i < 300 && !c.closed(); i++) await sleep(20);
	assert.ok(c.closed(), 'an idle kept-alive connection closes');
	assert.ok(Date.now() - t0 >= 900, 'not before --idle-timeout');
	assert.equal(c.rest(), '');
	c = await session(port);
	c.write(keep('/health'));
	assert.equal(statusOf(await c.reply()), 200);
	c.write('GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n');
	const r = await c.reply(4000);
	assert.equal(statusOf(r), 408, JSON.stringify(r.slice(0, 120)));
	assert.match(jsonError(r).message, /header-timeout/);
	c.s.destroy();
});

test('a long tokenize runs off the connection threads: /health on the same thread answers meanwhile', async (t) => {
	const big = 8 << 20;
	const srv = await server(t, ['--http-threads', '1', '--max-body', String(big), '--max-tokenize-bytes', String(big)]);
	const body = JSON.stringify({ content: 'Once upon a time there was a little girl. '.repeat(150000) });
	const s = net.connect(srv.port, '127.0.0.1');
	s.on('error', () => {});
	let head = '';
	let answered = false;
	s.on('data', (d) => {
		head += d.toString('latin1', 0, 64);
		answered = true;
	});
	await new Promise((r) => s.on('connect', r));
	// the whole body handed to the kernel, then a moment for the server to read it and begin
	await new Promise((r) => s.write(httpRequest('POST', '/tokenize', body), r));
	await sleep(300);
	assert.ok(!answered, 'the tokenize is still running');
	const h = await fetch(`${srv.url}/health`);
	assert.equal(h.status, 200);
	assert.ok(!answered, '/health answered while the tokenize was still running');
	for (let i = 0; i < 1000 && !answered; i++) await sleep(20);
	s.destroy();
	assert.equal(statusOf(head), 200);
});
