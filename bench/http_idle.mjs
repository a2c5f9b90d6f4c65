// bench/http_idle: the cost of idle connections and of the normal path, for one or more
// builds of lanes serve in turn (the same run, the same machine). For each build: /health
// latency on a new connection per request and on one kept-alive connection, and the time to
// first token of a short streamed completion, with no idle sockets and then with --idle
// sockets open (spread over loopback addresses, under the per-address limit, sending nothing);
// then the server's memory and threads per idle socket, from /proc.
//
//   node bench/http_idle.mjs --bin /tmp/lanes-main,build/lanes [--model ../shared/models/stories260K.gguf]
//        [--idle 1000] [--health 300] [--ttft 20]
import { startServer } from '../tests/http/lib.mjs';
import fs from 'node:fs';
import net from 'node:net';
import path from 'node:path';

const args = Object.fromEntries(
	process.argv.slice(2).reduce((acc, a, i, all) => (a.startsWith('--') ? [...acc, [a.slice(2), all[i + 1] && !all[i + 1].startsWith('--') ? all[i + 1] : '1']] : acc), []),
);
const bins = (args.bin || 'build/lanes').split(',');
const model = args.model || path.resolve(process.env.LANES_SHARED || '../shared', 'models/stories260K.gguf');
const nIdle = Number(args.idle || 1000);
const nHealth = Number(args.health || 300);
const nTtft = Number(args.ttft || 20);
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function start(bin) {
	// idle sockets must outlive the measurement: a long head deadline
	const srv = await startServer(['-m', model, '--header-timeout', '600'], {}, { bin: path.resolve(bin) });
	return { proc: srv.proc, port: srv.port, stop: async () => { srv.proc.kill('SIGKILL'); await srv.exited; } };
}

// Sends bytes on s and resolves with the time until the reply's first bytes matching done.
function exchange(s, bytes, done) {
	return new Promise((resolve) => {
		let got = '';
		const t0 = process.hrtime.bigint();
		const on = (d) => {
			got += d.toString('latin1');
			if (done(got)) {
				s.off('data', on);
				resolve(Number(process.hrtime.bigint() - t0) / 1e6);
			}
		};
		s.on('data', on);
		s.write(bytes);
	});
}

const connect = (port, localAddress) =>
	new Promise((resolve, reject) => {
		const s = net.connect({ port, host: '127.0.0.1', localAddress });
		s.on('connect', () => resolve(s));
		s.on('error', reject);
	});

const whole = (t) => {
	const he = t.indexOf('\r\n\r\n');
	const len = he < 0 ? -1 : Number(/content-length: (\d+)/i.exec(t.slice(0, he))?.[1] ?? -1);
	return he >= 0 && len >= 0 && t.length >= he + 4 + len;
};

const pct = (xs, p) => {
	const s = [...xs].sort((a, b) => a - b);
	return s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))];
};
const fmt = (xs) => `p50 ${pct(xs, 50).toFixed(2)} ms, p99 ${pct(xs, 99).toFixed(2)} ms`;

async function measure(port) {
	const fresh = [];
	for (let i = 0; i < nHealth; i++) {
		const t0 = process.hrtime.bigint();
		const s = await connect(port);
		await exchange(s, 'GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n', whole);
		fresh.push(Number(process.hrtime.bigint() - t0) / 1e6);
		s.destroy();
	}
	const kept = [];
	const k = await connect(port);
	for (let i = 0; i < nHealth; i++) kept.push(await exchange(k, 'GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n', whole));
	k.destroy();
	const ttft = [];
	const body = JSON.stringify({ prompt: 'Once upon a time', max_tokens: 4, stream: true });
	for (let i = 0; i < nTtft; i++) {
		const t0 = process.hrtime.bigint();
		const s = await connect(port);
		await exchange(
			s,
			`POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: ${body.length}\r\nConnection: close\r\n\r\n${body}`,
			(t) => /"text":/.test(t),
		);
		ttft.push(Number(process.hrtime.bigint() - t0) / 1e6);
		s.destroy();
	}
	return { fresh, kept, ttft };
}

const status = (pid) => {
	const t = fs.readFileSync(`/proc/${pid}/status`, 'utf8');
	return { rss: Number(/VmRSS:\s+(\d+)/.exec(t)[1]), threads: Number(/Threads:\s+(\d+)/.exec(t)[1]) };
};

for (const bin of bins) {
	const srv = await start(bin);
	await measure(srv.port); // warm up
	const quiet = await measure(srv.port);
	const before = status(srv.proc.pid);
	const idle = [];
	for (let i = 0; i < nIdle; i++) idle.push(await connect(srv.port, `127.0.0.${2 + (i % 20)}`));
	await sleep(1000);
	const after = status(srv.proc.pid);
	const loaded = await measure(srv.port);
	const open = idle.filter((s) => !s.destroyed && s.readyState === 'open').length;
	for (const s of idle) s.destroy();
	await srv.stop();
	console.log(`${bin}`);
	for (const [name, m] of [['no idle sockets', quiet], [`${nIdle} idle sockets (${open} still open)`, loaded]]) {
		console.log(`  ${name}: /health new connection ${fmt(m.fresh)}; kept-alive ${fmt(m.kept)}; TTFT ${fmt(m.ttft)}`);
	}
	console.log(`  per idle socket: ${(((after.rss - before.rss) * 1024) / nIdle).toFixed(0)} bytes of RSS; threads ${before.threads} -> ${after.threads}`);
}
