// lanes' page: a chat over /v1/chat/completions (or, in completion mode, the conversation's text
// continued by /v1/completions) and a dashboard of /slots, /metrics and, for a mixture-of-experts
// model, a heat map of /v1/experts; the header names the model from /props.
// Model text only ever reaches the page through textContent: it never becomes markup.
'use strict';
const $ = (id) => document.getElementById(id);
const STORE = 'lanes.conversations', SETTINGS = 'lanes.settings', KEY = 'lanes.apikey';

// ---- storage ------------------------------------------------------------------------------
function loadJSON(k, dflt) {
	try { const v = JSON.parse(localStorage.getItem(k)); return v == null ? dflt : v; } catch { return dflt; }
}
let convs = loadJSON(STORE, []);
if (!Array.isArray(convs)) convs = [];
convs = convs.filter((c) => c && typeof c === 'object' && Array.isArray(c.messages));
let current = convs.length ? convs[0].id : null;
const save = () => { try { localStorage.setItem(STORE, JSON.stringify(convs)); } catch { /* quota: keep in memory */ } };
const conv = () => convs.find((c) => c.id === current);

const fields = ['mode', 'system', 'temperature', 'top_p', 'max_tokens', 'seed'];
const settings = loadJSON(SETTINGS, {});
for (const f of fields) if (typeof settings[f] === 'string') $(f).value = settings[f];
for (const f of fields) $(f).addEventListener('change', () => { settings[f] = $(f).value; localStorage.setItem(SETTINGS, JSON.stringify(settings)); });
$('apikey').value = localStorage.getItem(KEY) || '';
$('apikey').addEventListener('change', () => localStorage.setItem(KEY, $('apikey').value));

function headers(json) {
	const h = {};
	if (json) h['Content-Type'] = 'application/json';
	const k = $('apikey').value;
	if (k) h.Authorization = 'Bearer ' + k;
	return h;
}
function askKey() {
	const k = prompt('This server needs an API key (--api-key):', $('apikey').value);
	if (k != null) { $('apikey').value = k; localStorage.setItem(KEY, k); }
	return k != null;
}

// ---- safe markdown: fenced code, inline code, bold, paragraphs; all as text nodes ---------
function el(tag, cls, text) {
	const e = document.createElement(tag);
	if (cls) e.className = cls;
	if (text != null) e.textContent = text;
	return e;
}
function inline(parent, text) {
	const re = /(`[^`\n]+`|\*\*[^*\n]+\*\*)/g;
	let last = 0, m;
	while ((m = re.exec(text))) {
		if (m.index > last) parent.appendChild(document.createTextNode(text.slice(last, m.index)));
		const t = m[0];
		parent.appendChild(t[0] === '`' ? el('code', null, t.slice(1, -1)) : el('strong', null, t.slice(2, -2)));
		last = m.index + t.length;
	}
	if (last < text.length) parent.appendChild(document.createTextNode(text.slice(last)));
}
function render(parent, text) {
	parent.replaceChildren();
	const parts = String(text).split(/^```[^\n]*\n?/m);
	parts.forEach((part, i) => {
		if (i % 2) {
			const pre = el('pre');
			pre.appendChild(el('code', null, part.replace(/\n$/, '')));
			parent.appendChild(pre);
			return;
		}
		// headings (# to ###) on their own lines; the text between them is one paragraph
		for (const seg of part.split(/^(#{1,3} [^\n]*)\n?/m)) {
			if (!seg) continue;
			const h = seg.match(/^(#{1,3}) (.*)$/);
			const p = h ? el('h' + (h[1].length + 2)) : el('p'); // white-space: pre-wrap keeps the text's own line breaks
			inline(p, h ? h[2] : seg);
			parent.appendChild(p);
		}
	});
}

// ---- the chat -----------------------------------------------------------------------------
function drawList() {
	const ul = $('convs');
	ul.replaceChildren();
	for (const c of convs) {
		const li = el('li', c.id === current ? 'on' : null, c.title || 'New chat');
		const del = el('button', null, '×');
		del.title = 'delete';
		del.onclick = (ev) => { ev.stopPropagation(); convs = convs.filter((x) => x !== c); if (current === c.id) current = convs[0]?.id ?? null; save(); draw(); };
		li.appendChild(del);
		li.onclick = () => { current = c.id; draw(); };
		ul.appendChild(li);
	}
}
function msgNode(m, i, c) {
	const d = el('div', 'msg ' + (m.role === 'user' ? 'user' : 'assistant'));
	d.appendChild(el('div', 'role', m.role));
	if (m.role === 'assistant') {
		// the model's thinking, folded above its answer (shown as text, never as markup)
		const th = el('details', 'thinking');
		th.appendChild(el('summary', null, 'thinking'));
		th.appendChild(el('div', 'think', m.thinking || ''));
		th.hidden = !m.thinking;
		d.appendChild(th);
	}
	const body = el('div', 'body');
	render(body, m.content || '');
	d.appendChild(body);
	if (m.role === 'assistant') {
		const st = el('div', 'stats');
		st.appendChild(el('span', null, m.stats || ''));
		const copy = el('button', null, 'copy');
		copy.onclick = () => copyText(m.content || '', copy);
		const regen = el('button', null, 'regenerate');
		regen.onclick = () => { if (busy) return; c.messages.splice(i); save(); draw(); generate(c); };
		st.append(copy, regen);
		d.appendChild(st);
	}
	return d;
}
// The clipboard API needs a secure context (https or localhost); elsewhere a selection is copied.
function copyText(text, btn) {
	const done = () => { btn.textContent = 'copied'; setTimeout(() => { btn.textContent = 'copy'; }, 1500); };
	if (navigator.clipboard && window.isSecureContext) { navigator.clipboard.writeText(text).then(done, () => {}); return; }
	const ta = el('textarea');
	ta.value = text;
	document.body.appendChild(ta);
	ta.select();
	try { if (document.execCommand('copy')) done(); } catch { /* nothing to copy with */ }
	ta.remove();
}
function draw() {
	drawList();
	const box = $('messages');
	box.replaceChildren();
	const c = conv();
	if (!c) return;
	c.messages.forEach((m, i) => box.appendChild(msgNode(m, i, c)));
	box.scrollTop = box.scrollHeight;
}

let busy = null; // the AbortController of the reply being streamed
// The turns as one text, as the server's plain template joins them for a model without a chat
// template: a space between two only where neither has one and the next opens with no punctuation.
function joinText(texts) {
	let out = '';
	for (const t of texts) {
		if (!t) continue;
		if (out && !/[ \n\t]$/.test(out) && !/^[ \n\t.,;:!?]/.test(t)) out += ' ';
		out += t;
	}
	return out;
}
async function generate(c) {
	const m = {role: 'assistant', content: '', thinking: '', stats: ''};
	c.messages.push(m);
	const node = msgNode(m, c.messages.length - 1, c);
	$('messages').appendChild(node);
	const body = node.querySelector('.body'), stats = node.querySelector('.stats span');
	const think = node.querySelector('.thinking'), thinkText = node.querySelector('.think');
	const msgs = [];
	if ($('system').value.trim()) msgs.push({role: 'system', content: $('system').value});
	for (const x of c.messages.slice(0, -1)) msgs.push({role: x.role, content: x.content});
	const completion = $('mode').value === 'completion';
	const req = completion ? {prompt: joinText(msgs.map((x) => x.content))} : {messages: msgs};
	if (picked()) req.model = picked();
	Object.assign(req, {stream: true, stream_options: {include_usage: true}});
	for (const f of ['temperature', 'top_p', 'max_tokens', 'seed']) if ($(f).value !== '') req[f] = Number($(f).value);
	busy = new AbortController();
	$('stop').disabled = false;
	$('send').disabled = true;
	const t0 = performance.now();
	let first = 0, n = 0, note = '';
	try {
		const r = await fetch(completion ? '/v1/completions' : '/v1/chat/completions', {method: 'POST', headers: headers(true), body: JSON.stringify(req), signal: busy.signal});
		if (r.status === 401 && askKey()) { c.messages.pop(); node.remove(); busy = null; return generate(c); }
		if (!r.ok) {
			let msg = r.status + ' ' + r.statusText;
			try { msg = (await r.json()).error.message; } catch { /* not JSON */ }
			throw new Error(msg);
		}
		const rd = r.body.getReader(), dec = new TextDecoder();
		let buf = '';
		for (;;) {
			const {value, done} = await rd.read();
			if (done) break;
			buf += dec.decode(value, {stream: true});
			let i;
			while ((i = buf.indexOf('\n')) >= 0) {
				const line = buf.slice(0, i).trim();
				buf = buf.slice(i + 1);
				if (!line.startsWith('data:')) continue;
				const data = line.slice(5).trim();
				if (data === '[DONE]') continue;
				let ev;
				try { ev = JSON.parse(data); } catch { continue; }
				if (ev.error) throw new Error(ev.error.message || 'error');
				if (ev.usage) n = ev.usage.completion_tokens;
				const thought = ev.choices?.[0]?.delta?.reasoning_content;
				if (thought) {
					if (!first) first = performance.now();
					if (!ev.usage) n++;
					m.thinking += thought;
					thinkText.textContent = m.thinking;
					think.hidden = false;
				}
				const delta = completion ? ev.choices?.[0]?.text : ev.choices?.[0]?.delta?.content;
				if (delta) {
					if (!first) first = performance.now();
					if (!ev.usage) n++;
					m.content += delta;
					render(body, m.content);
					$('messages').scrollTop = $('messages').scrollHeight;
				}
			}
		}
	} catch (e) {
		note = e.name === 'AbortError' ? ' · stopped' : ' · error: ' + e.message;
	}
	const t1 = performance.now();
	const rate = first && n > 1 && t1 > first ? ((n - 1) / ((t1 - first) / 1000)).toFixed(1) + ' tok/s' : '';
	m.stats = [n + ' tokens', rate, first ? 'TTFT ' + Math.round(first - t0) + ' ms' : ''].filter(Boolean).join(' · ') + note;
	stats.textContent = m.stats;
	busy = null;
	$('stop').disabled = true;
	$('send').disabled = false;
	save();
}
$('stop').onclick = () => busy?.abort();
$('new').onclick = () => { current = null; draw(); $('input').focus(); };
$('form').onsubmit = (ev) => {
	ev.preventDefault();
	const text = $('input').value;
	if (!text.trim() || busy) return;
	let c = conv();
	if (!c) {
		c = {id: Date.now().toString(36) + Math.random().toString(36).slice(2, 6), title: text.slice(0, 40), messages: []};
		convs.unshift(c);
		current = c.id;
	}
	c.messages.push({role: 'user', content: text});
	$('input').value = '';
	save();
	draw();
	generate(c);
};
$('input').addEventListener('keydown', (ev) => { if (ev.key === 'Enter' && !ev.shiftKey) { ev.preventDefault(); $('form').requestSubmit(); } });

// ---- the dashboard ------------------------------------------------------------------------
const tabs = {chat: $('tab-chat'), dash: $('tab-dash')};
for (const [name, b] of Object.entries(tabs)) b.onclick = () => {
	for (const [n, x] of Object.entries(tabs)) { x.classList.toggle('on', n === name); $(n).hidden = n !== name; }
};
function metrics(text) {
	const v = {};
	for (const line of text.split('\n')) {
		if (!line || line[0] === '#') continue;
		const sp = line.lastIndexOf(' ');
		const name = line.slice(0, sp).replace(/\{.*\}/, (l) => (l.includes('le=') ? '#' : ''));
		if (name.includes('#')) continue;
		v[name] = (v[name] || 0) + Number(line.slice(sp + 1));
	}
	return v;
}
const history = []; // {t, decode, prompt, rounds} per second, the last minute
let prev = null;
function card(label, value) {
	const d = el('div', 'card');
	d.append(el('b', null, value), el('span', null, label));
	return d;
}
// ---- SVG: nodes built one by one, names and numbers as text and attributes ----------------
const SVGNS = 'http://www.w3.org/2000/svg';
function svgEl(tag, attrs) {
	const e = document.createElementNS(SVGNS, tag);
	for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, String(v));
	return e;
}
function svgText(x, y, s, anchor, cls) {
	const t = svgEl('text', {x, y, 'text-anchor': anchor || 'start'});
	if (cls) t.setAttribute('class', cls);
	t.textContent = s;
	return t;
}

// ---- charts: the last minute, a point a second, with both axes in their units and a legend ----
const SAMPLES = 60;
// The smallest of 1, 2, 2.5, 5 x 10^k at or above v: the y axis's top.
function niceMax(v) {
	if (!(v > 0)) return 1;
	const p = 10 ** Math.floor(Math.log10(v));
	return [1, 2, 2.5, 5, 10].find((m) => m * p >= v * (1 - 1e-9)) * p;
}
const num = (v) => (v >= 10 || Number.isInteger(v) ? String(Math.round(v)) : v.toFixed(1));
const tick = (v) => String(+v.toPrecision(3)); // 12.5 stays 12.5: a tick is exact
function chart(name, title, unit, series) {
	const fig = el('figure', 'chart');
	fig.dataset.chart = name;
	fig.appendChild(el('figcaption', null, title));
	const w = 300, h = 150, l = 44, r = 10, t = 24, b = 32, pw = w - l - r, ph = h - t - b;
	const svg = svgEl('svg', {width: w, height: h});
	const max = niceMax(Math.max(0, ...series.flatMap((sr) => history.map((x) => x[sr.key]))));
	svg.appendChild(svgEl('rect', {class: 'frame', x: l, y: t, width: pw, height: ph}));
	const ya = svgEl('g', {class: 'axis axis-y'});
	for (const f of [0, 0.5, 1]) {
		const y = t + ph - f * ph;
		ya.append(svgEl('line', {x1: l - 3, x2: l, y1: y, y2: y}), svgText(l - 5, y + 3, tick(max * f), 'end'));
	}
	const yt = svgText(0, 0, unit, 'middle', 'title');
	yt.setAttribute('transform', `translate(10 ${t + ph / 2}) rotate(-90)`);
	ya.appendChild(yt);
	const xa = svgEl('g', {class: 'axis axis-x'});
	for (const [f, s] of [[0, SAMPLES + ' s ago'], [0.5, SAMPLES / 2 + ' s ago'], [1, 'now']]) {
		const x = l + f * pw;
		xa.append(svgEl('line', {x1: x, x2: x, y1: t + ph, y2: t + ph + 3}), svgText(x, t + ph + 13, s, f === 0 ? 'start' : f === 1 ? 'end' : 'middle'));
	}
	xa.appendChild(svgText(l + pw / 2, h - 3, 'time (s), a point a second', 'middle', 'title'));
	svg.append(ya, xa);
	const legend = svgEl('g', {class: 'legend'});
	let lx = l;
	for (const sr of series) {
		const ys = history.map((x) => x[sr.key]);
		if (ys.length) {
			const pts = ys.map((v, i) => `${(l + pw * (1 - (ys.length - 1 - i) / (SAMPLES - 1))).toFixed(1)},${(t + ph - (v / max) * ph).toFixed(1)}`);
			svg.appendChild(svgEl('polyline', {class: 'series', 'data-series': sr.key, points: pts.join(' '), fill: 'none', stroke: sr.color, 'stroke-width': 1.5}));
		}
		const label = sr.label + ' ' + (ys.length ? num(ys[ys.length - 1]) : '–') + ' ' + unit;
		const item = svgEl('g', {class: 'key', 'data-series': sr.key});
		item.append(svgEl('line', {x1: lx, x2: lx + 14, y1: 10, y2: 10, stroke: sr.color, 'stroke-width': 2}), svgText(lx + 18, 13, label));
		legend.appendChild(item);
		lx += 18 + label.length * 5.6 + 12;
	}
	svg.appendChild(legend);
	fig.appendChild(svg);
	return fig;
}

// ---- the expert heat map ------------------------------------------------------------------
let expertsGone = false; // a dense model, or the observer off: the page stops asking
const KEY_RATIOS = [0.25, 0.5, 1, 2, 4];
// log2 of activations over the uniform share: -2 blue, 0 white, +2 red (as /v1/experts.svg draws it)
function heatColor(ratio) {
	const t = ratio > 0 ? Math.max(-1, Math.min(1, Math.log2(ratio) / 2)) : -1;
	const f = Math.round(255 * (1 - Math.abs(t)));
	return t >= 0 ? `rgb(255,${f},${f})` : `rgb(${f},${f},255)`;
}
// The colour key of every map: a swatch per ratio to the uniform share.
function drawKey() {
	const k = $('experts-key');
	if (k.childNodes.length) return;
	k.appendChild(svgText(0, 15, 'colour: activations ÷ uniform share'));
	KEY_RATIOS.forEach((q, i) => {
		const x = 190 + i * 42;
		const sw = svgEl('rect', {class: 'swatch', x, y: 4, width: 12, height: 12, fill: heatColor(q), stroke: '#bbb'});
		k.append(sw, svgText(x + 14, 15, q + '×'));
	});
}
// Experts across, layers down: labelled axes, a cell per (layer, expert) with its count as a tooltip.
function heatMap(name, rows, layers, E, K) {
	const fig = el('figure');
	fig.dataset.domain = name;
	fig.appendChild(el('figcaption', null, name + ' (' + rows + ' rows)'));
	const L = layers.length;
	const cw = Math.max(3, Math.min(18, Math.floor(360 / E))), ch = Math.max(3, Math.min(14, Math.floor(160 / L)));
	const left = 42, top = 26, xstep = Math.ceil(14 / cw), lstep = Math.ceil(11 / ch);
	const svg = svgEl('svg', {width: left + E * cw + 4, height: top + L * ch + 2});
	const xa = svgEl('g', {class: 'axis axis-x'});
	xa.appendChild(svgText(left, 9, 'expert →', 'start', 'title'));
	for (let x = 0; x < E; x += xstep) xa.appendChild(svgText(left + x * cw + cw / 2, top - 4, String(x), 'middle'));
	const ya = svgEl('g', {class: 'axis axis-y'});
	ya.appendChild(svgText(0, top - 4, 'layer ↓', 'start', 'title'));
	for (let l = 0; l < L; l += lstep) ya.appendChild(svgText(left - 4, top + l * ch + ch / 2 + 3, 'L' + l, 'end'));
	svg.append(xa, ya);
	const uniform = (rows * K) / E;
	layers.forEach((ly, l) => ly.activations.forEach((a, x) => {
		const r = svgEl('rect', {class: 'cell', x: left + x * cw, y: top + l * ch, width: cw, height: ch, fill: heatColor(uniform ? a / uniform : 1)});
		const tip = document.createElementNS(SVGNS, 'title');
		tip.textContent = `layer ${l}, expert ${x}: ${a}`;
		r.appendChild(tip);
		svg.appendChild(r);
	}));
	fig.appendChild(svg);
	return fig;
}
async function pollExperts() {
	if (expertsGone) return;
	const r = await fetch('/v1/experts' + (picked() ? '?model=' + encodeURIComponent(picked()) : ''), {headers: headers()});
	// a picked model may load later: it is asked again
	if (r.status === 404) { expertsGone = !picked(); $('experts').hidden = true; return; }
	if (!r.ok) return;
	const x = await r.json();
	const maps = [heatMap('all', x.rows, x.layers, x.experts, x.experts_per_token)];
	for (const [name, d] of Object.entries(x.domains || {})) maps.push(heatMap(name, d.rows, d.layers, x.experts, x.experts_per_token));
	drawKey();
	$('experts-maps').replaceChildren(...maps);
	$('experts').hidden = false;
}
// The header: the model's name, the context a request may use and the server's build, from /props
// (the context once the model is in).
let about = null;
async function showAbout() {
	const r = await fetch('/props', {headers: headers()});
	if (!r.ok) return;
	const p = await r.json();
	$('model').textContent = p.model || '';
	const ctx = p.default_generation_settings?.n_ctx;
	$('ctx').textContent = ctx ? 'context ' + ctx.toLocaleString('en') + ' tokens' : '';
	$('version').textContent = p.version ? String(p.version).replace(/^lanes /, 'version ') : '';
	if (ctx) about = p;
}
// A server of several models (--models-dir): a picker of them, each with its family, size and
// state; the one picked is named in every request and is the one the dashboard's experts show.
const picked = () => ($('pick-row').hidden ? '' : $('pick').value);
function mib(n) { return n >= 1 << 30 ? (n / (1 << 30)).toFixed(1) + ' GiB' : Math.max(1, Math.round(n / (1 << 20))) + ' MiB'; }
async function showModels() {
	const r = await fetch('/v1/models', {headers: headers()});
	if (!r.ok) return;
	const list = (await r.json()).data || [];
	const many = list.some((m) => m.status);
	$('pick-row').hidden = !many;
	if (!many) return;
	const want = $('pick').value || settings.model;
	$('pick').replaceChildren(...list.map((m) => {
		const o = el('option', null, [m.id, m.family, m.size_bytes ? mib(m.size_bytes) : '', m.status?.value].filter(Boolean).join(' · '));
		o.value = m.id;
		return o;
	}));
	if (list.some((m) => m.id === want)) $('pick').value = want;
	$('model').textContent = $('pick').value;
}
$('pick').addEventListener('change', () => {
	settings.model = $('pick').value;
	localStorage.setItem(SETTINGS, JSON.stringify(settings));
	$('model').textContent = $('pick').value;
	expertsGone = false; // another model may have experts
});
// While the model loads: its progress and what it is doing, as /health says.
let loading = false;
function showHealth(hj) {
	loading = hj.status === 'loading';
	const pct = loading && typeof hj.progress === 'number' ? Math.round(hj.progress * 100) + '%' : '';
	$('health').textContent = [hj.status, pct, loading ? hj.stage : ''].filter(Boolean).join(' · ');
	$('loadbar').hidden = !loading;
	if (loading && typeof hj.progress === 'number') $('loadbar').value = hj.progress;
}
async function poll() {
	try {
		const h = await fetch('/health', {headers: headers()});
		showHealth(await h.json());
		if (!about) await showAbout();
		if (loading) return;
		await showModels();
		// the rates are sampled every second even while the chat is shown: the plots cover the last minute
		const mr = await fetch('/metrics', {headers: headers()});
		const mv = mr.ok ? metrics(await mr.text()) : null;
		const now = performance.now() / 1000;
		const cur = mv && {t: now, gen: mv.lanes_generated_tokens_total || 0, prompt: mv.lanes_prompt_tokens_total || 0, rounds: mv.lanes_round_seconds_count || 0};
		if (cur && prev && now > prev.t) {
			const dt = now - prev.t;
			history.push({decode: (cur.gen - prev.gen) / dt, prompt: (cur.prompt - prev.prompt) / dt, rounds: (cur.rounds - prev.rounds) / dt});
			if (history.length > SAMPLES) history.shift();
		}
		prev = cur;
		if ($('dash').hidden) return;
		const sr = await fetch('/slots', {headers: headers()});
		if (!sr.ok || !mv) { $('cards').replaceChildren(card('needs the API key (--protect-control)', sr.ok ? mr.status : sr.status)); return; }
		const sl = await sr.json();
		const busyN = sl.lanes.filter((l) => l.phase !== 'idle').length;
		const drafted = mv.lanes_draft_tokens_total || 0, acc = mv.lanes_draft_accepted_tokens_total || 0;
		const cards = [card('lanes busy', busyN + ' / ' + sl.lanes.length), card('queue', String(sl.queue_depth)),
			card('KV pages used', (mv.lanes_kv_pages_used || 0) + ' / ' + ((mv.lanes_kv_pages_used || 0) + (mv.lanes_kv_pages_free || 0))),
			card('draft acceptance', drafted ? Math.round((100 * acc) / drafted) + '%' : '–')];
		cards.push(sl.window ? card('window (demand ' + sl.window.demand_tokens + ')', sl.window.tokens + ' / ' + sl.window.max_tokens)
			: card('window (elastic with --memory)', 'fixed'));
		$('cards').replaceChildren(...cards);
		$('plots').replaceChildren(chart('tokens', 'Tokens per second', 'tok/s', [{key: 'decode', label: 'decode', color: '#36c'}, {key: 'prompt', label: 'prompt', color: '#e8842c'}]),
			chart('rounds', 'Rounds per second', 'rounds/s', [{key: 'rounds', label: 'rounds', color: '#2a9d5c'}]));
		const tb = $('lanes').tBodies[0];
		tb.replaceChildren(...sl.lanes.map((l) => {
			const tr = el('tr');
			tr.dataset.phase = l.phase;
			tr.append(el('td', null, String(l.id)), el('td', 'phase-' + l.phase, l.phase),
				el('td', null, l.phase === 'idle' ? '' : l.filled_tokens + '/' + l.prompt_tokens + ' prompt, ' + l.generated_tokens + ' out'));
			return tr;
		}));
		await pollExperts();
	} catch { $('health').textContent = 'unreachable'; }
}
// every second; four times a second while the model loads
(function tick() { poll().finally(() => setTimeout(tick, loading ? 250 : 1000)); })();
draw();
