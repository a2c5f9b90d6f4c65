// bench/agent_ttft: Claude Code's first request as it sends it, timed. `claude -p` runs against a
// recording proxy in front of lanes serve; the proxy notes each /v1/messages request's time to
// its first token's event and the prompt's size, then cuts the turn (a random model need not stop).
// Run twice: cold, then from the prefix cache.
// Then the first request replayed (max_tokens 1) as sent and under tool_choice none (no tools
// rendered, no grammar): the difference bounds the tools' rendering and grammar compile.
//
//   node bench/agent_ttft.mjs [--model FILE.gguf | --shape llama-3.2-1b] [--bin build/lanes] [--ctx 65536]
// Without --model a Q4_0 file of --shape (default llama-3.2-1b: tinyllama's size, but a window
// that holds the prompt; Llama 2's vocabulary) is generated in a temporary folder.
import { spawn, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import { startServer } from '../tests/http/lib.mjs';

const args = Object.fromEntries(
	process.argv.slice(2).reduce((acc, a, i, all) => (a.startsWith('--') ? [...acc, [a.slice(2), all[i + 1] && !all[i + 1].startsWith('--') ? all[i + 1] : '1']] : acc), []),
);
const shared = path.resolve(process.env.LANES_SHARED || '../shared');
const bin = path.resolve(args.bin || 'build/lanes');
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'agent-ttft-'));
process.on('exit', () => fs.rmSync(tmp, { recursive: true, force: true }));
let model = args.model;
if (!model) {
	const shape = args.shape || 'llama-3.2-1b';
	model = path.join(tmp, `${shape}-Q4_0.gguf`);
	const r = spawnSync(bin, ['gen', '--shape', shape, '--type', 'Q4_0', '--vocab', path.join(shared, 'models/ref-spm-Q4_0.gguf'), '-o', model], { stdio: 'inherit' });
	if (r.status) process.exit(1);
}
const KEY = 'bench-key';
// one lane whose window holds Claude Code's prompt (tens of thousands of tokens)
const srv = await startServer(['-m', model, '--api-key', KEY, '--lanes', '1', '--ctx', args.ctx || '65536'], {}, { bin });

// the proxy: forwards everything, times /v1/messages to its first content_block event
const seen = [];
const proxy = http.createServer((req, res) => {
	const chunks = [];
	req.on('data', (d) => chunks.push(d));
	req.on('end', () => {
		const body = Buffer.concat(chunks);
		const t0 = performance.now();
		const up = http.request(srv.url + req.url, { method: req.method, headers: { ...req.headers, host: new URL(srv.url).host } }, (ur) => {
			res.writeHead(ur.statusCode, ur.headers);
			let first = null, text = '', cut = false;
			ur.on('data', (d) => {
				if (cut) return;
				text += d;
				if (first === null && /content_block_delta|"delta"/.test(text)) first = performance.now() - t0;
				res.write(d);
				// a random model need not stop: once its first content is out, the turn is cut
				if (first !== null && req.url.startsWith('/v1/messages') && !req.url.includes('count_tokens')) cut = true, ur.destroy(), res.destroy(), ur.emit('end');
			});
			ur.on('end', () => {
				res.end();
				if (req.url.startsWith('/v1/messages') && !req.url.includes('count_tokens')) {
					const j = JSON.parse(body.toString() || '{}');
					const usage = /"input_tokens":(\d+)/.exec(text), cached = /"cache_read_input_tokens":(\d+)/.exec(text);
					const at = seen.length;
					process.nextTick(() => report(seen[at]));
					seen.push({ error: ur.statusCode === 200 ? '' : text.slice(0, 200), status: ur.statusCode, ttft_ms: first, total_ms: performance.now() - t0, tools: (j.tools || []).length, bytes: body.length, input_tokens: usage && +usage[1], cached: cached && +cached[1], body: j });
				}
			});
		});
		up.on('error', () => res.destroy());
		up.end(body);
	});
}).listen(0);
await new Promise((r) => proxy.on('listening', r));
const base = `http://127.0.0.1:${proxy.address().port}`;

const claude = () =>
	new Promise((resolve) => {
		const home = fs.mkdtempSync(path.join(tmp, 'home-'));
		const p = spawn(path.resolve('node_modules/.bin/claude'), ['-p', 'Say hello.', '--model', 'lanes'], {
			cwd: home,
			env: { PATH: process.env.PATH, HOME: home, ANTHROPIC_BASE_URL: base, ANTHROPIC_API_KEY: KEY, DISABLE_AUTOUPDATER: '1', DISABLE_TELEMETRY: '1', CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC: '1' },
			stdio: 'ignore',
		});
		p.on('exit', resolve);
	});

// each request as it ends: the first is cold, Claude Code's retries of a cut turn come from the cache
function report(s) {
	console.log(`request ${seen.indexOf(s) + 1}: status ${s.status}, ${s.tools} tools, ${s.bytes} bytes, input ${s.input_tokens} (cached ${s.cached}), ttft ${s.ttft_ms?.toFixed(0)} ms ${s.error}`);
}
for (const run of ['first', 'second']) console.log(`claude run ${run}: exit ${await claude()}`);
// the first request again, from the cache, with and without its tools' grammar
const first = seen.find((s) => s.tools > 0);
if (first) {
	for (const choice of [undefined, { type: 'none' }]) {
		const b = { ...first.body, max_tokens: 1, stream: false, ...(choice ? { tool_choice: choice } : {}) };
		const t0 = performance.now();
		const r = await fetch(`${srv.url}/v1/messages`, { method: 'POST', headers: { 'content-type': 'application/json', 'x-api-key': KEY }, body: JSON.stringify(b) });
		await r.text();
		console.log(`replay, tool_choice ${choice ? 'none' : 'as sent'}: ${r.status}, ${(performance.now() - t0).toFixed(0)} ms`);
	}
}
proxy.close();
srv.proc.kill('SIGTERM');
await srv.exited;
