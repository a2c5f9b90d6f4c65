// Lying grid peers: a fake lanes peer (a node server) whose beacon always claims free lanes,
// and which then refuses or garbles leases, drops, stalls, truncates or floods forwarded
// requests. A (one lane, no queue, its lane held by a lease of our own so that every request
// overflows) must give each client exactly one terminal outcome in its API's shape, in bounded
// time, and stay healthy: /health ok, every lane free and nothing left waiting afterwards.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import http from 'node:http';
import { startServer, STORIES, KEY, getJSON, readSSE, readNDJSON, sleep, waitIdle, metric } from './lib.mjs';

const MODEL = 'stories260K';
const TIMEOUT_MS = 1000; // A's --peer-timeout-ms
const KEEPALIVE_MS = 15000; // a lanes stream with nothing to say sends a comment this often (gen/gen.c)
const MAX_OUTPUT = 65536; // A's --max-output-bytes
const SANITIZER = /ERROR: (AddressSanitizer|LeakSanitizer)|runtime error:|SUMMARY: (Address|Undefined|Leak)/;
const LEASE_ID = 'lease-00000000000000aa';

// ---- the fake peer -----------------------------------------------------------------------------

function beacon(models = [{ id: MODEL, adapters: [], window: 512, lanes_total: 4, lanes_free: 4, kv_free_bytes: 1 << 30, queue_depth: 0 }]) {
	return JSON.stringify({ node: 'fake:1', sequence: 1, clock_us: 1, models, draining: false });
}

const grant = (req, res) => {
	res.writeHead(201, { 'content-type': 'application/json' });
	res.end(JSON.stringify({ id: LEASE_ID, granted: 1, expires_at: Date.now() + 10000, ttl_ms: 10000, kv_bytes: 0 }));
};

// A peer whose beacon says what `beacon` returns, whose leases `lease` answers and whose
// forwarded requests `forward` answers; it records both.
async function fakePeer() {
	const f = { leases: 0, forwards: [], sockets: new Set(), beacon: () => beacon(), lease: grant, forward: null };
	f.server = http.createServer((req, res) => {
		f.sockets.add(req.socket);
		req.socket.on('close', () => f.sockets.delete(req.socket));
		const chunks = [];
		req.on('data', (d) => chunks.push(d));
		req.on('end', () => {
			const body = Buffer.concat(chunks).toString();
			if (req.method === 'GET' && req.url === '/v1/residency') {
				res.writeHead(200, { 'content-type': 'application/json' });
				return res.end(f.beacon());
			}
			if (req.url === '/v1/leases') {
				f.leases++;
				return f.lease(req, res);
			}
			const fw = { path: req.url, headers: req.headers, body, closedAt: 0 };
			res.on('close', () => (fw.closedAt = Date.now()));
			f.forwards.push(fw);
			return f.forward(req, res, fw);
		});
	});
	await new Promise((r) => f.server.listen(0, '127.0.0.1', r));
	f.url = `http://127.0.0.1:${f.server.address().port}`;
	f.reset = () => {
		f.leases = 0;
		f.forwards = [];
		f.beacon = () => beacon();
		f.lease = grant;
		f.forward = null;
	};
	f.close = () => {
		for (const s of f.sockets) s.destroy();
		f.server.close();
	};
	return f;
}

// ---- the APIs: a request, the peer's stream events, and how a client sees the end -------------

const sse = (event, data) => `${event ? `event: ${event}\n` : ''}data: ${typeof data === 'string' ? data : JSON.stringify(data)}\n\n`;
const APIS = {
	openai: {
		path: '/v1/chat/completions',
		body: (stream) => ({ model: MODEL, messages: [{ role: 'user', content: 'Once' }], max_tokens: 8, stream }),
		chunk: (t) => sse(null, { id: 'c', object: 'chat.completion.chunk', created: 1, model: MODEL, choices: [{ index: 0, delta: { content: t }, finish_reason: null }] }),
		end: () => sse(null, '[DONE]'),
		terminal: (e) => e.data === '[DONE]' || !!e.data?.error,
		error: (e) => e.data?.error?.message,
		whole: (b) => b.error?.message,
		// a text that holds the terminal event's own bytes
		quoting: 'data: [DONE]',
	},
	anthropic: {
		path: '/v1/messages',
		body: (stream) => ({ model: MODEL, messages: [{ role: 'user', content: 'Once' }], max_tokens: 8, stream }),
		chunk: (t) => sse('content_block_delta', { type: 'content_block_delta', index: 0, delta: { type: 'text_delta', text: t } }),
		end: () => sse('message_stop', { type: 'message_stop' }),
		terminal: (e) => e.event === 'message_stop' || e.event === 'error',
		error: (e) => (e.event === 'error' ? e.data?.error?.message : undefined),
		whole: (b) => (b.type === 'error' ? b.error?.message : undefined),
		quoting: 'event: message_stop',
	},
	responses: {
		path: '/v1/responses',
		body: (stream) => ({ model: MODEL, input: 'Once', max_output_tokens: 16, stream }),
		// a sequence number at the top of its range: the error event after it must still be one
		chunk: (t) => sse('response.output_text.delta', { type: 'response.output_text.delta', sequence_number: 1, delta: t })
			.replace('"sequence_number":1', '"sequence_number":9223372036854775807'),
		end: () => sse('response.completed', { type: 'response.completed', sequence_number: 99, response: { status: 'completed' } }),
		terminal: (e) => ['response.completed', 'response.failed', 'response.incomplete', 'error'].includes(e.event),
		// the response as created, failed: the same end a failure here gives
		error: (e) => (e.event === 'response.failed' && e.data?.response?.status === 'failed' ? e.data.response.error?.message : undefined),
		whole: (b) => b.error?.message,
		quoting: 'event: response.completed',
	},
	ollama: {
		path: '/api/chat',
		ndjson: true,
		body: (stream) => ({ model: MODEL, messages: [{ role: 'user', content: 'Once' }], stream, options: { num_predict: 8 } }),
		chunk: (t) => JSON.stringify({ model: MODEL, message: { role: 'assistant', content: t }, done: false }) + '\n',
		end: () => JSON.stringify({ model: MODEL, message: { role: 'assistant', content: '' }, done: true, done_reason: 'stop' }) + '\n',
		terminal: (e) => e.data?.done === true || !!e.data?.error,
		error: (e) => e.data?.error,
		whole: (b) => b.error,
		quoting: '"done":true',
	},
};

// Sends api's request to url; resolves with the status, the peer that answered, the body (not
// streamed) or the events, and how long it took. Never waits past limitMs.
async function call(server, api, stream, { limitMs = 60000, signal } = {}) {
	const t0 = Date.now();
	const res = await fetch(server.url + api.path, {
		method: 'POST',
		headers: { 'Content-Type': 'application/json', Authorization: `Bearer ${KEY}` },
		body: JSON.stringify(api.body(stream)),
		signal: signal ?? AbortSignal.timeout(limitMs),
	});
	const out = { status: res.status, peer: res.headers.get('x-lanes-peer'), type: res.headers.get('content-type') };
	if (!/event-stream|ndjson/.test(out.type || '')) out.body = await res.json();
	else out.events = api.ndjson ? (await readNDJSON(res)).map((data) => ({ event: null, data })) : await readSSE(res);
	out.ms = Date.now() - t0;
	return out;
}

// One terminal outcome: a stream's last event is its only terminal one, and it is the error
// naming the peer; or a non-streamed error in the API's shape with that status, naming it.
function failedNaming(r, api, peer, { status = 500 } = {}) {
	if (r.events) {
		assert.equal(r.status, 200);
		const ends = r.events.filter(api.terminal);
		assert.equal(ends.length, 1, `exactly one terminal event: ${JSON.stringify(r.events.slice(-3))}`);
		assert.equal(ends[0], r.events.at(-1), 'the terminal event is the last');
		const msg = api.error(ends[0]);
		assert.ok(typeof msg === 'string' && msg.includes(peer.url), `an error event naming the peer: ${JSON.stringify(ends[0])}`);
		return msg;
	}
	assert.equal(r.status, status, JSON.stringify(r.body));
	assert.match(r.type, /^application\/json/);
	const msg = api.whole(r.body);
	assert.ok(typeof msg === 'string' && msg.includes(peer.url), `an error in the API's shape naming the peer: ${JSON.stringify(r.body)}`);
	return msg;
}

// ---- A -------------------------------------------------------------------------------------------

let A, P;
before(async () => {
	P = await fakePeer();
	A = await startServer(['-m', STORIES, '--api-key', KEY, '--lanes', '1', '--peer', P.url, '--peer-poll-ms', '100',
		'--peer-timeout-ms', String(TIMEOUT_MS), '--max-output-bytes', String(MAX_OUTPUT)]);
	await peerUp(A, P);
});
after(() => {
	if (A?.proc.exitCode === null) A.proc.kill('SIGKILL');
	P?.close();
});

async function peerUp(a, p) {
	for (let i = 0; i < 400; i++) {
		const t = await (await fetch(`${a.url}/metrics`)).text();
		if (t.includes(`lanes_peer_up{peer="${p.url}"} 1`)) return;
		await sleep(25);
	}
	assert.fail(`${p.url} never came up on ${a.url}`);
}

const leaseA = async (a) => {
	const r = await getJSON(`${a.url}/v1/leases`, {
		method: 'POST', headers: { 'Content-Type': 'application/json', Authorization: `Bearer ${KEY}` },
		body: JSON.stringify({ model: MODEL, ttl_ms: 120000 }),
	});
	assert.equal(r.status, 201, JSON.stringify(r.body));
	return r.body.id;
};
const releaseA = (a, id) => fetch(`${a.url}/v1/leases/${id}`, { method: 'DELETE', headers: { Authorization: `Bearer ${KEY}` } });

// Runs fn with A's one lane held by a lease and a request waiting behind it, so that each
// request overflows to the peer; then A must be healthy: alive, /health ok, every lane free,
// nothing waiting, no lease open. fn may release the lane itself (release()).
async function overflowing(fn, a = A) {
	const id = await leaseA(a);
	const blocker = call(a, APIS.openai, false);
	assert.ok(await untilAsync(async () => (await getJSON(`${a.url}/slots`)).body.queue_depth === 1), 'a request waits on A');
	let released = false;
	const release = async () => {
		if (!released) await releaseA(a, id);
		released = true;
	};
	try {
		return await fn(release);
	} finally {
		await release();
		const b = await blocker;
		assert.equal(b.status, 200, `the request that waited on A: ${JSON.stringify(b.body)}`);
		assert.equal(b.peer, null);
		await healthy(a);
	}
}

// SIGTERM: it exits 0, and no sanitizer (leaks included) said anything.
async function stops(a) {
	a.proc.kill('SIGTERM');
	const { code } = await a.exited;
	assert.equal(code, 0, a.log().slice(-3000));
	assert.doesNotMatch(a.log(), SANITIZER);
}

async function healthy(a) {
	assert.equal(a.proc.exitCode, null, `A is alive:\n${a.log().slice(-2000)}`);
	assert.doesNotMatch(a.log(), SANITIZER);
	assert.equal((await fetch(`${a.url}/health`)).status, 200);
	assert.ok((await waitIdle(a.url, 10000)) >= 0, 'every lane of A is free');
	for (let i = 0; i < 200 && (await metric(a.url, 'lanes_overflow_waiting')) !== 0; i++) await sleep(25);
	assert.equal(await metric(a.url, 'lanes_overflow_waiting'), 0, 'nothing waits for a peer');
	assert.equal(await metric(a.url, 'lanes_leases_open'), 0);
}

const untilAsync = async (cond, ms = 10000) => {
	const t0 = Date.now();
	while (!(await cond()) && Date.now() - t0 < ms) await sleep(10);
	return cond();
};
const until = async (cond, ms = 10000) => {
	const t0 = Date.now();
	while (!cond() && Date.now() - t0 < ms) await sleep(10);
	return cond();
};

// ---- the cases -----------------------------------------------------------------------------------

test('the harness: a peer that behaves takes the overflow, and its reply is relayed', async () => {
	P.reset();
	P.forward = (req, res) => {
		res.writeHead(200, { 'content-type': 'application/json' });
		res.end(JSON.stringify({ id: 'x', object: 'chat.completion', choices: [{ index: 0, message: { role: 'assistant', content: 'from the peer' }, finish_reason: 'stop' }] }));
	};
	await overflowing(async () => {
		const r = await call(A, APIS.openai, false);
		assert.equal(r.status, 200, JSON.stringify(r.body));
		assert.equal(r.peer, P.url);
		assert.equal(r.body.choices[0].message.content, 'from the peer');
		assert.equal(P.forwards[0].headers['x-lanes-lease'], LEASE_ID);
		assert.equal(P.forwards[0].headers['x-lanes-hop'], '1');
	});
});

test('leases refused, garbled or never answered while the beacon claims lanes: the request waits and runs here once a lane frees', async () => {
	const refusals = {
		'409': (req, res) => {
			res.writeHead(409, { 'content-type': 'application/json' });
			res.end('{"error":{"message":"no","type":"conflict_error","code":"no_capacity"}}');
		},
		garbage: (req, res) => {
			res.writeHead(201, { 'content-type': 'application/json' });
			res.end('{"id": lease-');
		},
		'an id that breaks headers': (req, res) => {
			res.writeHead(201, { 'content-type': 'application/json' });
			res.end(JSON.stringify({ id: 'lease-1\r\nx-evil: 1', granted: 1 }));
		},
		'a huge id': (req, res) => {
			res.writeHead(201, { 'content-type': 'application/json' });
			res.end(JSON.stringify({ id: 'l'.repeat(100000), granted: 1 }));
		},
		silence: () => {},
	};
	for (const [what, lease] of Object.entries(refusals)) {
		P.reset();
		P.lease = lease;
		P.forward = (req, res) => {
			res.writeHead(500, { 'content-type': 'application/json' });
			res.end('{"error":{"message":"forwarded after all","type":"server_error"}}');
		};
		await overflowing(async (release) => {
			const got = call(A, APIS.openai, false);
			assert.ok(await until(() => P.leases >= 1), `${what}: A asked for a lease`);
			await sleep(3 * TIMEOUT_MS); // A keeps waiting, asking again as the beacon claims lanes
			const t0 = Date.now();
			await release();
			const r = await got;
			assert.equal(r.status, 200, `${what}: ${JSON.stringify(r.body)}`);
			assert.equal(r.peer, null, `${what}: it ran here`);
			assert.ok(Date.now() - t0 < 10000, `${what}: it ran within 10 s of the lane freeing`);
			assert.equal(P.forwards.length, 0, `${what}: nothing was forwarded without a lease`);
		});
	}
});

test('a peer that granted a lease and then refuses the connection: the request runs here', async () => {
	const Q = await fakePeer();
	const A2 = await startServer(['-m', STORIES, '--api-key', KEY, '--lanes', '1', '--peer', Q.url, '--peer-poll-ms', '100',
		'--peer-timeout-ms', String(TIMEOUT_MS)]);
	try {
		await peerUp(A2, Q);
		const port = Q.server.address().port;
		// it stops listening, then grants: the forward that follows finds nobody there
		Q.lease = (req, res) => {
			Q.server.close();
			setTimeout(() => {
				res.writeHead(201, { 'content-type': 'application/json', connection: 'close' });
				res.end(JSON.stringify({ id: LEASE_ID, granted: 1 }));
			}, 200);
		};
		await overflowing(async (release) => {
			const got = call(A2, APIS.openai, false);
			assert.ok(await until(() => Q.leases >= 1));
			await sleep(500);
			await release();
			const r = await got;
			assert.equal(r.status, 200, JSON.stringify(r.body));
			assert.equal(r.peer, null, 'it ran here');
		}, A2);
		const m = await (await fetch(`${A2.url}/metrics`)).text();
		assert.ok(m.includes(`lanes_overflow_requests_total{peer="${Q.url}",outcome="forwarded"} 0`), 'not counted as forwarded');
		await new Promise((r) => Q.server.listen(port, '127.0.0.1', r));
		await stops(A2);
	} finally {
		A2.proc.kill('SIGKILL');
		Q.close();
	}
});

test('a peer that drops the forwarded request before answering: one 500 naming the peer', async () => {
	for (const [name, api] of Object.entries(APIS)) {
		for (const stream of [false, true]) {
			P.reset();
			P.forward = (req) => req.socket.destroy();
			await overflowing(async () => {
				const r = await call(A, api, stream);
				failedNaming(r, api, P);
				assert.ok(r.ms < 10000, `${name}: answered in ${r.ms} ms`);
			});
		}
	}
});

test('a peer that accepts a streamed request and never sends its head: the API\'s error within --peer-timeout-ms', async () => {
	for (const [name, api] of Object.entries(APIS)) {
		P.reset();
		P.forward = () => {};
		await overflowing(async () => {
			const r = await call(A, api, true);
			const msg = failedNaming(r, api, P);
			assert.match(msg, /no reply/);
			assert.ok(r.ms < TIMEOUT_MS + 5000, `${name}: answered in ${r.ms} ms`);
			assert.ok(await until(() => P.forwards[0].closedAt > 0, 5000), `${name}: the transfer to the peer was closed`);
		});
	}
});

test('a peer silent past its keep-alives in the middle of a stream: the API\'s error event', { timeout: 120000 }, async () => {
	const runs = [];
	P.reset();
	P.forward = (req, res, fw) => {
		const api = Object.values(APIS).find((a) => a.path === fw.path);
		res.writeHead(200, { 'content-type': api.ndjson ? 'application/x-ndjson' : 'text/event-stream' });
		res.write(api.chunk('Once'));
	};
	await overflowing(async () => {
		for (const api of Object.values(APIS)) runs.push(call(A, api, true, { limitMs: 60000 }));
		for (const [k, r] of (await Promise.all(runs)).entries()) {
			const api = Object.values(APIS)[k];
			const msg = failedNaming(r, api, P);
			assert.match(msg, /sent nothing for/);
			assert.ok(r.ms < KEEPALIVE_MS + TIMEOUT_MS + 10000, `answered in ${r.ms} ms`);
		}
	});
});

test('streams that break off without their terminal event, or quote it in their text: one error event naming the peer', async () => {
	for (const [name, api] of Object.entries(APIS)) {
		for (const quote of [false, true]) {
			P.reset();
			P.forward = (req, res) => {
				res.writeHead(200, { 'content-type': api.ndjson ? 'application/x-ndjson' : 'text/event-stream' });
				res.write(api.chunk('Once upon'));
				if (quote) res.write(api.chunk(api.quoting));
				// half an event, then the end
				res.write(api.chunk(' a time').slice(0, 20), () => res.destroy());
			};
			await overflowing(async () => {
				const r = await call(A, api, true);
				failedNaming(r, api, P);
				assert.ok(r.events.length >= 2, `${name}: the whole events came first`);
				assert.ok(r.ms < 10000, `${name}: answered in ${r.ms} ms`);
			});
		}
	}
});

// A failure here ends each API's stream with these (09_halt pins them); a relayed break-off the same
const LOCAL_END = {
	openai: (m) => ({ event: null, data: { error: { message: m, type: 'server_error' } } }),
	anthropic: (m) => ({ event: 'error', data: { type: 'error', error: { type: 'api_error', message: m } } }),
	responses: (m, created) => ({
		event: 'response.failed',
		data: { response: { ...created, status: 'failed', error: { code: 'server_error', message: m } }, type: 'response.failed', sequence_number: 2 },
	}),
	ollama: (m) => ({ event: null, data: { error: m } }),
};

test('a stream that breaks off: its last event is the one a failure here gives, the response as created included', async () => {
	const created = { id: 'resp_7', object: 'response', created_at: 1, status: 'in_progress', model: MODEL, output: [], usage: null };
	for (const [name, api] of Object.entries(APIS)) {
		P.reset();
		P.forward = (req, res) => {
			res.writeHead(200, { 'content-type': api.ndjson ? 'application/x-ndjson' : 'text/event-stream' });
			if (name === 'responses') {
				res.write(sse('response.created', { type: 'response.created', sequence_number: 0, response: created }));
				res.write(sse('response.output_text.delta', { type: 'response.output_text.delta', sequence_number: 1, delta: 'Once' }));
			} else res.write(api.chunk('Once'));
			res.write('', () => res.destroy());
		};
		await overflowing(async () => {
			const r = await call(A, api, true);
			const msg = failedNaming(r, api, P);
			assert.deepEqual(r.events.at(-1), LOCAL_END[name](msg, created), name);
		});
	}
});

test('a stream with two terminal events, or events past its end: the client sees one end, last', async () => {
	for (const [name, api] of Object.entries(APIS)) {
		P.reset();
		P.forward = (req, res) => {
			res.writeHead(200, { 'content-type': api.ndjson ? 'application/x-ndjson' : 'text/event-stream' });
			res.end(api.chunk('Once') + api.end() + api.chunk('more') + api.end());
		};
		await overflowing(async () => {
			const r = await call(A, api, true);
			assert.equal(r.status, 200);
			assert.equal(r.peer, P.url);
			const ends = r.events.filter(api.terminal);
			assert.equal(ends.length, 1, `${name}: one terminal event: ${JSON.stringify(r.events)}`);
			assert.equal(ends[0], r.events.at(-1), `${name}: it is the last`);
			assert.equal(api.error(ends[0]), undefined, `${name}: the peer's own end`);
		});
	}
});

test('a stream that never ends: the client leaving ends the transfer to the peer', async () => {
	P.reset();
	P.forward = (req, res) => {
		res.writeHead(200, { 'content-type': 'text/event-stream' });
		const t = setInterval(() => res.write(APIS.openai.chunk('again ')), 5);
		res.on('close', () => clearInterval(t));
	};
	await overflowing(async () => {
		const ac = new AbortController();
		let n = 0;
		const res = await fetch(A.url + APIS.openai.path, {
			method: 'POST', signal: ac.signal,
			headers: { 'Content-Type': 'application/json', Authorization: `Bearer ${KEY}` },
			body: JSON.stringify(APIS.openai.body(true)),
		});
		await readSSE(res, () => ++n > 50 && ac.abort()).catch(() => {});
		const t0 = Date.now();
		assert.ok(await until(() => P.forwards[0].closedAt > 0, 5000), 'A closed its transfer to the peer');
		assert.ok(P.forwards[0].closedAt - t0 < 5000);
	});
});

test('an endless stream to a client that stops reading: A ends the transfer, holding a bounded backlog', async () => {
	P.reset();
	P.forward = (req, res) => {
		res.writeHead(200, { 'content-type': 'text/event-stream' });
		const ev = APIS.openai.chunk('x'.repeat(4000));
		const pump = () => {
			while (!res.destroyed && res.write(ev));
			if (!res.destroyed) res.once('drain', pump);
		};
		pump();
	};
	await overflowing(async () => {
		const ac = new AbortController();
		const res = await fetch(A.url + APIS.openai.path, {
			method: 'POST', signal: ac.signal,
			headers: { 'Content-Type': 'application/json', Authorization: `Bearer ${KEY}` },
			body: JSON.stringify(APIS.openai.body(true)),
		});
		await res.body.getReader().read(); // one piece, then nothing more is read
		try {
			assert.ok(await until(() => P.forwards[0].closedAt > 0, 15000), 'A closed its transfer to the peer');
		} finally {
			ac.abort();
		}
	});
});

test('replies far larger than allowed, whole or as one endless event: the API\'s error naming the peer', async () => {
	for (const [name, api] of Object.entries(APIS)) {
		for (const stream of [false, true]) {
			P.reset();
			P.forward = (req, res) => {
				const type = !stream ? 'application/json' : api.ndjson ? 'application/x-ndjson' : 'text/event-stream';
				res.writeHead(200, { 'content-type': type });
				res.write(stream ? (api.ndjson ? '{"model":"' : 'data: {"x":"') : '{"x":"');
				const chunk = 'x'.repeat(65536);
				const pump = () => {
					while (!res.destroyed && res.write(chunk));
					if (!res.destroyed) res.once('drain', pump);
				};
				pump();
			};
			await overflowing(async () => {
				const r = await call(A, api, stream);
				const msg = failedNaming(r, api, P);
				assert.match(msg, /more than \d+ bytes/, `${name}: ${msg}`);
				assert.ok(r.ms < 10000, `${name}: answered in ${r.ms} ms`);
			});
		}
	}
});

test('malformed replies: broken JSON, HTML, a redirect, JSON to a stream: the API\'s error naming the peer', async () => {
	const replies = [
		[200, 'application/json', '{"id":"x","choices":[{'],
		[200, 'text/html', '<html><body>hello</body></html>'],
		[503, 'text/html', '<html><body>502 Bad Gateway</body></html>'],
		[302, 'text/plain', ''],
		[200, 'application/json', '"just a string"'],
	];
	for (const [name, api] of Object.entries(APIS)) {
		for (const [status, type, body] of replies) {
			for (const stream of [false, true]) {
				P.reset();
				P.forward = (req, res) => {
					res.writeHead(status, { 'content-type': type, ...(status === 302 ? { location: '/elsewhere' } : {}) });
					res.end(body);
				};
				await overflowing(async () => {
					const r = await call(A, api, stream);
					const msg = failedNaming(r, api, P);
					assert.match(msg, new RegExp(`HTTP ${status}`), `${name} ${status} ${type}: ${msg}`);
				});
			}
		}
	}
});

test('beacons that lie in their numbers: A stays sound', async () => {
	const Q = await fakePeer(), R = await fakePeer();
	const lie = () => beacon([{ id: MODEL, adapters: 'none', window: -1, lanes_total: 'MAX', lanes_free: 'MAX', kv_free_bytes: -1, queue_depth: -9e18 }])
		.replaceAll('"MAX"', '9223372036854775807');
	Q.beacon = lie;
	R.beacon = lie;
	Q.lease = R.lease = (req, res) => {
		res.writeHead(409, { 'content-type': 'application/json' });
		res.end('{}');
	};
	const A3 = await startServer(['-m', STORIES, '--api-key', KEY, '--lanes', '1', '--peer', Q.url, '--peer', R.url,
		'--peer-poll-ms', '100', '--peer-timeout-ms', String(TIMEOUT_MS)]);
	try {
		await peerUp(A3, Q);
		await peerUp(A3, R);
		await overflowing(async (release) => {
			const got = Promise.all([0, 1, 2].map(() => call(A3, APIS.openai, false)));
			assert.ok(await until(() => Q.leases + R.leases >= 2));
			await release();
			for (const r of await got) {
				assert.equal(r.status, 200, JSON.stringify(r.body));
				assert.equal(r.peer, null);
			}
		}, A3);
		await stops(A3);
	} finally {
		A3.proc.kill('SIGKILL');
		Q.close();
		R.close();
	}
});

test('A is sound at the end: /health ok, and it stops cleanly with no sanitizer report', async () => {
	await healthy(A);
	await stops(A);
});
