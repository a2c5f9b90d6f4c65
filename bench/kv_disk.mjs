// bench/kv_disk: time to first token of a long prompt after a restart, with and without
// --cache-dir. Each server serves the prompt once, drains (SIGTERM) and a fresh one serves it
// again: without the folder the restarted server computes the prompt anew, with it the pages
// are read back. Prints the prompt's size, each first-token time and their ratio.
//
//   node bench/kv_disk.mjs --model FILE [--tokens 2000] [--bin build/lanes] [--reps 3]
import { startServer, postSSE, TMP } from '../tests/http/lib.mjs';
import fs from 'node:fs';
import path from 'node:path';

const args = Object.fromEntries(
	process.argv.slice(2).reduce((acc, a, i, all) => (a.startsWith('--') ? [...acc, [a.slice(2), all[i + 1] && !all[i + 1].startsWith('--') ? all[i + 1] : '1']] : acc), []),
);
const bin = path.resolve(args.bin || 'build/lanes');
const model = args.model || path.resolve(process.env.LANES_SHARED || '../shared', 'models/stories260K.gguf');
const words = Number(args.tokens || 2000);
const reps = Number(args.reps || 3);
const dir = path.join(TMP, `kv-disk-bench-${process.pid}`);
const prompt = Array.from({ length: words }, (_, i) => ['once', 'upon', 'a', 'time', 'there', 'was', 'a', 'cat'][i % 8] + (i % 97 ? '' : '.')).join(' ');

// One server's life: a streamed completion of the prompt, its first-token time, then drain.
async function serveOnce(extra) {
	const srv = await startServer(['-m', model, '--ctx', String(words * 2 + 256), '--lanes', '1', ...extra], {}, { bin });
	const t0 = performance.now();
	let first = 0, usage = null;
	await postSSE(`${srv.url}/v1/completions`, { prompt, max_tokens: 4, stream: true, stream_options: { include_usage: true }, temperature: 0 }, {}, (ev) => {
		if (!first && ev.data?.choices?.length) first = performance.now() - t0;
		if (ev.data?.usage) usage = ev.data.usage;
	});
	srv.proc.kill('SIGTERM');
	await srv.exited;
	return { ttft: first, prompt: usage?.prompt_tokens, cached: usage?.prompt_tokens_details?.cached_tokens ?? 0 };
}

const rows = [];
for (let r = 0; r < reps; r++) {
	fs.rmSync(dir, { recursive: true, force: true });
	await serveOnce([]);
	const plain = await serveOnce([]);
	await serveOnce(['--cache-dir', dir]);
	const disk = await serveOnce(['--cache-dir', dir]);
	rows.push({ plain, disk });
	console.log(`rep ${r + 1}: ${plain.prompt} prompt tokens; first token after a restart ${plain.ttft.toFixed(1)} ms without --cache-dir, ` +
		`${disk.ttft.toFixed(1)} ms with it (${disk.cached} tokens read back): ${(plain.ttft / disk.ttft).toFixed(1)}x`);
}
const med = (xs) => xs.sort((a, b) => a - b)[xs.length >> 1];
const p = med(rows.map((x) => x.plain.ttft)), d = med(rows.map((x) => x.disk.ttft));
console.log(`median: ${p.toFixed(1)} ms without, ${d.toFixed(1)} ms with --cache-dir: ${(p / d).toFixed(1)}x`);
fs.rmSync(dir, { recursive: true, force: true });
