// bench/rerank: documents reranked per second — one /v1/rerank request of N documents of
// about T words each against a query (new documents each repetition), on a reranker file
// (default: `lanes gen --shape reranker-0.5b` Q8_0 over Qwen2's vocabulary, written to the
// temporary folder once), R repetitions; with --bin A,B each build in turn, interleaved.
//
//   node bench/rerank.mjs [--model FILE] [--docs 32] [--tokens 256] [--reps 3] [--lanes 4] [--bin build/lanes]
import { startServer, postJSON, BIN, SHARED, TMP } from '../tests/http/lib.mjs';
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';

const args = Object.fromEntries(
	process.argv.slice(2).reduce((acc, a, i, all) => (a.startsWith('--') ? [...acc, [a.slice(2), all[i + 1] && !all[i + 1].startsWith('--') ? all[i + 1] : '1']] : acc), []),
);
const nDocs = Number(args.docs || 32), words = Number(args.tokens || 256), reps = Number(args.reps || 3);
let model = args.model;
if (!model) {
	model = path.join(TMP, 'reranker-0.5b-Q8_0.gguf');
	if (!fs.existsSync(model)) {
		const g = spawnSync(BIN, ['gen', '--shape', 'reranker-0.5b', '--type', 'Q8_0', '--vocab', path.join(SHARED, 'vocab/ggml-vocab-qwen2.gguf'), '-o', model], { stdio: 'inherit' });
		if (g.status !== 0) throw new Error('lanes gen failed');
	}
}
const bins = (args.bin || BIN).split(',').map((b) => path.resolve(b));
const servers = [];
for (const bin of bins) servers.push(await startServer(['-m', model, '--lanes', String(args.lanes || 4), '--queue', String(nDocs)], {}, { bin }));
// new documents each repetition (the query's head alone comes from the prefix cache)
const docsOf = (r) => Array.from({ length: nDocs }, (_, d) => `${r}.${d}: ` + Array.from({ length: words }, (_, i) => ['river', 'stone', 'light', 'cat', 'market', 'song'][(i * 7 + d + r) % 6]).join(' '));
const rates = bins.map(() => []);
for (let r = 0; r < reps; r++) {
	const docs = docsOf(r);
	for (let k = 0; k < bins.length; k++) {
		const t0 = performance.now();
		const res = await postJSON(`${servers[k].url}/v1/rerank`, { query: 'where do cats sleep in the market', documents: docs, return_documents: false });
		const s = (performance.now() - t0) / 1000;
		if (res.status !== 200) throw new Error(JSON.stringify(res.body));
		rates[k].push(nDocs / s);
		console.log(`${bins[k]} rep ${r + 1}: ${nDocs} documents, ${res.body.usage.prompt_tokens} tokens in ${s.toFixed(2)} s: ${(nDocs / s).toFixed(1)} documents/s`);
	}
}
for (let k = 0; k < bins.length; k++) {
	const v = rates[k].sort((a, b) => a - b);
	console.log(`${bins[k]}: median ${v[v.length >> 1].toFixed(1)} documents/s (min ${v[0].toFixed(1)}, max ${v[v.length - 1].toFixed(1)})`);
	servers[k].proc.kill('SIGKILL');
}
