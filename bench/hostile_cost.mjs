// bench/hostile_cost: what the costliest request of each family takes, for one or more builds
// of lanes serve in turn (same run, same machine): a 300 KB learning example, /tokenize of
// 256 KB and 1 MB (time should grow with the size, not faster), 5,000 tools, a grammar whose
// ambiguity explodes after its first bytes; then /health's p50/p99 while 4 clients send such
// requests back to back. Builds without --adapters-dir (older ones) are started without it.
//
//   node bench/hostile_cost.mjs --bin /tmp/lanes-before,build/lanes [--model ../shared/models/stories260K.gguf] [--seconds 5]
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { startServer } from '../tests/http/lib.mjs';

const args = Object.fromEntries(
	process.argv.slice(2).reduce((acc, a, i, all) => (a.startsWith('--') ? [...acc, [a.slice(2), all[i + 1] && !all[i + 1].startsWith('--') ? all[i + 1] : '1']] : acc), []),
);
const bins = (args.bin || 'build/lanes').split(',');
const model = args.model || path.resolve(process.env.LANES_SHARED || '../shared', 'models/stories260K.gguf');
const seconds = Number(args.seconds || 5);
const KEY = 'bench-key';
const headers = { 'Content-Type': 'application/json', Authorization: `Bearer ${KEY}` };

const post = async (url, body) => {
	const t0 = performance.now();
	const r = await fetch(url, { method: 'POST', headers, body: JSON.stringify(body) });
	await r.arrayBuffer();
	return { ms: performance.now() - t0, status: r.status };
};

const conversation = Array.from({ length: 300 }, (_, i) => ({ role: i % 2 ? 'assistant' : 'user', content: 'hello there '.repeat(80) }));
const tools = Array.from({ length: 5000 }, (_, i) => ({ type: 'function', function: { name: `t${i}`, parameters: { type: 'object', properties: { a: { type: 'string' } } } } }));
const lateGrammar = 'root ::= "Answer: " a\na ::= "x" a "y" | "x" a "y" | ""\n';

async function families(url, grant) {
	return {
		'learning example, 300 KB': () => post(`${url}/learn/examples`, { grant, messages: conversation }),
		'tokenize, 256 KB': () => post(`${url}/tokenize`, { content: 'hello world '.repeat(21845) }),
		'tokenize, 1 MB': () => post(`${url}/tokenize`, { content: 'hello world '.repeat(87000) }),
		'5,000 tools': () => post(`${url}/v1/chat/completions`, { messages: [{ role: 'user', content: 'hi' }], tools, max_tokens: 1 }),
		'late-ambiguity grammar': () => post(`${url}/v1/completions`, { prompt: 'Q:', grammar: lateGrammar, max_tokens: 64, temperature: 0 }),
	};
}

const pct = (v, p) => v.slice().sort((a, b) => a - b)[Math.min(v.length - 1, Math.floor(p * v.length))];

for (const bin of bins) {
	const help = spawnSync(path.resolve(bin), ['serve', '--help'], { encoding: 'utf8' }).stdout || '';
	const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'lanes-hostile-cost-'));
	const extra = help.includes('--adapters-dir') ? ['--adapters-dir', dir] : [];
	const srv = await startServer(['-m', model, '--api-key', KEY, ...extra], {}, { bin: path.resolve(bin) });
	try {
		const g = await (await fetch(`${srv.url}/learn/grants`, { method: 'POST', headers, body: JSON.stringify({ adapter: 'b', max_steps: 1, max_tokens: 1e9 }) })).json();
		const fam = await families(srv.url, g.id);
		console.log(`# ${bin}`);
		for (const [name, fn] of Object.entries(fam)) {
			const runs = [];
			let status = 0;
			for (let i = 0; i < 3; i++) ({ ms: runs[i], status } = await fn());
			console.log(`${name.padEnd(28)} ${pct(runs, 0.5).toFixed(1).padStart(8)} ms   (status ${status})`);
		}
		// /health while 4 clients send the worst requests back to back
		const worst = Object.values(fam);
		let stop = false;
		const load = Array.from({ length: 4 }, async (_, k) => {
			for (let i = k; !stop; i++) await worst[i % worst.length]().catch(() => {});
		});
		const lat = [];
		const end = performance.now() + seconds * 1000;
		while (performance.now() < end) {
			const t0 = performance.now();
			await (await fetch(`${srv.url}/health`)).arrayBuffer();
			lat.push(performance.now() - t0);
			await new Promise((r) => setTimeout(r, 20));
		}
		stop = true;
		await Promise.all(load);
		console.log(`/health under 4 such clients  p50 ${pct(lat, 0.5).toFixed(2)} ms, p99 ${pct(lat, 0.99).toFixed(2)} ms, max ${Math.max(...lat).toFixed(1)} ms (${lat.length} reads)`);
	} finally {
		srv.proc.kill('SIGKILL');
		await srv.exited;
		fs.rmSync(dir, { recursive: true, force: true });
	}
}
