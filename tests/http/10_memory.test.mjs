// Memory planning: `serve --memory` sizes lanes and the largest window from the budget,
// /slots and /metrics show the window and the memory, a long request grows the window,
// a prompt past the budget's window gets a 400 naming it, and a budget nothing fits in exits 1.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { startServer, STORIES, KEY, BIN, postJSON, getJSON } from './lib.mjs';

test('serve --memory: planned lanes, elastic window, memory in /slots and /metrics', async (t) => {
	const srv = await startServer(['-m', STORIES, '--api-key', KEY, '--memory', '48MiB', '--lanes', '2', '--window', '128', '--kv-type', 'q8_0']);
	t.after(() => srv.proc.exitCode === null && srv.proc.kill('SIGKILL'));
	const url = srv.url;
	const s0 = (await getJSON(`${url}/slots`)).body;
	assert.equal(s0.lanes.length, 2);
	assert.equal(s0.window.tokens, 128);
	assert.equal(s0.window.floor_tokens, 128);
	assert.ok(s0.window.max_tokens > 512, `the budget allows a long window (${s0.window.max_tokens})`);
	assert.ok(s0.memory.kv_reserved_bytes >= s0.memory.kv_bytes && s0.memory.kv_bytes > 0);
	assert.ok(s0.memory.compute_bytes > 0);
	// a long request: the window grows to hold it, and it runs to its length
	const r = await postJSON(`${url}/v1/completions`, { prompt: 'Once upon a time', max_tokens: 400, ignore_eos: true });
	assert.equal(r.status, 200, JSON.stringify(r.body));
	assert.equal(r.body.usage.completion_tokens, 400);
	const s1 = (await getJSON(`${url}/slots`)).body;
	assert.ok(s1.window.tokens >= 400 + r.body.usage.prompt_tokens, `window grew to ${s1.window.tokens}`);
	assert.ok(s1.memory.kv_bytes > s0.memory.kv_bytes, 'the pool may use more KV');
	const m = await (await fetch(`${url}/metrics`)).text();
	assert.match(m, new RegExp(`^lanes_window_tokens ${s1.window.tokens}$`, 'm'));
	assert.match(m, /^lanes_window_max_tokens \d+$/m);
	assert.match(m, /^lanes_memory_bytes\{part="kv_reserved"\} [1-9]\d*$/m);
	// a prompt past the largest window: a 400 that names it (a max_tokens past it is capped there)
	const big = await postJSON(`${url}/v1/completions`, { prompt: Array(s0.window.max_tokens + 10).fill(1), max_tokens: 2 });
	assert.equal(big.status, 400);
	assert.equal(big.body.error.param, 'prompt');
	assert.match(big.body.error.message, /largest window the memory budget allows \(\d+ tokens\)/);
});

test('serve --memory: a budget nothing fits in is refused before listening', () => {
	const r = spawnSync(BIN, ['serve', '-m', STORIES, '--port', '0', '--memory', '1MiB'], { encoding: 'utf8' });
	assert.equal(r.status, 1);
	assert.match(r.stderr, /nothing fits in 1\.0 MiB: the weights alone need/);
	const bad = spawnSync(BIN, ['serve', '-m', STORIES, '--port', '0', '--memory', 'lots'], { encoding: 'utf8' });
	assert.equal(bad.status, 2, 'a value that is no size is a bad argument');
	assert.match(bad.stderr, /'lots' is not a size/);
	assert.doesNotMatch(bad.stderr, /I serve:/, 'refused before the banner');
});
