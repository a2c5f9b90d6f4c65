// The first chat on the default model: stories260K has no chat template and no ChatML tokens,
// so chat turns reach it as plain text. The README's chat `curl`, sent as written, gives the
// same tokens as a completion of the user's text with the same seed; /props and Ollama's
// /api/show name the template in use; turns join with a space only where the text needs one;
// a request with no limit stops at --max-tokens' default; and the page's chat and its
// completion mode (headless Chromium, when installed) give that same text.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import { mainServer, postJSON, getJSON } from './lib.mjs';

// The body of the README's first chat `curl`: the -d '...' after /v1/chat/completions.
function readmeChat() {
	const text = fs.readFileSync(new URL('../../README.md', import.meta.url), 'utf8').replace(/\\\n\s*/g, ' ');
	const line = text.split('\n').find((l) => /^curl \S+\/v1\/chat\/completions /.test(l));
	assert.ok(line, 'the README has a chat curl line');
	const m = line.match(/ -d '([^']*)'/);
	assert.ok(m, `the README's chat curl sends a body: ${line}`);
	assert.doesNotMatch(line, /"model"\s*:/, 'the README chats with the default model');
	return JSON.parse(m[1]);
}

test("the README's chat curl gives the completion of the user's text, token for token", async () => {
	const { url } = await mainServer();
	const body = readmeChat();
	const chat = await postJSON(`${url}/v1/chat/completions`, body);
	assert.equal(chat.status, 200, JSON.stringify(chat.body));
	const prompt = body.messages.at(-1).content;
	const seed = chat.body.seed;
	assert.equal(typeof seed, 'number', 'the reply names the seed it drew');
	const done = await postJSON(`${url}/v1/completions`, { prompt, max_tokens: body.max_tokens, seed });
	assert.equal(done.status, 200);
	const c = chat.body.choices[0], d = done.body.choices[0];
	assert.equal(c.token_sha, d.token_sha, 'the same tokens');
	assert.equal(c.message.content, d.text);
	assert.equal(chat.body.usage.prompt_tokens, done.body.usage.prompt_tokens);
	assert.ok(c.message.content.length > 0);
});

test('/props and /api/show name the plain template in use', async () => {
	const { url } = await mainServer();
	const props = (await getJSON(`${url}/props`)).body;
	assert.equal(props.chat_template_origin, 'plain text');
	assert.doesNotMatch(props.chat_template, /im_start/);
	const show = await postJSON(`${url}/api/show`, { model: 'stories260K' });
	assert.equal(show.status, 200);
	assert.equal(show.body.template, props.chat_template, 'Ollama reports the template that renders');
});

test('turns join as text: a space only where neither side has one and no punctuation follows', async () => {
	const { url } = await mainServer();
	const tokens = async (b) => (await postJSON(`${url}/tokenize`, b)).body.tokens;
	const messages = [
		{ role: 'user', content: 'Once upon a time' },
		{ role: 'assistant', content: ', there was a cat.' },
		{ role: 'user', content: 'It liked milk' },
		{ role: 'assistant', content: ' and fish.' },
	];
	const want = await tokens({ content: 'Once upon a time, there was a cat. It liked milk and fish.', add_special: true, parse_special: true });
	assert.deepEqual(await tokens({ messages }), want);
});

test('a chat request with no limit stops at --max-tokens (1024 by default)', async () => {
	const { url } = await mainServer();
	const r = await postJSON(`${url}/v1/chat/completions`, { messages: [{ role: 'user', content: 'Once upon a time' }], seed: 3, ignore_eos: true });
	assert.equal(r.status, 200);
	assert.equal(r.body.choices[0].finish_reason, 'length');
	assert.equal(r.body.usage.completion_tokens, 1024);
});

const CHROMIUM = ['/usr/bin/chromium', '/usr/bin/chromium-browser'].find((p) => fs.existsSync(p));
let puppeteer = null;
try { puppeteer = (await import('puppeteer-core')).default; } catch { /* skipped below */ }
const why = !CHROMIUM ? 'no chromium (apt-get install chromium)' : !puppeteer ? 'no puppeteer-core (npm ci)' : null;

test("the page's chat and its completion mode give the completion's text", { skip: why || false }, async () => {
	const { url } = await mainServer();
	const prompt = 'Once upon a time', seed = 11, max_tokens = 48;
	const want = (await postJSON(`${url}/v1/completions`, { prompt, max_tokens, seed, temperature: 0.8, top_p: 0.95 })).body.choices[0].text;
	const browser = await puppeteer.launch({ executablePath: CHROMIUM, headless: true, args: ['--no-sandbox', '--disable-gpu'] });
	try {
		for (const mode of ['chat', 'completion']) {
			const page = await browser.newPage();
			await page.goto(url + '/');
			await page.evaluate((key) => localStorage.clear() || localStorage.setItem('lanes.apikey', key), process.env.LANES_KEY || 'test-key');
			await page.goto(url + '/');
			await page.select('#mode', mode);
			const set = (id, v) => page.$eval(id, (e, x) => { e.value = x; }, String(v));
			await set('#seed', seed);
			await set('#max_tokens', max_tokens);
			await set('#temperature', 0.8);
			await set('#top_p', 0.95);
			await page.type('#input', prompt);
			await page.keyboard.press('Enter');
			// the reply is over when the conversation holds it with its stats line
			await page.waitForFunction(() => {
				const c = JSON.parse(localStorage.getItem('lanes.conversations') || '[]')[0];
				const m = c && c.messages.at(-1);
				return m && m.role === 'assistant' && m.stats;
			}, { timeout: 60000 });
			const got = await page.evaluate(() => JSON.parse(localStorage.getItem('lanes.conversations'))[0].messages.at(-1));
			assert.doesNotMatch(got.stats, /error|stopped/, `${mode}: ${got.stats}`);
			assert.equal(got.content, want, `${mode}: the page's reply is the completion's text`);
			await page.close();
		}
	} finally {
		await browser.close();
	}
});
