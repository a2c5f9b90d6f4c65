// tests/http: the hostile-input generator and its raw-socket client. makeCase(seed, i) is the
// same case for a seed and index: a mutated body for one API, a raw HTTP edge case or a client
// that vanishes; send() plays it on its own connection and parses every reply it gets.
// Requests name Host 127.0.0.1 except in the cases about Host itself.
import net from 'node:net';

// mulberry32: small, fast and the same on every Node.js
export function prng(seed) {
	let a = seed >>> 0;
	const next = () => {
		a = (a + 0x6d2b79f5) >>> 0;
		let t = a;
		t = Math.imul(t ^ (t >>> 15), t | 1);
		t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
		return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
	};
	const int = (lo, hi) => lo + Math.floor(next() * (hi - lo + 1));
	const pick = (xs) => xs[Math.floor(next() * xs.length)];
	return { next, int, pick, chance: (p) => next() < p };
}

// Case families that reach known defects, skipped unless LANES_HOSTILE_ALL is 1 or names them.
// Each says what the server does today.
export const KNOWN = {};

export const KEY = 'test-key';

const API = {
	chat: { path: '/v1/chat/completions', shape: 'openai', gen: true },
	completions: { path: '/v1/completions', shape: 'openai', gen: true },
	messages: { path: '/v1/messages', shape: 'anthropic', gen: true },
	responses: { path: '/v1/responses', shape: 'openai', gen: true },
	tokenize: { path: '/tokenize', shape: 'openai' },
	detokenize: { path: '/detokenize', shape: 'openai' },
	embeddings: { path: '/v1/embeddings', shape: 'openai' },
	count_tokens: { path: '/v1/messages/count_tokens', shape: 'anthropic' },
	ollama_chat: { path: '/api/chat', shape: 'ollama', gen: true },
	ollama_generate: { path: '/api/generate', shape: 'ollama', gen: true },
	ollama_embed: { path: '/api/embed', shape: 'ollama' },
	infill: { path: '/infill', shape: 'openai', gen: true },
	slot_save: { path: '/slots/0?action=save', shape: 'openai' },
	slot_restore: { path: '/slots/1?action=restore', shape: 'openai' },
};

function base(api, r) {
	const mt = r.int(1, 4);
	const text = r.pick(['Once upon a time', 'Hi', 'The cat sat', 'Lily went to the park']);
	switch (api) {
		case 'chat':
			return { messages: [{ role: 'user', content: text }], max_tokens: mt };
		case 'completions':
			return { prompt: text, max_tokens: mt };
		case 'messages':
			return { max_tokens: mt, messages: [{ role: 'user', content: text }] };
		case 'responses':
			return { input: text, max_output_tokens: mt };
		case 'tokenize':
			return { content: text };
		case 'detokenize':
			return { tokens: [1, 2, 3, 400] };
		case 'embeddings':
			return { input: r.chance(0.5) ? text : [text, 'Hi'] };
		case 'count_tokens':
			return { messages: [{ role: 'user', content: text }] };
		case 'ollama_chat':
			return { model: 'stories260K', messages: [{ role: 'user', content: text }], options: { num_predict: mt } };
		case 'ollama_generate':
			return { model: 'stories260K', prompt: text, options: { num_predict: mt } };
		case 'ollama_embed':
			return { model: 'stories260K', input: text };
		case 'infill':
			return { input_prefix: text, input_suffix: ' the end', n_predict: mt };
		case 'slot_save':
		case 'slot_restore':
			return { filename: r.pick(['hostile-slot', 'hostile.bin', 'missing']) };
	}
}

// The fields each API documents, to aim mutations at the code that reads them.
const FIELDS = {
	chat: ['model', 'messages', 'max_tokens', 'max_completion_tokens', 'temperature', 'top_p', 'stop', 'seed', 'n', 'presence_penalty',
		'frequency_penalty', 'logit_bias', 'logprobs', 'top_logprobs', 'stream', 'stream_options', 'user', 'metadata', 'response_format',
		'tools', 'tool_choice', 'modalities', 'store', 'top_k', 'min_p', 'repeat_penalty', 'draft', 'ignore_eos'],
	completions: ['model', 'prompt', 'max_tokens', 'temperature', 'top_p', 'stop', 'seed', 'n', 'best_of', 'echo', 'suffix', 'logprobs',
		'logit_bias', 'stream', 'stream_options', 'top_k', 'min_p', 'repeat_penalty', 'draft', 'ignore_eos'],
	messages: ['model', 'max_tokens', 'messages', 'system', 'stop_sequences', 'temperature', 'top_p', 'top_k', 'metadata', 'tools',
		'tool_choice', 'thinking', 'stream', 'seed', 'min_p', 'draft', 'ignore_eos'],
	responses: ['model', 'input', 'instructions', 'max_output_tokens', 'temperature', 'top_p', 'store', 'previous_response_id', 'tools',
		'tool_choice', 'text', 'reasoning', 'include', 'background', 'metadata', 'user', 'truncation', 'stream', 'top_k', 'min_p', 'seed',
		'draft', 'ignore_eos'],
	tokenize: ['content', 'messages', 'add_special', 'parse_special'],
	detokenize: ['tokens'],
	embeddings: ['model', 'input', 'encoding_format', 'dimensions', 'user'],
	count_tokens: ['model', 'messages', 'system', 'tools', 'tool_choice', 'thinking'],
	ollama_chat: ['model', 'messages', 'stream', 'format', 'options', 'keep_alive', 'tools', 'think'],
	ollama_generate: ['model', 'prompt', 'system', 'suffix', 'template', 'raw', 'stream', 'format', 'images', 'context', 'options',
		'keep_alive', 'think'],
	ollama_embed: ['model', 'input', 'truncate', 'dimensions', 'options', 'keep_alive'],
	infill: ['input_prefix', 'input_suffix', 'input_extra', 'prompt', 'n_predict', 'temperature', 'top_k', 'top_p', 'seed', 'stream', 'stop',
		'samplers', 'dry_multiplier', 'xtc_probability', 'mirostat'],
	slot_save: ['filename'],
	slot_restore: ['filename'],
};

const nested = (d, leaf) => {
	let v = leaf;
	for (let i = 0; i < d; i++) v = i % 2 ? { a: v } : [v];
	return v;
};

// Hostile values: every JSON kind, edges of numbers, long and odd strings. Those that put
// non-ASCII text where an error message would quote it carry the utf8-error-text tag.
function value(r, tags) {
	const k = r.int(0, 27);
	switch (k) {
		case 0: return null;
		case 1: return true;
		case 2: return false;
		case 3: return 0;
		case 4: return -1;
		case 5: return -0.0;
		case 6: return 2.5;
		case 7: return 1e308;
		case 8: return -1e308;
		case 9: return 2 ** 53 + 1;
		case 10: return -(2 ** 31) - 1;
		case 11: return 2 ** 31;
		case 12: return '';
		case 13: return 'x';
		case 14: return 'a'.repeat(r.pick([255, 256, 70000]));
		case 15:
			tags.add('utf8-error-text');
			return 'x' + 'é'.repeat(r.int(100, 400));
		case 16: return [];
		case 17: return [1, 'two', null];
		case 18: return {};
		case 19: return { type: 'text', text: 'hi' };
		case 20: return nested(r.int(2, 60), 1);
		case 21: return 'NaN';
		case 22: return '\u0001\u001f\u007f\u2028\ud83d\ude00';
		case 23: return [{ role: 'user', content: 'x' }];
		case 24: return r.int(-5, 40);
		case 25: return Array.from({ length: r.int(17, 300) }, (_, i) => String(i));
		case 26: return { a: 'b'.repeat(r.int(1, 2000)) };
		default: return 'stop';
	}
}

// A valid-looking message list bent one way. Prompts stay short or go far past the context,
// so the run's time goes to parsing and refusing, not to long prompt passes.
function messagesVariant(api, r, tags) {
	const k = r.int(0, 9);
	if (k === 0) return [];
	if (k === 1) return Array.from({ length: r.int(2000, 3000) }, (_, i) => ({ role: i % 2 ? 'assistant' : 'user', content: 'x' }));
	if (k === 2) return [{ role: r.pick(['tool', 'function', 'robot', 'USER', '', 7, null]), content: 'x' }];
	if (k === 3) return [{ role: 'user', content: [{ type: 'text', text: 'a' }, { type: r.pick(['image_url', 'image', 'input_audio', 7]), x: 1 }] }];
	if (k === 4) return [{ role: 'user', content: value(r, tags) }];
	if (k === 5) return [{ role: 'user' }];
	if (k === 6) return [{ role: 'assistant', content: null }];
	if (k === 7) return [{ role: 'user', content: 'x'.repeat(r.int(40000, 60000)) }];
	if (k === 8) {
		tags.add('utf8-error-text');
		return [{ role: 'u' + 'é'.repeat(r.int(100, 300)), content: 'x' }];
	}
	return [{ role: 'user', content: '\u00e9\u4e2d\ud83d\ude00 ' + 'ünïcödé '.repeat(r.int(1, 20)) }];
}

// A body mutated as a JS value: wrong types, unknown or missing keys, odd message lists.
function mutateObject(api, r, tags) {
	const b = base(api, r);
	const muts = r.int(1, 3);
	for (let i = 0; i < muts; i++) {
		const m = r.int(0, 7);
		if (m <= 2) b[r.pick(FIELDS[api])] = value(r, tags);
		else if (m === 3) {
			const names = ['x', 'unknown_field', '__proto__', '', 'a'.repeat(r.int(200, 2000))];
			if (r.chance(0.3)) {
				tags.add('utf8-error-text');
				names.push('x' + 'é'.repeat(r.int(100, 300)));
			}
			b[r.pick(names)] = value(r, tags);
		} else if (m === 4) {
			// dropping the output bound would let one case generate the whole context
			const k = r.pick(Object.keys(b));
			if (!/max_/.test(k)) delete b[k];
		}
		else if (m === 5 && (api === 'chat' || api === 'messages' || api === 'tokenize')) b.messages = messagesVariant(api, r, tags);
		else if (m === 5 && api === 'responses') b.input = r.chance(0.5) ? messagesVariant(api, r, tags) : value(r, tags);
		else if (m === 5 && api === 'completions') b.prompt = r.pick([[], [[1, 2]], [-1], [1e9], [1, 2.5], ['a', 'b'], value(r, tags)]);
		else if (m === 5 && api === 'detokenize') b.tokens = r.pick([[-1], [2 ** 31], [1.5], ['a'], Array.from({ length: 5000 }, (_, j) => j % 500), value(r, tags)]);
		else if (m === 6) b.stream = r.chance(0.8) ? true : value(r, tags);
		else b.n = r.int(1, 4); // several choices, still a few tokens each
	}
	// a bound the server may accept stays small; absurd ones are left for the range checks
	for (const k of ['max_tokens', 'max_output_tokens', 'max_completion_tokens'])
		if (typeof b[k] === 'number' && b[k] > 4 && b[k] <= 2 ** 32) b[k] = 4;
	const mk = { chat: 'max_tokens', completions: 'max_tokens', messages: 'max_tokens', responses: 'max_output_tokens' }[api];
	if (mk && (b[mk] === undefined || b[mk] === null)) b[mk] = 4;
	// Ollama's bound sits in options: an object keeps a small num_predict, anything else is a 400
	if ((api === 'ollama_chat' || api === 'ollama_generate') && (b.options === undefined || b.options === null)) b.options = {};
	if (b.options && typeof b.options === 'object' && !Array.isArray(b.options) && !(b.options.num_predict >= 1 && b.options.num_predict <= 4))
		b.options.num_predict = 4;
	return b;
}

const enc = (s) => Buffer.from(s, 'utf8');

// A body mutated as bytes: truncated, bad escapes, invalid UTF-8, odd numbers, duplicates.
function mutateText(api, r, tags) {
	const text = JSON.stringify(base(api, r));
	const m = r.int(0, 13);
	const at = (s) => r.int(1, s.length - 1);
	const strAt = (s) => {
		const i = s.indexOf('"', 1 + r.int(0, s.length - 2));
		return i < 0 ? 1 : i + 1;
	};
	const ins = (s, i, x) => Buffer.concat([enc(s.slice(0, i)), Buffer.isBuffer(x) ? x : enc(x), enc(s.slice(i))]);
	switch (m) {
		case 0: return enc(text.slice(0, at(text)));
		case 1: return enc('');
		case 2: return enc(r.pick([' ', '\r\n', 'null', '[]', '"str"', '123', 'true', '[{"messages":[]}]', '{}', '{"":""}']));
		case 3: {
			// an invalid or truncated escape inside a string
			const esc = r.pick(['\\u', '\\uZZZZ', '\\ud800', '\\udc00x', '\\u0000', '\\x41', '\\', '\\U0001F600', '\\ud83d\\u0041']);
			return ins(text, strAt(text), esc);
		}
		case 4: {
			// raw invalid UTF-8: the parser quotes these bytes in its error text
			tags.add('utf8-error-text');
			const bad = r.pick([[0xff], [0xc3], [0xc0, 0xaf], [0xed, 0xa0, 0x80], [0xf4, 0x90, 0x80, 0x80], [0xe2, 0x82], [0x80]]);
			return ins(text, strAt(text), Buffer.from(bad));
		}
		case 5: {
			// the reproduction: a bad escape before a multi-byte character
			tags.add('utf8-error-text');
			return ins(text, strAt(text), '\\u' + 'é'.repeat(r.int(1, 3)));
		}
		case 6: return enc(text.replace(/:(\d+)/, ':' + r.pick(['NaN', 'Infinity', '-Infinity', '1e999', '-1e999', '99999999999999999999999', '0x10', '01', '1.', '.5', '+1', '-', '1e', '--1'])));
		case 7: return enc(text.replace('{', '{' + r.pick(['"max_tokens":4,', '"stream":"yes",', '"messages":7,', '"prompt":null,', '"model":"x",'])));
		case 8: return enc(text + r.pick([',', '}', ' {"a":1}', 'garbage', '\u0000', '\n\n\n']));
		case 9: return enc('\ufeff' + text);
		case 10: {
			const d = r.pick([100, 1000, 2047, 2048, 2049, 5000, 20000]);
			const k = r.pick(['[', '{"a":']);
			return enc(text.slice(0, -1) + ',"x":' + k.repeat(d) + '1' + (k === '[' ? ']' : '}').repeat(d) + '}');
		}
		case 11: {
			const d = r.int(100, 3000);
			return enc(text.slice(0, -1) + ',"x":' + '['.repeat(d)); // deep and never closed
		}
		case 12: {
			const i = at(text);
			return ins(text, i, Buffer.from([r.int(0, 255)]));
		}
		default: return enc(text.replace(/"([a-z_]+)":/, (_, k) => `"${k}\\u0000":`));
	}
}

function head(method, path, len, r, extra = {}) {
	const h = { Host: '127.0.0.1' };
	const auth = r.int(0, 19);
	if (auth < 12) h.Authorization = `Bearer ${KEY}`;
	else if (auth < 17) h['x-api-key'] = KEY;
	else if (auth === 17) h.Authorization = 'Bearer wrong';
	else if (auth === 18) h.Authorization = 'Basic ' + 'A'.repeat(r.int(1, 5000));
	// mostly JSON, so the mutated bodies reach the parsers past the Content-Type guard
	const ct = r.int(0, 29);
	if (ct < 27) h['Content-Type'] = 'application/json';
	else if (ct === 27) h['Content-Type'] = 'text/plain';
	else if (ct === 28) h['Content-Type'] = 'application/json; charset=latin1';
	if (r.chance(0.3)) h['anthropic-version'] = '2023-06-01';
	if (len !== null) h['Content-Length'] = String(len);
	Object.assign(h, extra);
	let s = `${method} ${path} HTTP/1.1\r\n`;
	for (const [k, v] of Object.entries(h)) s += `${k}: ${v}\r\n`;
	return s;
}

// Body bytes framed as Content-Length or chunked (random sizes and extensions).
function frame(method, path, body, r, { close = true } = {}) {
	const conn = close ? { Connection: 'close' } : {};
	if (!r.chance(0.25)) return [enc(head(method, path, body.length, r, conn) + '\r\n'), body];
	const parts = [enc(head(method, path, null, r, { ...conn, 'Transfer-Encoding': 'chunked' }) + '\r\n')];
	let i = 0;
	while (i < body.length) {
		const n = Math.min(body.length - i, r.int(1, 4096));
		const ext = r.chance(0.1) ? ';ext=1' : '';
		const hex = r.chance(0.2) ? n.toString(16).toUpperCase() : n.toString(16);
		parts.push(enc(hex + ext + '\r\n'), body.subarray(i, i + n), enc('\r\n'));
		i += n;
	}
	parts.push(enc('0\r\n\r\n'));
	return parts;
}

// Raw HTTP edge cases: { family?, bytes (or parts), replies expected, protocol: answered by
// libmicrohttpd itself, ... } drawn by index.
function rawCase(r) {
	const ok = JSON.stringify({ prompt: 'Hi', max_tokens: 2 });
	const post = (extra, body = ok, path = '/v1/completions') => {
		let s = `POST ${path} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer ${KEY}\r\nContent-Type: application/json\r\nConnection: close\r\n`;
		return s + extra + '\r\n' + body;
	};
	const k = r.int(0, 30);
	switch (k) {
		// libmicrohttpd answers a line it cannot parse itself (HTML), lanes the ones it drops
		case 0: return { family: 'bad-request-line', protocol: true, bytes: r.pick(['GARBAGE\r\n\r\n', 'GET\r\n\r\n', ' \r\n\r\n', 'GET /health\r\n\r\n', 'GET  /health  HTTP/1.1\r\n\r\n', '\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\r\n\r\n']) };
		case 1: return { bytes: 'GET /health HTTP/1.0\r\n\r\n', replies: 1 };
		case 2: return { bytes: r.pick(['GET /health HTTP/9.9\r\nHost: 127.0.0.1\r\n\r\n', 'GET /health HTTP/2.0\r\nHost: 127.0.0.1\r\n\r\n', 'GET /health HTTP/1.x\r\nHost: 127.0.0.1\r\n\r\n']), replies: 1, protocol: true, badVersion: true };
		case 3: return { bytes: `GET /${'a'.repeat(r.pick([2000, 9000, 70000]))} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n`, replies: 1, protocol: true };
		case 4: return { bytes: `GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: ${'b'.repeat(r.pick([8000, 40000, 200000]))}\r\nConnection: close\r\n\r\n`, replies: 1, protocol: true };
		case 5: {
			let s = 'GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n';
			for (let i = 0; i < r.pick([200, 2000]); i++) s += `X-H${i}: v\r\n`;
			return { bytes: s + '\r\n', replies: 1, protocol: true };
		}
		case 6: return { bytes: 'GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nNoColonHere\r\nConnection: close\r\n\r\n', replies: 1, protocol: true };
		case 7: return { bytes: 'GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Fold: a\r\n  folded\r\nConnection: close\r\n\r\n', replies: 1, protocol: true };
		case 8: return { bytes: 'GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Nul: a\x00b\r\nConnection: close\r\n\r\n', replies: 1, protocol: true };
		case 9: return { bytes: post(`Content-Length: ${ok.length}\r\nContent-Length: ${ok.length + 5}\r\n`), replies: 1, protocol: true };
		case 10: {
			const n = r.pick(['-1', 'abc', '1e3', '99999999999999999999999', ' 12', '0x10', '18446744073709551615']);
			return { family: n === ' 12' || n === '18446744073709551615' ? undefined : 'bad-content-length', bytes: post(`Content-Length: ${n}\r\n`), replies: 1, protocol: true };
		}
		case 11: return { bytes: post(`Content-Length: ${ok.length}\r\nTransfer-Encoding: chunked\r\n`, `${ok.length.toString(16)}\r\n${ok}\r\n0\r\n\r\n`), replies: 1, protocol: true };
		case 12: return { family: 'transfer-encoding', bytes: post(`Transfer-Encoding: ${r.pick(['gzip', 'gzip, chunked', 'identity', 'chunked, gzip', 'x'])}\r\n`), replies: 1, protocol: true };
		case 13: {
			const b = r.pick(['zz\r\n', 'ffffffffffffffffffff\r\n', '5\r\nabc\r\n', '-1\r\n', '3\r\n{}x\r\n0\r\n\r\n']);
			return { bytes: post('Transfer-Encoding: chunked\r\n', b), replies: 1, protocol: true, vanishAfterMs: 300 };
		}
		case 14: return { bytes: post('Expect: 100-continue\r\nContent-Length: ' + ok.length + '\r\n', ok), replies: 1 };
		case 15: return { bytes: post('Expect: teapot\r\nContent-Length: ' + ok.length + '\r\n', ok), replies: 1, protocol: true };
		case 16: {
			// pipelined: several requests in one write on a keep-alive connection
			const ka = (m, p, b) => `${m} ${p} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer ${KEY}\r\nContent-Type: application/json\r\n` + (b === undefined ? '\r\n' : `Content-Length: ${Buffer.byteLength(b)}\r\n\r\n${b}`);
			const reqs = [ka('GET', '/health'), ka('POST', '/v1/completions', ok), ka('POST', '/v1/chat/completions', '{"messages":['), ka('GET', '/v1/models'), ka('POST', '/tokenize', '{"content":"hi"}')];
			const n = r.int(2, reqs.length);
			let s = '';
			for (let i = 0; i < n; i++) s += reqs[r.int(0, reqs.length - 1)];
			return { bytes: s, replies: n, keepAlive: true };
		}
		case 17: {
			const m = r.pick(['get', 'BREW', 'PUT', 'DELETE', 'OPTIONS', 'PATCH', 'HEAD', 'TRACE']);
			return { bytes: `${m} ${r.pick(['/v1/chat/completions', '/health', '/v1/messages'])} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n`, replies: 1, noBody: m === 'HEAD' };
		}
		case 18: return { bytes: `GET ${r.pick(['http://127.0.0.1/health', '*', '/health?x=1&&&', '/health#frag', '/v1/models/%00', '/v1/models/..%2f..%2fetc', '/%zz', '/v1//models', '/v1/models/' + 'a'.repeat(3000)])} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n`, replies: 1 };
		case 19: return { family: 'utf8-error-text', bytes: `GET /v1/models/x${'%C3%A9'.repeat(r.int(50, 150))} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n`, replies: 1 };
		case 20: {
			// an id that is not UTF-8 once decoded is quoted in the 404's message
			const [id, bad] = r.pick([['stories260K'], ['x'], ['%C3%A9'], ['\xc3\xa9'], ['%C3', 1], ['%FF%FE', 1], ['\xe9', 1]]);
			return { family: bad ? 'utf8-error-text' : undefined, bytes: `GET /v1/models/${id} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n`, replies: 1 };
		}
		case 21: {
			// no Host, or one that is not this server's
			const h = r.pick(['', 'Host: evil.example:8080\r\nOrigin: http://evil.example:8080\r\n', 'Host: \r\n', 'Host: a\r\nHost: b\r\n']);
			return { bytes: `POST /v1/completions HTTP/1.1\r\n${h}Authorization: Bearer ${KEY}\r\nContent-Length: ${ok.length}\r\nConnection: close\r\n\r\n${ok}`, replies: 1, protocol: true };
		}
		case 22: return { bytes: post(`Content-Length: ${r.pick([9000000, 300000])}\r\n`, '{"prompt":"'), replies: 1, vanishAfterMs: 1000 };
		case 23: {
			// a body slightly over --max-body, chunked: read to its end, then 413
			const big = '{"prompt":"' + 'a'.repeat(270000) + '"}';
			return { bytes: post('Transfer-Encoding: chunked\r\n', `${big.length.toString(16)}\r\n${big}\r\n0\r\n\r\n`), replies: 1 };
		}
		case 24: return { family: 'vanish', bytes: post(`Content-Length: ${ok.length + 100}\r\n`, ok.slice(0, r.int(0, ok.length))), replies: 0, vanishAfterMs: r.int(0, 30) };
		case 25: return { family: 'vanish', bytes: 'POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Le', replies: 0, vanishAfterMs: r.int(0, 30) };
		case 26: {
			const path = r.pick(['/v1/chat/completions', '/v1/messages', '/v1/responses', '/v1/completions']);
			// long enough to be mid-stream when the client goes; its lane must come free
			const mt = 32;
			const body = path === '/v1/completions' ? { prompt: 'Once', max_tokens: mt, ignore_eos: true } : path === '/v1/responses' ? { input: 'Once', max_output_tokens: mt, ignore_eos: true } : { messages: [{ role: 'user', content: 'Once' }], max_tokens: mt, ignore_eos: true };
			body.stream = r.chance(0.7);
			return { family: 'vanish', bytes: post(`Content-Length: ${Buffer.byteLength(JSON.stringify(body))}\r\n`, JSON.stringify(body), path), replies: 0, vanishOnData: r.chance(0.5), vanishAfterMs: r.int(0, 20) };
		}
		case 27: return { family: 'half-close', bytes: post(`Content-Length: ${ok.length}\r\n`), replies: 1, halfClose: true };
		case 28: return { bytes: post('Content-Length: 0\r\n', ''), replies: 1 };
		case 29: {
			// a small request asking for a huge amount of work: refused or bounded once fixed
			const legacy = r.chance(0.5);
			const b = JSON.stringify(legacy ? { prompt: 'Hi', n: 32, max_tokens: 2000, logprobs: 5, ignore_eos: true } : { messages: [{ role: 'user', content: 'Hi' }], n: 32, max_tokens: 2000, logprobs: true, top_logprobs: 20, ignore_eos: true });
			return { family: 'amplification', bytes: post(`Content-Length: ${b.length}\r\n`, b, legacy ? '/v1/completions' : '/v1/chat/completions'), replies: 1 };
		}
		default: {
			// a request trickled a few bytes at a time
			const b = post(`Content-Length: ${ok.length}\r\n`);
			const parts = [];
			for (let i = 0; i < b.length; ) {
				const n = r.int(1, 40);
				parts.push(b.slice(i, i + n));
				i += n;
			}
			return { bytes: parts, replies: 1, trickleMs: 1 };
		}
	}
}

// One case: { index, family, tags, parts: [Buffer], replies, shape, stream, ... }.
export function makeCase(seed, index) {
	const r = prng((seed ^ Math.imul(index + 1, 0x9e3779b1)) >>> 0);
	const tags = new Set();
	const kind = r.int(0, 9);
	if (kind <= 1) {
		const c = rawCase(r);
		if (c.family) tags.add(c.family);
		const parts = (Array.isArray(c.bytes) ? c.bytes : [c.bytes]).map((b) => (Buffer.isBuffer(b) ? b : Buffer.from(b, 'latin1')));
		return { replies: 1, shape: 'any', ...c, index, family: c.family || (c.protocol ? 'http-protocol' : 'http-edge'), tags: [...tags], parts, bytes: undefined };
	}
	const api = r.pick(['chat', 'chat', 'completions', 'completions', 'messages', 'messages', 'responses', 'responses', 'tokenize', 'detokenize',
		'embeddings', 'count_tokens', 'ollama_chat', 'ollama_generate', 'ollama_embed', 'infill', 'slot_save', 'slot_restore']);
	let body, family;
	if (kind <= 5) {
		const o = mutateObject(api, r, tags);
		body = enc(JSON.stringify(o));
		family = 'json-value';
	} else if (kind <= 8) {
		body = mutateText(api, r, tags);
		family = 'json-text';
	} else {
		const o = base(api, r);
		if (API[api].gen) o.stream = r.chance(0.5);
		body = enc(JSON.stringify(o));
		family = 'valid';
	}
	const keepAlive = r.chance(0.15);
	const parts = frame('POST', API[api].path, body, r, { close: !keepAlive });
	let replies = 1;
	if (keepAlive) {
		// a second request on the same connection after the first
		parts.push(enc(`GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n`));
		replies = 2;
	}
	for (const t of tags) family = t;
	return { index, family, tags: [...tags], api, parts, replies, shape: API[api].shape };
}

// ---- the client --------------------------------------------------------------------------

// Parses as many whole HTTP responses as buf holds; returns them and the bytes used.
export function parseResponses(buf, want, { noBody = false } = {}) {
	const out = [];
	let off = 0;
	while (out.length < want) {
		const he = buf.indexOf('\r\n\r\n', off);
		if (he < 0) break;
		const headText = buf.subarray(off, he).toString('latin1');
		const lines = headText.split('\r\n');
		const m = lines[0].match(/^HTTP\/1\.[01] (\d{3})/);
		if (!m) return { out, off, bad: `not a status line: ${JSON.stringify(lines[0].slice(0, 80))}` };
		const status = Number(m[1]);
		const headers = {};
		for (const l of lines.slice(1)) {
			const i = l.indexOf(':');
			if (i > 0) headers[l.slice(0, i).trim().toLowerCase()] = l.slice(i + 1).trim();
		}
		let p = he + 4;
		if (status === 100) {
			off = p;
			continue;
		}
		let body;
		if (/chunked/i.test(headers['transfer-encoding'] || '')) {
			const chunks = [];
			let done = false;
			for (;;) {
				const le = buf.indexOf('\r\n', p);
				if (le < 0) break;
				const n = parseInt(buf.subarray(p, le).toString('latin1'), 16);
				if (Number.isNaN(n)) return { out, off, bad: 'bad chunk size in a reply' };
				if (n === 0) {
					// no trailers: an empty line at once; else trailers end with one
					if (buf.length < le + 4) break;
					if (buf.subarray(le + 2, le + 4).toString('latin1') === '\r\n') p = le + 4;
					else {
						const te = buf.indexOf('\r\n\r\n', le);
						if (te < 0) break;
						p = te + 4;
					}
					done = true;
					break;
				}
				if (le + 2 + n + 2 > buf.length) break;
				chunks.push(buf.subarray(le + 2, le + 2 + n));
				p = le + 2 + n + 2;
			}
			if (!done) break;
			body = Buffer.concat(chunks);
		} else if (noBody) body = Buffer.alloc(0);
		else if ('content-length' in headers) {
			const n = Number(headers['content-length']);
			if (p + n > buf.length) break;
			body = buf.subarray(p, p + n);
			p += n;
		} else break; // read to close
		out.push({ status, headers, body: body.toString('utf8') });
		off = p;
	}
	return { out, off };
}

// Plays a case on a fresh connection. Resolves { replies, closed, timedOut, error }.
export function send(port, c, { timeoutMs }) {
	return new Promise((resolve) => {
		const s = net.connect(port, '127.0.0.1');
		let buf = Buffer.alloc(0);
		let finished = false;
		const result = { replies: [], timedOut: false, closed: false };
		const finish = (extra = {}) => {
			if (finished) return;
			finished = true;
			clearTimeout(t);
			if (vt) clearTimeout(vt);
			const parsed = parseResponses(buf, Math.max(c.replies, 1), c);
			result.replies = parsed.out;
			result.bad = parsed.bad;
			// a reply framed by the connection's close
			if (!parsed.bad && result.closed && parsed.off < buf.length && result.replies.length < c.replies) {
				const rest = buf.subarray(parsed.off);
				const he = rest.indexOf('\r\n\r\n');
				const m = rest.toString('latin1', 0, 20).match(/^HTTP\/1\.[01] (\d{3})/);
				if (he >= 0 && m) result.replies.push({ status: Number(m[1]), headers: {}, body: rest.subarray(he + 4).toString('utf8'), byClose: true });
				else if (!m) result.bad = `not a status line: ${JSON.stringify(rest.toString('latin1', 0, 80))}`;
			}
			result.bytes = buf.length;
			Object.assign(result, extra);
			s.destroy();
			resolve(result);
		};
		const t = setTimeout(() => finish({ timedOut: true }), timeoutMs);
		let vt = null;
		const vanish = () => finish({ vanished: true });
		s.on('connect', async () => {
			if (c.trickleMs) {
				for (const p of c.parts) {
					if (finished) return;
					s.write(p);
					await new Promise((r) => setTimeout(r, c.trickleMs));
				}
			} else s.write(Buffer.concat(c.parts)); // one write: a server that replies early reads it all
			if (c.halfClose) s.end();
			if (c.replies === 0 && !c.vanishOnData) vt = setTimeout(vanish, c.vanishAfterMs || 0);
			else if (c.vanishAfterMs && c.replies > 0) vt = setTimeout(() => finish({ vanished: true }), c.vanishAfterMs);
		});
		s.on('data', (d) => {
			buf = Buffer.concat([buf, d]);
			if (c.vanishOnData) return vanish();
			const got = parseResponses(buf, c.replies, c).out;
			// a reply that says close ends the exchange: the requests after it go unanswered
			if (c.replies > 0 && (got.length >= c.replies || (got.length && /close/i.test(got[got.length - 1].headers.connection || ''))))
				finish();
		});
		s.on('error', (e) => (result.error = e.code || String(e)));
		s.on('close', () => {
			result.closed = true;
			finish();
		});
	});
}

// What is wrong with a reply, or null. Protocol errors (protocol: true) are judged as strictly
// as the APIs' own: the gate answers them in JSON before libmicrohttpd sees the head.
export function judge(c, rep) {
	const { status, body, headers } = rep;
	// an HTTP version that really is unsupported gets 505
	if (status >= 500 && !(status === 505 && c.badVersion)) {
		// busy answers are documented and carry Retry-After; nothing here drains or loads
		if (!((status === 529 && c.shape !== 'openai') && headers['retry-after'])) return `status ${status}`;
	}
	if (status >= 400) {
		if (c.noBody) return body ? 'a reply to HEAD with a body' : null;
		if (/^HTTP\/1\./.test(body)) return `status ${status} with another status line in its body`;
		let j;
		try {
			j = JSON.parse(body);
		} catch {
			return `status ${status} with a body that is not JSON: ${JSON.stringify(body.slice(0, 120))}`;
		}
		const oa = j && !('type' in j) && typeof j.error === 'object' && j.error && typeof j.error.message === 'string' && typeof j.error.type === 'string';
		const an = j && j.type === 'error' && typeof j.error === 'object' && j.error && typeof j.error.message === 'string' && typeof j.error.type === 'string';
		if (c.shape === 'openai' && !oa) return `status ${status}: not the OpenAI error shape: ${body.slice(0, 120)}`;
		if (c.shape === 'anthropic' && !an) return `status ${status}: not the Anthropic error shape: ${body.slice(0, 120)}`;
		const ol = j && typeof j.error === 'string' && Object.keys(j).length === 1;
		if (c.shape === 'ollama' && !ol) return `status ${status}: not Ollama's error shape: ${body.slice(0, 120)}`;
		if (c.shape === 'any' && !oa && !an) return `status ${status}: not an API error shape: ${body.slice(0, 120)}`;
		return null;
	}
	if (status === 200 && /text\/event-stream/.test(headers['content-type'] || '')) {
		// a stream ends with its API's last event, or an error event
		const tail = body.slice(-400);
		if (!/data: \[DONE\]|message_stop|response\.(completed|incomplete|failed)|"error"/.test(tail)) return `a stream that does not end: ${JSON.stringify(tail.slice(-120))}`;
		return null;
	}
	if (c.noBody) return body ? 'a reply to HEAD with a body' : null;
	if (status === 200 && /x-ndjson/.test(headers['content-type'] || '')) {
		// Ollama's stream: one object per line, the last done or an error
		let last;
		try {
			last = JSON.parse(body.trim().split('\n').at(-1));
		} catch {}
		if (!last || !(last.done === true || typeof last.error === 'string')) return `an NDJSON stream that does not end: ${JSON.stringify(body.slice(-120))}`;
		return null;
	}
	if (status === 200 && /json/.test(headers['content-type'] || '')) {
		try {
			JSON.parse(body);
		} catch {
			return `status 200 with a body that is not JSON: ${JSON.stringify(body.slice(0, 120))}`;
		}
	}
	return null;
}

// A short, printable form of the case's request, to reproduce it by hand.
export function describe(c) {
	const all = Buffer.concat(c.parts);
	const s = all.toString('latin1');
	return JSON.stringify(s.length > 300 ? s.slice(0, 240) + `…(${all.length} bytes)…` + s.slice(-40) : s);
}
