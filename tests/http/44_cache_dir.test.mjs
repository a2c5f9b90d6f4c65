// --cache-dir: the prefix cache's pages outlive the process. A long prompt served, the server
// drained and started again: the same prompt is read back from disk (counted, and in the
// reply's cached tokens) with the same bits; a damaged file is refused and deleted, never read;
// a folder that cannot be made, or a cap that is no size, is refused before the server listens.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { spawnSync } from 'node:child_process';
import { startServer, STORIES, KEY, BIN, TMP, postJSON, metric } from './lib.mjs';

const dir = path.join(TMP, `kv-cache-${process.pid}`);
const prompt = Array.from({ length: 12 }, (_, i) => `Once upon a time there was a little ${['girl', 'dog', 'bird'][i % 3]} who liked to play in the park.`).join(' ');
const body = { prompt, max_tokens: 16, temperature: 0.8, seed: 5 };

const pageFiles = () =>
	fs.readdirSync(dir).flatMap((d) => {
		const sub = path.join(dir, d);
		return fs.statSync(sub).isDirectory() ? fs.readdirSync(sub).filter((f) => f.endsWith('.kvpage')).map((f) => path.join(sub, f)) : [];
	});

async function serveOnce(t) {
	const srv = await startServer(['-m', STORIES, '--api-key', KEY, '--cache-dir', dir]);
	t.after(() => srv.proc.exitCode === null && srv.proc.kill('SIGKILL'));
	const r = await postJSON(`${srv.url}/v1/completions`, body);
	assert.equal(r.status, 200, JSON.stringify(r.body));
	const disk = async (op) => metric(srv.url, `lanes_prefix_cache_disk_pages_total{op="${op}"}`);
	const counts = { read: await disk('read'), refused: await disk('refused') };
	srv.proc.kill('SIGTERM');
	const end = await srv.exited;
	assert.equal(end.code, 0, 'drained and exited 0');
	return { reply: r.body, counts };
}

test('a prompt served before a restart is read back from disk, with the same bits', async (t) => {
	fs.rmSync(dir, { recursive: true, force: true });
	const first = await serveOnce(t);
	assert.equal(first.counts.read, 0);
	assert.equal(first.reply.usage.prompt_tokens_details.cached_tokens, 0);
	const n = first.reply.usage.prompt_tokens;
	assert.ok(n > 150, `a long prompt (${n} tokens)`);
	assert.ok(pageFiles().length >= Math.floor(n / 16), `its pages written at drain (${pageFiles().length})`);

	const again = await serveOnce(t);
	assert.ok(again.counts.read >= Math.floor((n - 1) / 16), `pages read back (${again.counts.read})`);
	assert.ok(again.reply.usage.prompt_tokens_details.cached_tokens >= n - 16, 'the prompt came from disk');
	assert.equal(again.reply.choices[0].token_sha, first.reply.choices[0].token_sha, 'the same tokens as fresh');
	assert.equal(again.reply.choices[0].text, first.reply.choices[0].text);

	// every file damaged: each one the prompt reaches is refused, deleted, and computed afresh
	for (const f of pageFiles()) {
		const b = fs.readFileSync(f);
		b[b.length >> 1] ^= 0x40;
		fs.writeFileSync(f, b);
	}
	const damaged = await serveOnce(t);
	assert.equal(damaged.counts.read, 0, 'nothing damaged is read');
	assert.ok(damaged.counts.refused >= 1, `refused (${damaged.counts.refused})`);
	assert.equal(damaged.reply.usage.prompt_tokens_details.cached_tokens, 0);
	assert.equal(damaged.reply.choices[0].token_sha, first.reply.choices[0].token_sha, 'the same tokens as fresh');
	const healed = await serveOnce(t);
	assert.ok(healed.counts.read >= 1 && healed.counts.refused === 0, 'drain wrote them whole again');
	assert.equal(healed.reply.choices[0].token_sha, first.reply.choices[0].token_sha);
	fs.rmSync(dir, { recursive: true, force: true });
});

test('a --cache-dir that cannot be made, or a --cache-dir-max that is no size, is refused before listening', () => {
	const file = path.join(TMP, `kv-cache-file-${process.pid}`);
	fs.writeFileSync(file, 'not a folder');
	const bad = spawnSync(BIN, ['serve', '-m', STORIES, '--port', '0', '--cache-dir', path.join(file, 'sub')], { encoding: 'utf8', timeout: 20000 });
	assert.equal(bad.status, 2, bad.stderr);
	assert.match(bad.stderr, /--cache-dir: cannot make the folder/);
	assert.doesNotMatch(bad.stderr, /listening/);
	const cap = spawnSync(BIN, ['serve', '-m', STORIES, '--port', '0', '--cache-dir', dir, '--cache-dir-max', 'lots'], { encoding: 'utf8', timeout: 20000 });
	assert.equal(cap.status, 2, cap.stderr);
	assert.match(cap.stderr, /--cache-dir-max: 'lots' is not a size/);
	fs.rmSync(file, { force: true });
	fs.rmSync(dir, { recursive: true, force: true });
});
