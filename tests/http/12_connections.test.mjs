// Connections against hostile and odd clients, on raw sockets: hundreds of slow sockets
// (from one address and from several) leave /health and completions answering; requests
// libmicrohttpd would accept and then wait on, or close without a word, get a 400 or 408
// at once; a half-closed client gets its whole reply; an upload cut by SIGTERM gets a 503.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import net from 'node:net';
import { startServer, STORIES, KEY, rawExchange, httpRequest, statusOf, bodyOf, sleep } from './lib.mjs';

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
	await sleep(500);
	s.write(body.slice(5));
	await Promise.race([closed, sleep(5000)]);
	s.destroy();
	assert.equal(statusOf(got), 503, got.slice(0, 80));
	assert.ok(Number(/retry-after: (\d+)/i.exec(got)?.[1]) >= 1);
	assert.match(errorOf(got).message, /draining/);
	const { code } = await srv.exited;
	assert.equal(code, 0);
});
