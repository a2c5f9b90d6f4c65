// The samplers people tune, by llama-server's names: DRY, XTC, top-nσ, mirostat, dynamic
// temperature and the samplers' order are accepted on chat, completions, messages and responses
// and in Ollama's options, each changes the reply, the same request gives the same reply, and a
// bad value is a 400 naming the field; lanes serve's flags set the samplers a request starts from.
import { test, before } from 'node:test';
import assert from 'node:assert/strict';
import { mainServer, postJSON, postSSE, startServer, STORIES, KEY } from './lib.mjs';

let url;
before(async () => {
	({ url } = await mainServer());
});

const base = { temperature: 1, seed: 11, max_tokens: 32, ignore_eos: true };
const user = [{ role: 'user', content: 'Once upon a time' }];
const on = {
	dry: { dry_multiplier: 4, dry_allowed_length: 1, dry_sequence_breakers: ['\n'] },
	xtc: { xtc_probability: 1, xtc_threshold: 0.02 },
	top_n_sigma: { top_n_sigma: 0.3 },
	mirostat: { mirostat: 2, mirostat_tau: 1, mirostat_eta: 0.5 },
	mirostat1: { mirostat: 1, mirostat_tau: 1 },
	dynatemp: { dynatemp_range: 1, dynatemp_exponent: 0.5 },
	samplers: { samplers: ['top_k', 'temperature'], top_k: 1 },
};

async function chat(extra, at = url) {
	const r = await postJSON(`${at}/v1/chat/completions`, { messages: user, ...base, ...extra });
	assert.equal(r.status, 200, JSON.stringify(r.body));
	return r.body.choices[0].message.content;
}

async function complete(extra) {
	const r = await postJSON(`${url}/v1/completions`, { prompt: 'Once upon a time', ...base, ...extra });
	assert.equal(r.status, 200, JSON.stringify(r.body));
	return r.body.choices[0].text;
}

test('each sampler changes the chat and completions replies, and the same request gives the same reply', async () => {
	for (const call of [chat, complete]) {
		const plain = await call({});
		for (const [name, fields] of Object.entries(on)) {
			const a = await call(fields);
			assert.notEqual(a, plain, `${call.name} ${name}: the reply changes`);
			assert.equal(await call(fields), a, `${call.name} ${name}: repeatable`);
		}
	}
});

test('with every sampler on, each choice is the same streamed, beside another and undrafted', async () => {
	const all = { ...on.dry, xtc_probability: 0.5, xtc_threshold: 0.1, top_n_sigma: 3, ...on.dynatemp, samplers: 'edsktpmx', top_k: 20 };
	for (const extra of [all, { ...on.mirostat, ...on.dry }]) {
		const body = { prompt: 'Once upon a time', ...base, ...extra, n: 2 };
		const whole = await postJSON(`${url}/v1/completions`, body);
		assert.equal(whole.status, 200, JSON.stringify(whole.body));
		const text = [0, 1].map((i) => whole.body.choices.find((c) => c.index === i).text);
		assert.notEqual(text[0], text[1], 'two choices draw apart');
		const sse = await postSSE(`${url}/v1/completions`, { ...body, stream: true });
		const streamed = ['', ''];
		for (const e of sse.events) for (const c of (e.data && e.data.choices) || []) streamed[c.index] += c.text || '';
		assert.deepEqual(streamed, text, 'streamed = whole');
		const solo = await postJSON(`${url}/v1/completions`, { ...body, n: 1, draft: false });
		assert.equal(solo.body.choices[0].text, text[0], 'one choice alone, undrafted = the first of two');
	}
});

test('the samplers\' order: names and letters alike, and a stage left out is off', async () => {
	const names = await chat({ samplers: ['top_k', 'temperature'], top_k: 1 });
	assert.equal(await chat({ samplers: 'kt', top_k: 1 }), names);
	assert.notEqual(await chat({ samplers: 't', top_k: 1 }), names);
	// greedy by top-k 1 is the reply at temperature 0
	assert.equal(names, await chat({ temperature: 0 }));
});

test('accepted on messages and responses too', async () => {
	const m = await postJSON(`${url}/v1/messages`, { model: 'x', max_tokens: 16, messages: user, ...on.mirostat, ...on.dry },
		{ 'anthropic-version': '2023-06-01' });
	assert.equal(m.status, 200, JSON.stringify(m.body));
	const r = await postJSON(`${url}/v1/responses`, { input: 'Once upon a time', max_output_tokens: 16, ...on.xtc, ...on.top_n_sigma });
	assert.equal(r.status, 200, JSON.stringify(r.body));
});

test('Ollama\'s mirostat options are honoured', async () => {
	const opts = { temperature: 1, seed: 11, num_predict: 32 };
	const gen = async (o) => {
		const r = await postJSON(`${url}/api/generate`, { model: 'stories260K', prompt: 'Once upon a time', stream: false, options: { ...opts, ...o } });
		assert.equal(r.status, 200, JSON.stringify(r.body));
		assert.equal(r.headers.get('x-lanes-ignored'), null);
		return r.body.response;
	};
	const plain = await gen({});
	const miro = await gen({ mirostat: 2, mirostat_tau: 1, mirostat_eta: 0.5 });
	assert.notEqual(miro, plain);
	assert.notEqual(await gen({ mirostat: 2, mirostat_tau: 8, mirostat_eta: 0.5 }), miro, 'tau changes it');
	assert.equal(await gen({ mirostat: 2, mirostat_tau: 1, mirostat_eta: 0.5 }), miro);
	const bad = await postJSON(`${url}/api/generate`, { model: 'stories260K', prompt: 'x', options: { mirostat_eta: -1 } });
	assert.equal(bad.status, 400);
	assert.match(bad.body.error, /mirostat_eta/);
});

test('a bad value is a 400 naming the field', async () => {
	const bad = [
		[{ xtc_probability: 2 }, 'xtc_probability'],
		[{ xtc_threshold: -0.1 }, 'xtc_threshold'],
		[{ mirostat: 3 }, 'mirostat'],
		[{ mirostat_tau: -1 }, 'mirostat_tau'],
		[{ dry_base: 0.5 }, 'dry_base'],
		[{ dry_multiplier: -1 }, 'dry_multiplier'],
		[{ dry_allowed_length: -1 }, 'dry_allowed_length'],
		[{ dry_penalty_last_n: -2 }, 'dry_penalty_last_n'],
		[{ dry_sequence_breakers: 'x' }, 'dry_sequence_breakers'],
		[{ dry_multiplier: 1, dry_sequence_breakers: [''] }, 'dry_sequence_breakers'],
		[{ top_n_sigma: 1000 }, 'top_n_sigma'],
		[{ dynatemp_range: -1 }, 'dynatemp_range'],
		[{ dynatemp_exponent: 'hot' }, 'dynatemp_exponent'],
		[{ samplers: ['top_k', 'nonsense'] }, 'samplers'],
		[{ samplers: 'kq' }, 'samplers'],
		[{ samplers: 7 }, 'samplers'],
		[{ samplers: 'kkkkkkkkkkkkkkkkk' }, 'samplers'],
		[{ samplers: [] }, 'samplers'],
		[{ samplers: '' }, 'samplers'],
	];
	for (const [fields, param] of bad) {
		for (const path of ['/v1/chat/completions', '/v1/completions']) {
			const body = path === '/v1/completions' ? { prompt: 'x', ...fields } : { messages: user, ...fields };
			const r = await postJSON(`${url}${path}`, body);
			assert.equal(r.status, 400, `${path} ${JSON.stringify(fields)}`);
			assert.equal(r.body.error.param, param, `${path} ${JSON.stringify(fields)}: ${r.body.error.message}`);
			assert.match(r.body.error.message, new RegExp(param));
		}
	}
});

test('serve\'s flags are the samplers every request starts from; a request\'s own field wins; a bad flag is refused', async () => {
	const srv = await startServer(['-m', STORIES, '--api-key', KEY, '--mirostat', '2', '--mirostat-ent', '1', '--mirostat-lr', '0.5',
		'--dry-multiplier', '4', '--dry-allowed-length', '1', '--dry-sequence-breaker', '\n', '--sampling-seq', 'edkypmxt']);
	try {
		const both = { ...on.mirostat, ...on.dry, samplers: 'edkypmxt' };
		assert.equal(await chat({}, srv.url), await chat(both), 'the flags as the fields');
		assert.equal(await chat({ mirostat: 0, dry_multiplier: 0, samplers: 'edskypmxt' }, srv.url), await chat({}), 'the fields win');
	} finally {
		srv.proc.kill('SIGKILL');
	}
	for (const [flags, says] of [[['--samplers', 'top_k;nonsense'], /--samplers/], [['--mirostat', '3'], /--mirostat/],
		[['--xtc-threshold', '2'], /--xtc-threshold/]]) {
		await assert.rejects(startServer(['-m', STORIES, ...flags]), says);
	}
});
