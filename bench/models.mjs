// bench/models: many models in one server (--models-dir). For each model of the folder, the
// time from request to first token cold (its first request loads it) and warm (loaded); then
// what a load costs a running stream of the -m model: its gaps between tokens while nothing
// loads, and while the folder's largest model loads.
//
//   node bench/models.mjs [--models FILE,FILE...] [--bin build/lanes] [--reps 3]
// (default: stories260K and a generated tinyllama-1.1b-shaped Q4_0 file)
import { startServer, postSSE, TMP, STORIES, BIN } from '../tests/http/lib.mjs';
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';

const args = Object.fromEntries(
	process.argv.slice(2).reduce((acc, a, i, all) => (a.startsWith('--') ? [...acc, [a.slice(2), all[i + 1] && !all[i + 1].startsWith('--') ? all[i + 1] : '1']] : acc), []),
);
const bin = path.resolve(args.bin || BIN);
const reps = Number(args.reps || 3);
const dir = fs.mkdtempSync(path.join(TMP, 'models-bench-'));

function tinyllama() {
	const out = path.join(TMP, 'bench-tinyllama-1.1b-Q4_0.gguf');
	if (!fs.existsSync(out)) {
		const r = spawnSync(bin, ['gen', '--shape', 'tinyllama-1.1b', '--type', 'Q4_0', '--vocab', STORIES, '-o', out], { stdio: 'inherit' });
		if (r.status !== 0) throw new Error('lanes gen failed');
	}
	return out;
}
const files = args.models ? args.models.split(',') : [STORIES, tinyllama()];
const names = files.map((f, i) => {
	const n = `m${i}-${path.basename(f, '.gguf')}`;
	fs.symlinkSync(path.resolve(f), path.join(dir, `${n}.gguf`));
	return n;
});

const srv = await startServer(['-m', STORIES, '--models-dir', dir, '--keep-alive', '1s', '--max-models', String(files.length)], {}, { bin });

// Until name is no longer loaded (its keep-alive passed).
async function unloaded(name) {
	for (;;) {
		const ps = await (await fetch(`${srv.url}/api/ps`)).json();
		if (!ps.models.some((m) => m.name === `${name}:latest`)) return;
		await new Promise((res) => setTimeout(res, 50));
	}
}

async function ttft(model) {
	const t0 = performance.now();
	let first = 0;
	await postSSE(`${srv.url}/v1/completions`, { model, prompt: 'Once upon a time', max_tokens: 4, stream: true, temperature: 0 }, {}, (ev) => {
		if (!first && ev.data?.choices?.length) first = performance.now() - t0;
	});
	return first;
}

const median = (v) => [...v].sort((a, b) => a - b)[v.length >> 1];
console.log('model | bytes | cold TTFT ms | warm TTFT ms | cold / warm');
for (let i = 0; i < files.length; i++) {
	const cold = [], warm = [];
	for (let r = 0; r < reps; r++) {
		// cold: once its keep-alive (1 s) has unloaded it; warm: at once after
		await unloaded(names[i]);
		cold.push(await ttft(names[i]));
		warm.push(await ttft(names[i]));
	}
	const c = median(cold), w = median(warm);
	console.log(`${names[i]} | ${fs.statSync(files[i]).size} | ${c.toFixed(1)} | ${w.toFixed(1)} | ${(c / w).toFixed(1)}`);
}

// the -m model's stream: its gaps with nothing loading, then while the largest file loads
async function gaps(during) {
	const times = [];
	let loadDone = null;
	await postSSE(`${srv.url}/v1/completions`, { prompt: 'Once upon a time', max_tokens: 400, ignore_eos: true, stream: true }, {}, (ev) => {
		if (ev.data?.choices?.length) times.push(performance.now());
		if (times.length === 20 && during) loadDone = ttft(during);
	});
	if (loadDone) await loadDone;
	const g = times.slice(1).map((t, i) => t - times[i]).slice(20);
	return { p50: median(g), p99: [...g].sort((a, b) => a - b)[Math.floor(g.length * 0.99)], max: Math.max(...g) };
}
await unloaded(names[0]);
const big = names[files.map((f) => fs.statSync(f).size).reduce((b, s, i, a) => (s > a[b] ? i : b), 0)];
const quiet = await gaps(null);
await new Promise((res) => setTimeout(res, 300));
await unloaded(big);
const loading = await gaps(big);
console.log(`\nthe -m model's stream, gaps between tokens (ms): p50 / p99 / max`);
console.log(`nothing loading: ${quiet.p50.toFixed(2)} / ${quiet.p99.toFixed(2)} / ${quiet.max.toFixed(2)}`);
console.log(`${big} loading: ${loading.p50.toFixed(2)} / ${loading.p99.toFixed(2)} / ${loading.max.toFixed(2)}`);
srv.proc.kill('SIGTERM');
await srv.exited;
