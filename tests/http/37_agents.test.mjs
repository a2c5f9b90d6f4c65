// Real agents, unchanged: Claude Code (`claude -p`), Codex CLI (`codex exec`), the OpenAI Agents
// SDK, the AI SDK's generateObject and LangChain's ChatOllama, each pointed at lanes with only a
// base URL, a key and a model name, against the agents' model (agentModel: a long window, and
// an end token it picks, so turns end as a trained model's do). Each must finish its turn.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { startServer, agentModel, postJSON, KEY, TMP } from './lib.mjs';

const BINS = path.resolve('node_modules/.bin');
// the AI SDK and LangChain need Node.js 20 or newer (their packages say so); Debian 12's is 18
const modern = Number(process.versions.node.split('.')[0]) >= 20;
const modernTest = (name, fn) => test(name, (t) => (modern ? fn(t) : t.skip(`Node.js ${process.versions.node}: these clients need 20 or newer`)));
let srv;

before(async () => {
	srv = await startServer(['-m', agentModel(), '--api-key', KEY, '--lanes', '2', '--ctx', '131072']);
});
after(() => srv && srv.proc.kill('SIGKILL'));

// Runs a client's command to its end; resolves with its exit code and output. Never waits past limitMs.
function runClient(cmd, args, env, limitMs = 240000) {
	const home = fs.mkdtempSync(path.join(TMP, 'home-'));
	return new Promise((resolve) => {
		const p = spawn(cmd, args, {
			cwd: home,
			env: { PATH: process.env.PATH, HOME: home, TERM: 'dumb', ...env },
			stdio: ['ignore', 'pipe', 'pipe'],
		});
		let out = '';
		p.stdout.on('data', (d) => (out += d));
		p.stderr.on('data', (d) => (out += d));
		const t = setTimeout(() => p.kill('SIGKILL'), limitMs);
		p.on('exit', (code, signal) => {
			clearTimeout(t);
			resolve({ code, signal, out, home });
		});
	});
}

test('the agents model ends its turns: a stop within a few tokens, not the length cap', async () => {
	const r = await postJSON(`${srv.url}/v1/chat/completions`, { model: 'agent', messages: [{ role: 'user', content: 'hi' }], max_tokens: 64, temperature: 0 });
	assert.equal(r.status, 200, JSON.stringify(r.body));
	assert.equal(r.body.choices[0].finish_reason, 'stop');
	assert.ok(r.body.usage.completion_tokens < 64);
});

test('Claude Code: `claude -p` with only ANTHROPIC_BASE_URL, a key and --model finishes, exit 0', async () => {
	const r = await runClient(path.join(BINS, 'claude'), ['-p', 'Say hello.', '--model', 'agent'], {
		ANTHROPIC_BASE_URL: srv.url,
		ANTHROPIC_API_KEY: KEY,
		DISABLE_AUTOUPDATER: '1',
		DISABLE_TELEMETRY: '1',
		DISABLE_ERROR_REPORTING: '1',
		CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC: '1',
	});
	assert.equal(r.code, 0, `claude exited ${r.code} (${r.signal}):\n${r.out.slice(-3000)}\n${srv.log().slice(-3000)}`);
	assert.doesNotMatch(r.out, /API Error/);
});

test('Codex CLI: `codex exec` with a custom Responses provider finishes, exit 0', async () => {
	const provider = `model_providers.lanes={name="lanes",base_url="${srv.url}/v1",env_key="LANES_AGENT_KEY",wire_api="responses"}`;
	const r = await runClient(path.join(BINS, 'codex'), ['exec', '--skip-git-repo-check', '-c', 'model_provider=lanes', '-c', provider, '-m', 'agent', 'Say hello.'], {
		LANES_AGENT_KEY: KEY,
		CODEX_HOME: fs.mkdtempSync(path.join(TMP, 'codex-')),
	});
	assert.equal(r.code, 0, `codex exited ${r.code} (${r.signal}):\n${r.out.slice(-3000)}\n${srv.log().slice(-3000)}`);
	assert.doesNotMatch(r.out, /^ERROR/m);
});

test('OpenAI Agents SDK: an agent with tools and an output type finishes on both APIs', async () => {
	const { Agent, run, tool, setDefaultOpenAIClient, setOpenAIAPI, setTracingDisabled } = await import('@openai/agents');
	const { default: OpenAI } = await import('openai');
	const { z } = await import('zod');
	setTracingDisabled(true);
	setDefaultOpenAIClient(new OpenAI({ baseURL: `${srv.url}/v1`, apiKey: KEY, maxRetries: 0 }));
	const weather = tool({ name: 'get_weather', description: 'The weather in a city', parameters: z.object({ city: z.string().max(12) }), execute: async ({ city }) => `sunny in ${city}` });
	const Report = z.object({ city: z.string().max(12), sunny: z.boolean() });
	for (const api of ['chat_completions', 'responses']) {
		setOpenAIAPI(api);
		const agent = new Agent({ name: 'reporter', instructions: 'Report the weather.', model: 'agent', tools: [weather], outputType: Report, modelSettings: { maxTokens: 200, temperature: 0 } });
		const res = await run(agent, 'Is it sunny in Paris?', { maxTurns: 4 });
		assert.ok(Report.safeParse(res.finalOutput).success, `${api}: ${JSON.stringify(res.finalOutput)}`);
	}
});

modernTest("AI SDK: generateObject over zod's common types gives a valid object", async () => {
	const { generateObject } = await import('ai');
	const { createOpenAI } = await import('@ai-sdk/openai');
	const { z } = await import('zod');
	const { default: Ajv } = await import('ajv');
	const sent = [];
	const record = (url, init) => (sent.push(JSON.parse(init.body)), fetch(url, init));
	const openai = createOpenAI({ baseURL: `${srv.url}/v1`, apiKey: KEY, fetch: record });
	// bounded, as a random model needs them to be: it stops where the grammar lets it
	const schema = z.object({
		site: z.url().max(40),
		mail: z.email().max(40),
		id: z.uuid(),
		at: z.iso.datetime(),
		step: z.number().int().multipleOf(5).min(0).max(100),
		pair: z.tuple([z.string().max(6), z.boolean()]),
		shape: z.discriminatedUnion('kind', [z.object({ kind: z.literal('circle'), r: z.number().int().max(9) }), z.object({ kind: z.literal('square'), side: z.number().int().max(9) })]),
	});
	for (const model of [openai.chat('agent'), openai.responses('agent')]) {
		const r = await generateObject({ model, schema, prompt: 'Make one.', maxOutputTokens: 600, maxRetries: 0, seed: 1 });
		assert.ok(schema.safeParse(r.object).success, JSON.stringify(r.object));
	}
	// a record keyed by an enum: the SDK's draft-07 schema drops propertyNames, so the reply is held
	// to the schema it sent (zod may then refuse keys the sent schema let in); on chat, whose seed
	// the SDK passes (its Responses model drops it), so the keys the model adds are the same each run
	const tags = z.object({ tags: z.record(z.enum(['red', 'blue']), z.number().int().max(9)) });
	const ajv = new Ajv({ strict: false });
	for (const model of [openai.chat('agent')]) {
		sent.length = 0;
		const text = await generateObject({ model, schema: tags, prompt: 'Make one.', maxOutputTokens: 600, maxRetries: 0, seed: 1 })
			.then((r) => JSON.stringify(r.object), (e) => e.text);
		const body = sent.at(-1);
		const { $schema, ...js } = body.response_format?.json_schema.schema ?? body.text.format.schema;
		assert.ok(ajv.validate(js, JSON.parse(text)), `${text}: ${ajv.errorsText(ajv.errors)}`);
	}
});

modernTest("LangChain: ChatOllama with bindTools answers, its calls well formed", async () => {
	const { ChatOllama } = await import('@langchain/ollama');
	const { z } = await import('zod');
	const llm = new ChatOllama({ baseUrl: srv.url, model: 'agent', numPredict: 64, headers: { Authorization: `Bearer ${KEY}` } });
	const withTools = llm.bindTools([{ name: 'get_weather', description: 'The weather in a city', schema: z.object({ city: z.string() }) }]);
	const msg = await withTools.invoke('Is it sunny in Paris?');
	assert.equal(typeof msg.content, 'string');
	for (const c of msg.tool_calls || []) {
		assert.equal(c.name, 'get_weather');
		assert.equal(typeof c.args.city, 'string');
	}
});
