// The web page in a real browser (headless Chromium through puppeteer-core): a streamed reply
// grows on screen, stop frees the lane as the dashboard shows, the conversation survives a
// reload, model text holding markup stays text, the header names the model, its context and
// the build, the icon loads (no 404 in the server's log), every chart has axes with units and a
// legend, and a MoE model's dashboard draws the live expert heat map with labelled axes and a
// colour key (a dense model's shows none). Labels are read from the DOM. Skips when Chromium
// is not installed.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { startServer, bigModel, STORIES, SHARED, TMP, getJSON, postJSON, sleep } from './lib.mjs';

const CHROMIUM = ['/usr/bin/chromium', '/usr/bin/chromium-browser'].find((p) => fs.existsSync(p));
let puppeteer = null;
try { puppeteer = (await import('puppeteer-core')).default; } catch { /* skipped below */ }
const why = !CHROMIUM ? 'no chromium (apt-get install chromium)' : !puppeteer ? 'no puppeteer-core (npm ci)' : null;

let srv, browser;
before(async () => {
	if (why) return;
	// the larger random-weight model decodes slowly enough to watch a reply grow and stop it
	srv = await startServer(['-m', bigModel(), '--lanes', '2']);
	browser = await puppeteer.launch({ executablePath: CHROMIUM, headless: true, args: ['--no-sandbox', '--disable-gpu'] });
});
after(async () => {
	await browser?.close();
	srv?.proc.kill('SIGKILL');
});

const bodyText = (page) => page.$eval('#messages .msg.assistant:last-child .body', (e) => e.textContent).catch(() => '');

test('chat: a streamed reply grows, stop frees the lane, a reload keeps the conversation', { skip: why || false }, async () => {
	const page = await browser.newPage();
	await page.goto(srv.url + '/');
	await page.$eval('#max_tokens', (e) => { e.value = '2000'; });
	await page.$eval('#temperature', (e) => { e.value = '1.5'; });
	await page.type('#input', 'Once upon a time');
	await page.keyboard.press('Enter');
	// the reply appears token by token: several different lengths are seen while it streams
	const lengths = new Set();
	for (let i = 0; i < 600 && lengths.size < 4; i++) {
		const n = (await bodyText(page)).length;
		if (n) lengths.add(n);
		await sleep(50);
	}
	assert.ok(lengths.size >= 4, `the reply grew in steps: ${[...lengths]}`);
	assert.equal(await page.$eval('#stop', (e) => e.disabled), false);
	// the dashboard shows the busy lane, then, after stop, every lane idle
	await page.click('#tab-dash');
	const shown = () => page.evaluate(() => ['chat', 'dash'].filter((id) => getComputedStyle(document.getElementById(id)).display !== 'none'));
	assert.deepEqual(await shown(), ['dash'], 'the tab shows the dashboard alone');
	await page.waitForSelector('#lanes tr[data-phase="live"]', { visible: true, timeout: 20000 });
	await page.$eval('#stop', (e) => e.click());
	await page.waitForFunction(() => {
		const rows = [...document.querySelectorAll('#lanes tbody tr')];
		return rows.length && rows.every((r) => r.dataset.phase === 'idle');
	}, { timeout: 20000 });
	const slots = await getJSON(`${srv.url}/slots`);
	assert.ok(slots.body.lanes.every((l) => l.phase === 'idle'), 'the server freed the lane');
	assert.equal(await page.$eval('#experts', (e) => e.hidden), true, 'a dense model has no expert heat map');
	await page.click('#tab-chat');
	assert.deepEqual(await shown(), ['chat']);
	const stats = await page.$eval('#messages .msg.assistant:last-child .stats span', (e) => e.textContent);
	assert.match(stats, /stopped/);
	assert.match(stats, /TTFT \d+ ms/);
	const partial = await bodyText(page);
	await page.screenshot({ path: path.join(TMP, 'webui-chat.png') });
	await page.reload();
	await page.waitForSelector('#convs li');
	assert.equal(await page.$$eval('#convs li', (l) => l.length), 1);
	assert.equal(await page.$eval('#messages .msg.user .body', (e) => e.textContent), 'Once upon a time');
	assert.equal(await bodyText(page), partial);
	await page.close();
});

test('model text holding markup renders as text, never as elements', { skip: why || false }, async () => {
	const page = await browser.newPage();
	await page.goto(srv.url + '/');
	const evil = 'Hi <script>window.__pwned=1</script> and <img src=x onerror="window.__pwned=2"> **bold**\n\n```\n<b>code</b>\n```\n## Head <b>x</b>\nafter';
	await page.evaluate((content) => {
		localStorage.setItem('lanes.conversations', JSON.stringify([{ id: 'x', title: '<img src=x onerror=alert(1)>',
			messages: [{ role: 'user', content: 'say it' }, { role: 'assistant', content }] }]));
	}, evil);
	await page.reload();
	await page.waitForSelector('#messages .msg.assistant');
	await sleep(200);
	const r = await page.evaluate(() => ({
		pwned: window.__pwned,
		made: document.querySelectorAll('#messages script, #messages img, #messages b, #convs img').length,
		text: document.querySelector('#messages .msg.assistant .body').textContent,
		code: document.querySelector('#messages .msg.assistant pre code')?.textContent,
		strong: document.querySelector('#messages .msg.assistant strong')?.textContent,
		title: document.querySelector('#convs li').firstChild.textContent,
		heading: document.querySelector('#messages .msg.assistant h4')?.textContent,
	}));
	assert.equal(r.pwned, undefined);
	assert.equal(r.made, 0);
	assert.ok(r.text.includes('<script>window.__pwned=1</script>'), r.text);
	assert.ok(r.text.includes('<img src=x onerror="window.__pwned=2">'), r.text);
	assert.equal(r.code, '<b>code</b>');
	assert.equal(r.strong, 'bold');
	assert.equal(r.title, '<img src=x onerror=alert(1)>');
	assert.equal(r.heading, 'Head <b>x</b>');
	await page.close();
});

test('while the model loads, the page shows its progress and stage, then hides them', { skip: why || false }, async () => {
	const page = await browser.newPage();
	// /health answers as a loading server would (the load itself is too quick to watch reliably)
	let health = { status: 'loading', progress: 0.42, stage: 'reading and repacking weights' };
	await page.setRequestInterception(true);
	page.on('request', (req) => {
		if (new URL(req.url()).pathname === '/health' && health)
			return req.respond({ status: 503, contentType: 'application/json', body: JSON.stringify(health) });
		req.continue();
	});
	await page.goto(srv.url + '/');
	await page.waitForFunction(() => !document.querySelector('#loadbar').hidden, { timeout: 10000 });
	const shown = await page.evaluate(() => ({ value: document.querySelector('#loadbar').value, text: document.querySelector('#health').textContent }));
	assert.equal(shown.value, 0.42);
	assert.match(shown.text, /loading · 42% · reading and repacking weights/);
	health = { status: 'loading', progress: 0.9, stage: 'starting the engine' };
	await page.waitForFunction(() => document.querySelector('#loadbar').value === 0.9, { timeout: 10000 });
	assert.match(await page.$eval('#health', (e) => e.textContent), /90% · starting the engine/);
	health = null; // the real server: ready
	await page.waitForFunction(() => document.querySelector('#loadbar').hidden, { timeout: 10000 });
	assert.equal(await page.$eval('#health', (e) => e.textContent), 'ok');
	await page.close();
});

test('a MoE model: the dashboard draws a live heat map of experts x layers per domain', { skip: why || false }, async () => {
	const s = await startServer(['-m', path.join(SHARED, 'models/ref-moe-Q8_0.gguf')]);
	try {
		const page = await browser.newPage();
		await page.goto(s.url + '/');
		await page.click('#tab-dash');
		assert.equal(await page.$eval('#chat', (e) => getComputedStyle(e).display), 'none', 'the chat gives way to the dashboard');
		await page.waitForFunction(() => !document.querySelector('#experts').hidden, { timeout: 20000 });
		await postJSON(`${s.url}/v1/completions`, { prompt: 'int main(void) { return 0; }', max_tokens: 4, metadata: { domain: 'code' } });
		const x = (await getJSON(`${s.url}/v1/experts`)).body;
		// the page polls every second: wait for the poll after the request ended
		await page.waitForFunction((rows) => document.querySelector('#experts figure[data-domain="code"] figcaption')?.textContent ===
			`code (${rows} rows)`, { timeout: 20000 }, x.domains.code.rows);
		const r = await page.evaluate(() => [...document.querySelectorAll('#experts figure')].map((f) => ({
			caption: f.querySelector('figcaption').textContent,
			cells: f.querySelectorAll('svg rect.cell').length,
			tips: [...f.querySelectorAll('svg rect.cell title')].map((t) => t.textContent),
			xAxis: [...f.querySelectorAll('.axis-x text')].map((t) => t.textContent),
			yAxis: [...f.querySelectorAll('.axis-y text')].map((t) => t.textContent),
		})));
		assert.deepEqual(r.map((f) => f.caption.replace(/ \(\d+ rows\)/, '')), ['all', 'code']);
		for (const f of r) {
			assert.equal(f.cells, x.experts * x.layers.length);
			// experts across, numbered; layers down, named: each map labels both axes
			assert.deepEqual(f.xAxis, ['expert →', ...Array.from({ length: x.experts }, (_, i) => String(i))]);
			assert.deepEqual(f.yAxis, ['layer ↓', ...x.layers.map((_, i) => `L${i}`)]);
		}
		// the colour key: a swatch per ratio to the uniform share, blue below it, white at it, red above
		const key = await page.evaluate(() => ({
			text: [...document.querySelectorAll('#experts-key text')].map((t) => t.textContent),
			fills: [...document.querySelectorAll('#experts-key rect.swatch')].map((r) => r.getAttribute('fill')),
		}));
		assert.deepEqual(key.text, ['colour: activations ÷ uniform share', '0.25×', '0.5×', '1×', '2×', '4×']);
		assert.deepEqual(key.fills, ['rgb(0,0,255)', 'rgb(128,128,255)', 'rgb(255,255,255)', 'rgb(255,128,128)', 'rgb(255,0,0)']);
		// a cell's colour is the key's at its ratio: the hottest cell of 'all' is at least as red as 1x
		const hottest = await page.evaluate(() => {
			const cells = [...document.querySelectorAll('#experts figure[data-domain="all"] rect.cell')];
			const n = (c) => Number(c.querySelector('title').textContent.split(': ')[1]);
			return cells.reduce((a, c) => (n(c) > n(a) ? c : a)).getAttribute('fill');
		});
		assert.match(hottest, /^rgb\(255,\d+,\d+\)$/);
		const counts = r[1].tips.map((t) => Number(t.split(': ')[1]));
		assert.deepEqual(counts, x.domains.code.layers.flatMap((l) => l.activations), 'each cell is its expert and layer');
		await page.screenshot({ path: path.join(TMP, 'webui-experts.png') });
		await page.close();
	} finally {
		s.proc.kill('SIGKILL');
	}
});

test('the header names the model, its context and the build; the icon loads and nothing is refused', { skip: why || false }, async () => {
	const page = await browser.newPage();
	const statuses = [];
	page.on('response', (r) => statuses.push([new URL(r.url()).pathname, r.status()]));
	const from = srv.log().length;
	await page.goto(srv.url + '/', { waitUntil: 'networkidle0' });
	const props = (await getJSON(`${srv.url}/props`)).body;
	await page.waitForFunction(() => document.querySelector('#ctx').textContent !== '', { timeout: 10000 });
	const head = await page.evaluate(() => ({ ...Object.fromEntries(['model', 'ctx', 'version'].map((id) => [id, document.getElementById(id).textContent])),
		icon: document.querySelector('link[rel=icon]').href }));
	assert.equal(head.model, props.model);
	assert.equal(head.ctx, `context ${props.default_generation_settings.n_ctx.toLocaleString('en')} tokens`);
	assert.equal(head.version, props.version.replace(/^lanes /, 'version '));
	// the icon the page names, and the one browsers ask for by themselves, are served
	const icon = await fetch(head.icon);
	assert.equal(icon.status, 200);
	assert.match(icon.headers.get('content-type'), /image\/svg\+xml/);
	assert.match(await icon.text(), /^<svg /);
	assert.deepEqual(statuses.filter(([, st]) => st >= 400), [], 'the page loads nothing that fails');
	// the browser asks for the icon itself (no page event shows it): the server's access log does
	for (let i = 0; i < 100 && !/GET \/ui\/favicon\.svg 200/.test(srv.log().slice(from)); i++) await sleep(50);
	const log = srv.log().slice(from);
	assert.match(log, /GET \/ui\/favicon\.svg 200/);
	assert.doesNotMatch(log, / 404 |rejected/, 'no 404 nor refusal in the log for a page load');
	assert.equal((await fetch(srv.url + '/favicon.ico')).status, 200, 'the name browsers try by themselves');
	await page.close();
});

test('a server of a models folder: the picker lists each model with its family, size and state; the chat runs on the one picked', { skip: why || false }, async () => {
	const dir = fs.mkdtempSync(path.join(TMP, 'webui-models-'));
	fs.symlinkSync(STORIES, path.join(dir, 'stories.gguf'));
	fs.symlinkSync(path.join(SHARED, 'models', 'ref-llama-Q8_0.gguf'), path.join(dir, 'llama-q8.gguf'));
	const s = await startServer(['--models-dir', dir]);
	const page = await browser.newPage();
	try {
		const sent = [];
		page.on('request', (r) => { if (r.url().endsWith('/v1/chat/completions')) sent.push(JSON.parse(r.postData())); });
		await page.goto(s.url + '/');
		await page.waitForSelector('#pick option', { timeout: 10000 });
		const options = () => page.$$eval('#pick option', (os) => os.map((o) => [o.value, o.textContent]));
		assert.deepEqual(await options(), [['llama-q8', 'llama-q8 · llama · 3 MiB · unloaded'], ['stories', 'stories · llama · 1 MiB · unloaded']]);
		await page.select('#pick', 'stories');
		await page.$eval('#max_tokens', (e) => { e.value = '6'; });
		await page.type('#input', 'Once upon a time');
		await page.keyboard.press('Enter');
		await page.waitForFunction(() => /tok\/s|tokens/.test(document.querySelector('#messages .msg.assistant:last-child .stats span')?.textContent || ''), { timeout: 20000 });
		assert.equal(sent.length, 1);
		assert.equal(sent[0].model, 'stories', 'the request names the model picked');
		assert.equal(await page.$eval('#model', (e) => e.textContent), 'stories', 'the header names it');
		await page.waitForFunction(() => [...document.querySelectorAll('#pick option')].some((o) => o.textContent.endsWith('· loaded')), { timeout: 10000 });
		assert.deepEqual((await options()).map(([, t]) => t.split(' · ').pop()), ['unloaded', 'loaded'], 'the picker shows which is loaded');
		assert.ok((await bodyText(page)).length > 0, 'the reply is shown');
	} finally {
		await page.close();
		s.proc.kill('SIGKILL');
	}
});

test('every chart has a titled time axis, a y axis in its unit and a legend; the lines stay inside their axes', { skip: why || false }, async () => {
	const page = await browser.newPage();
	await page.goto(srv.url + '/');
	await page.click('#tab-dash');
	await postJSON(`${srv.url}/v1/completions`, { prompt: 'Once upon a time', max_tokens: 24, temperature: 0 });
	// the rates are sampled each second: wait for a sample that saw the decode
	await page.waitForFunction(() => {
		const f = document.querySelector('figure.chart[data-chart="tokens"]'), p = f?.querySelector('polyline[data-series="decode"]');
		if (!p) return false;
		const bottom = Number(f.querySelector('rect.frame').getAttribute('y')) + Number(f.querySelector('rect.frame').getAttribute('height'));
		return p.getAttribute('points').split(' ').some((xy) => Number(xy.split(',')[1]) < bottom - 0.5);
	}, { timeout: 30000 });
	const charts = await page.evaluate(() => [...document.querySelectorAll('#plots figure.chart')].map((f) => {
		const frame = f.querySelector('rect.frame');
		const box = { x: +frame.getAttribute('x'), y: +frame.getAttribute('y'), w: +frame.getAttribute('width'), h: +frame.getAttribute('height') };
		return {
			name: f.dataset.chart,
			caption: f.querySelector('figcaption').textContent,
			x: [...f.querySelectorAll('.axis-x text')].map((t) => t.textContent),
			y: [...f.querySelectorAll('.axis-y text:not(.title)')].map((t) => t.textContent),
			unit: f.querySelector('.axis-y text.title').textContent,
			legend: [...f.querySelectorAll('.legend .key')].map((k) => [k.dataset.series, k.querySelector('text').textContent, k.querySelector('line').getAttribute('stroke')]),
			lines: [...f.querySelectorAll('polyline.series')].map((p) => [p.dataset.series, p.getAttribute('stroke'),
				p.getAttribute('points').split(' ').map((xy) => xy.split(',').map(Number))]),
			box,
		};
	}));
	assert.deepEqual(charts.map((c) => [c.name, c.caption, c.unit]), [['tokens', 'Tokens per second', 'tok/s'], ['rounds', 'Rounds per second', 'rounds/s']]);
	for (const c of charts) {
		assert.deepEqual(c.x, ['60 s ago', '30 s ago', 'now', 'time (s), a point a second'], c.name);
		const ticks = c.y.map(Number);
		assert.equal(ticks.length, 3);
		assert.ok(ticks[0] === 0 && ticks[1] > 0 && ticks[2] === 2 * ticks[1], `${c.name}: y ticks 0, top/2, top: ${c.y}`);
		for (const [series, label] of c.legend) assert.match(label, new RegExp(`^${series} ([\\d.]+|–) ${c.unit.replace('/', '\\/')}$`), c.name);
		// each line is drawn in its legend's colour, within the frame: the y axis reaches every value
		for (const [series, stroke, pts] of c.lines) {
			assert.equal(stroke, c.legend.find(([s]) => s === series)[2], `${c.name}/${series}: the legend's colour`);
			for (const [x, y] of pts) assert.ok(x >= c.box.x - 0.1 && x <= c.box.x + c.box.w + 0.1 && y >= c.box.y - 0.1 && y <= c.box.y + c.box.h + 0.1, `${c.name}/${series}: (${x}, ${y}) inside`);
		}
	}
	assert.deepEqual(charts[0].legend.map(([s]) => s), ['decode', 'prompt']);
	assert.deepEqual(charts[1].legend.map(([s]) => s), ['rounds']);
	await page.screenshot({ path: path.join(TMP, 'webui-charts.png') });
	await page.close();
});

test('a 200-message conversation loads (figures printed, not asserted)', { skip: why || false }, async (t) => {
	const page = await browser.newPage();
	await page.goto(srv.url + '/');
	await page.evaluate(() => {
		const messages = [];
		for (let i = 0; i < 200; i++) messages.push({ role: i % 2 ? 'assistant' : 'user', content: `message ${i}: ` + 'Once upon a time there was a little dog. '.repeat(8) + '\n\n```\ncode ' + i + '\n```' });
		localStorage.setItem('lanes.conversations', JSON.stringify([{ id: 'big', title: 'big', messages }]));
	});
	const t0 = Date.now();
	await page.reload({ waitUntil: 'load' });
	await page.waitForFunction(() => document.querySelectorAll('#messages .msg').length === 200);
	const ms = Date.now() - t0;
	const m = await page.metrics();
	t.diagnostic(`200 messages: load ${ms} ms, JS heap ${(m.JSHeapUsedSize / 1048576).toFixed(1)} MiB, ${m.Nodes} DOM nodes`);
	await page.close();
});

test('--no-webui: GET / is 404, the API still answers', async () => {
	const s = await startServer(['-m', STORIES, '--no-webui']);
	try {
		assert.equal((await fetch(s.url + '/')).status, 404);
		assert.equal((await fetch(s.url + '/ui/app.js')).status, 404);
		assert.equal((await fetch(s.url + '/v1/models')).status, 200);
	} finally {
		s.proc.kill('SIGKILL');
	}
});

test('the page is served with a strict Content-Security-Policy', async () => {
	const s = await startServer(['-m', STORIES]);
	try {
		const r = await fetch(s.url + '/');
		assert.equal(r.status, 200);
		assert.match(r.headers.get('content-type'), /text\/html/);
		assert.match(r.headers.get('content-security-policy'), /script-src 'self'/);
		assert.match(await r.text(), /<script src="\/ui\/app.js"><\/script>/);
		assert.match((await fetch(s.url + '/ui/app.js')).headers.get('content-type'), /javascript/);
	} finally {
		s.proc.kill('SIGKILL');
	}
});
