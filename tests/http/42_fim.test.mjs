// Fill-in-the-middle: llama-server's POST /infill, OpenAI completions' suffix and Ollama
// generate's suffix on a model over Qwen2's vocabulary (FIM, repository and file tokens). The
// prompt each assembles is checked by its tokens: greedy output equals /v1/completions given
// the ids built here in llama-server's order. A model without the tokens gets a 400 naming them.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { startServer, mainServer, agentModel, postJSON, readSSE, KEY } from './lib.mjs';

let fim, plain;
before(async () => {
	fim = await startServer(['-m', agentModel(), '--api-key', KEY]);
	plain = (await mainServer()).url;
});
after(() => fim && fim.proc.kill('SIGKILL'));

const auth = { Authorization: `Bearer ${KEY}` };
const post = (url, p, body) => postJSON(url + p, body, auth);

async function ids(text, special = false) {
	const r = await post(fim.url, '/tokenize', { content: text, add_special: false, parse_special: special });
	assert.equal(r.status, 200, JSON.stringify(r.body));
	return r.body.tokens;
}

// Greedy, through the end-of-generation tokens, so every prompt gives eight tokens to compare.
const greedy = { temperature: 0, ignore_eos: true, seed: 1 };

async function completion(prompt) {
	const r = await post(fim.url, '/v1/completions', { prompt, max_tokens: 8, ...greedy });
	assert.equal(r.status, 200, JSON.stringify(r.body));
	return r.body.choices[0];
}

const prefix = 'def add(a, b):\n    ', suffix = '\n\nprint(add(1, 2))\n', typed = 'return';

test('/infill: the prompt in llama-server\'s order, generated as a completion of those ids', async () => {
	const [PRE, SUF, MID, REP, SEP] = (await ids('<|fim_prefix|><|fim_suffix|><|fim_middle|><|repo_name|><|file_sep|>', true));
	const want = [REP, ...(await ids('myproject\n')), SEP, ...(await ids('util.py\n')), ...(await ids('import os\n')),
		SEP, ...(await ids('tmp\n')), ...(await ids('x = 1\n')), SEP, ...(await ids('filename\n')),
		PRE, ...(await ids(prefix)), ...(await ids(typed, true)), SUF, ...(await ids(suffix)), MID];
	const r = await post(fim.url, '/infill', {
		input_prefix: prefix, input_suffix: suffix, prompt: typed, n_predict: 8, ...greedy,
		input_extra: [{ filename: 'util.py', text: 'import os\n', time: 12 }, { text: 'x = 1\n' }],
	});
	assert.equal(r.status, 200, JSON.stringify(r.body));
	const b = r.body;
	assert.equal(b.tokens_evaluated, want.length);
	assert.equal(b.tokens_predicted, 8);
	assert.equal(b.stop, true);
	assert.equal(b.stop_type, 'limit');
	assert.equal(typeof b.content, 'string');
	assert.ok(b.timings && b.timings.predicted_n === 8, JSON.stringify(b.timings));
	const c = await completion(want);
	assert.equal(b.token_sha, c.token_sha, 'the same tokens as a completion of the assembled ids');
	assert.equal(b.content, c.text);
	// no files: the repository framing stays (llama-server writes it for every /infill)
	const r2 = await post(fim.url, '/infill', { input_prefix: prefix, input_suffix: suffix, n_predict: 8, ...greedy });
	const want2 = [REP, ...(await ids('myproject\n')), SEP, ...(await ids('filename\n')), PRE, ...(await ids(prefix)), SUF,
		...(await ids(suffix)), MID];
	assert.equal(r2.body.tokens_evaluated, want2.length);
	assert.equal(r2.body.token_sha, (await completion(want2)).token_sha);
});

test('/infill: prompt as token ids, as ids and strings, or a one-element list gives the bits of its text', async () => {
	const base = { input_prefix: prefix, input_suffix: suffix, n_predict: 8, ...greedy };
	const typed2 = 'return a +';
	const text = await post(fim.url, '/infill', { ...base, prompt: typed2 });
	assert.equal(text.status, 200, JSON.stringify(text.body));
	const tok = await ids(typed2, true);
	assert.ok(tok.length >= 2, `typed text of several tokens (${tok.length})`);
	for (const prompt of [tok, [tok], [...(await ids('return', true)), ...(await ids(' a +', true))], ['return', ...(await ids(' a +', true))], ['', ...tok, '']]) {
		const r = await post(fim.url, '/infill', { ...base, prompt });
		assert.equal(r.status, 200, JSON.stringify(r.body));
		assert.equal(r.body.tokens_evaluated, text.body.tokens_evaluated, JSON.stringify(prompt));
		assert.equal(r.body.token_sha, text.body.token_sha, JSON.stringify(prompt));
		assert.equal(r.body.content, text.body.content);
	}
	// special tokens typed in a string are parsed, as in a text prompt
	const [MID] = await ids('<|fim_middle|>', true);
	const s1 = await post(fim.url, '/infill', { ...base, prompt: '<|fim_middle|>' });
	const s2 = await post(fim.url, '/infill', { ...base, prompt: [MID] });
	assert.equal(s1.body.token_sha, s2.body.token_sha);
	// an empty list is no typed text
	const none = await post(fim.url, '/infill', base);
	const empty = await post(fim.url, '/infill', { ...base, prompt: [] });
	assert.equal(empty.status, 200);
	assert.equal(empty.body.token_sha, none.body.token_sha);
	assert.equal(empty.body.tokens_evaluated, none.body.tokens_evaluated);
});

test('/infill streams llama-server\'s events: content pieces, then one that says stop, and no [DONE]', async () => {
	const body = { input_prefix: prefix, input_suffix: suffix, n_predict: 8, ...greedy };
	const whole = (await post(fim.url, '/infill', body)).body;
	const res = await fetch(`${fim.url}/infill`, { method: 'POST', headers: { ...auth, 'Content-Type': 'application/json' },
		body: JSON.stringify({ ...body, stream: true }) });
	assert.equal(res.status, 200);
	assert.match(res.headers.get('content-type'), /text\/event-stream/);
	const events = await readSSE(res);
	assert.ok(events.every((e) => typeof e.data === 'object'), 'every event is JSON');
	const last = events.at(-1).data;
	assert.equal(last.stop, true);
	assert.equal(last.token_sha, whole.token_sha);
	assert.ok(events.slice(0, -1).every((e) => e.data.stop === false));
	assert.equal(events.map((e) => e.data.content).join(''), whole.content);
});

test('OpenAI suffix and Ollama suffix: prefix, suffix and middle tokens, no framing', async () => {
	const [PRE, SUF, MID] = await ids('<|fim_prefix|><|fim_suffix|><|fim_middle|>', true);
	const want = [PRE, ...(await ids(prefix)), SUF, ...(await ids(suffix)), MID];
	const c = await completion(want);
	const o = await post(fim.url, '/v1/completions', { prompt: prefix, suffix, max_tokens: 8, ...greedy });
	assert.equal(o.status, 200, JSON.stringify(o.body));
	assert.equal(o.body.usage.prompt_tokens, want.length);
	assert.equal(o.body.choices[0].token_sha, c.token_sha);
	assert.equal(o.headers.get('x-lanes-ignored'), null, 'suffix is honoured');
	// Ollama ends at the end of generation: compare with a completion that does too
	const c2 = (await post(fim.url, '/v1/completions', { prompt: want, max_tokens: 8, temperature: 0 })).body.choices[0];
	const g = await post(fim.url, '/api/generate', { model: 'agent', prompt: prefix, suffix, stream: false,
		options: { temperature: 0, num_predict: 8, repeat_penalty: 1 } });
	assert.equal(g.status, 200, JSON.stringify(g.body));
	assert.equal(g.body.token_sha, c2.token_sha);
	assert.equal(g.body.response, c2.text);
	const id = (await (await fetch(`${fim.url}/v1/models`)).json()).data[0].id;
	const show = await post(fim.url, '/api/show', { model: id });
	assert.ok(show.body.capabilities.includes('insert'), JSON.stringify(show.body.capabilities));
});

test('a model without FIM tokens: 400 naming them; bad /infill fields: 400 naming the field', async () => {
	const r = await post(plain, '/infill', { input_prefix: 'a', input_suffix: 'b' });
	assert.equal(r.status, 400);
	assert.match(r.body.error.message, /no fill-in-the-middle tokens \(missing: prefix, suffix, middle\)/);
	const o = await post(plain, '/v1/completions', { prompt: 'Once', suffix: 'end', max_tokens: 2 });
	assert.equal(o.status, 400);
	assert.equal(o.body.error.param, 'suffix');
	assert.match(o.body.error.message, /fill-in-the-middle/);
	const g = await post(plain, '/api/generate', { model: 'stories260K', prompt: 'Once', suffix: 'end', stream: false });
	assert.equal(g.status, 400);
	assert.match(g.body.error, /fill-in-the-middle/);
	const show = await post(plain, '/api/show', { model: 'stories260K' });
	assert.ok(!show.body.capabilities.includes('insert'));
	// an empty suffix is a plain completion
	assert.equal((await post(plain, '/v1/completions', { prompt: 'Once', suffix: '', max_tokens: 2 })).status, 200);
	for (const [body, param] of [
		[{ input_extra: 'x' }, 'input_extra'],
		[{ input_extra: [{ filename: 'a' }] }, 'input_extra[0]'],
		[{ input_extra: [{ text: 'a', filename: 3 }] }, 'input_extra[0]'],
		[{ input_prefix: 3 }, 'input_prefix'],
		[{ prompt: 3 }, 'prompt'],
		[{ prompt: ['a', 1e9] }, 'prompt[1]'],
		[{ prompt: [-1] }, 'prompt[0]'],
		[{ prompt: [1.5] }, 'prompt[0]'],
		[{ prompt: [{}] }, 'prompt[0]'],
		[{ max_tokens: 0 }, 'max_tokens'],
		[{ nonsense: 1 }, 'nonsense'],
	]) {
		const b = await post(fim.url, '/infill', { input_prefix: 'a', input_suffix: 'b', ...body });
		assert.equal(b.status, 400, JSON.stringify(body));
		assert.equal(b.body.error.param, param, JSON.stringify(b.body));
	}
	// what lanes does not run is named; the samplers it runs are not
	const n = await post(fim.url, '/infill', { input_prefix: 'a', input_suffix: 'b', n_predict: 1, samplers: ['top_k'], t_max_predict_ms: 500, n_probs: 2 });
	assert.equal(n.status, 200);
	assert.deepEqual(n.headers.get('x-lanes-ignored').split(','), ['n_probs', 't_max_predict_ms']);
	// llama-server's samplers change an infill as they change a completion
	const base = { input_prefix: 'def add(a, b):\n    return ', input_suffix: '\n', n_predict: 8, temperature: 1, seed: 7 };
	const noXtc = await post(fim.url, '/infill', base);
	const xtc = await post(fim.url, '/infill', { ...base, xtc_probability: 1, xtc_threshold: 0.01 });
	assert.equal(xtc.status, 200);
	assert.equal(xtc.headers.get('x-lanes-ignored'), null);
	assert.notEqual(xtc.body.content, noXtc.body.content, 'XTC ran on /infill');
});
