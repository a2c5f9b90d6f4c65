// server/gen/think: reasoning as every adapter uses it — the family and its end tokens chosen at
// load, what a request asks of the thinking (on, off, a budget) settled in its prompt and lane
// request, the output split into thinking and answer as it streams, and the signatures that let
// a thinking block sent back be told from one edited.
#include "server/gen/gen.h"

#include <string.h>

int srv_reason_load(srv_model *M, char *err, size_t errlen) {
	http_server *s = M->s;
	M->reason = s->reason_auto ? M->chat.reason : s->reason_named;
	M->n_think_end = 0;
	// the switch of the family in use, which --reasoning-format may name apart from the template's own
	M->reason_switch = M->reason && M->reason->off_var && M->chat.src && strstr(M->chat.src, M->reason->off_var);
	if (!M->reason) return 0;
	// what a spent budget forces: the close marker and what the template writes after it
	int rc = reason_end_ids(M->reason, M->vocab, M->think_end, LANE_THINK_END, &M->n_think_end, err, errlen);
	if (rc) return rc;
	LOG_INFO("server", "reasoning: %s (%s), thinking in %s ... %s", M->reason->name, s->reason_auto ? "the chat template's" : HTTP_SETTING(&s->cfg, reasoning_format),
		 M->reason->open, M->reason->close);
	return 0;
}

int srv_think_effort(srv_gen *g, const char *effort, const char *param, srv_err *e) {
	static const struct { const char *name; enum srv_think think; int32_t budget; } levels[] = {
		{"none", SRV_THINK_OFF, -1}, {"minimal", SRV_THINK_ON, 256}, {"low", SRV_THINK_ON, 1024},
		{"medium", SRV_THINK_ON, 4096}, {"high", SRV_THINK_ON, -1}, {"xhigh", SRV_THINK_ON, -1}};
	(void)param, (void)e;
	for (size_t k = 0; effort && k < sizeof levels / sizeof levels[0]; k++)
		if (!strcmp(effort, levels[k].name)) {
			g->think = levels[k].think;
			g->think_budget = levels[k].budget;
		}
	return 0;
}

// ---- the prompt ---------------------------------------------------------------------------------

bool srv_think_prompt(srv_model *M, srv_gen *g, bool prefill, char **text, size_t *len) {
	const reason_format *f = M->reason;
	g->reasoning = f != NULL;
	if (!f) return true;
	bool inside = false;
	if (reason_prompt_end(f, !prefill && g->think == SRV_THINK_OFF, M->reason_switch, !prefill && g->grammar, text, len, &inside)) return false;
	g->think_inside = inside;
	g->lthink = (lane_think){.open = f->open, .close = f->close, .inside = inside, .budget = g->think_budget,
				 .end_ids = M->think_end, .n_end_ids = M->n_think_end};
	return true;
}

// ---- the output -----------------------------------------------------------------------------------

void srv_choice_text(srv_call *c, int i, const char *text, size_t len, const lane_event *tok, bool end) {
	srv_choice *ch = &c->ch[i];
	if (!c->g.reasoning) {
		srv_buf_add(&ch->text, text, len);
		if (len || tok) c->api->text(c, i, text, len, tok);
		return;
	}
	srv_buf_add(&ch->raw, text, len);
	const enum reason_phase was = ch->rs.phase;
	reason_scan_feed(&ch->rs, ch->raw.p ? ch->raw.p : "", ch->raw.len, end);
	// a token read in the section is thinking; those read before the reply showed whether it
	// thinks are thinking when it does
	if (tok && was == REASON_IN) ch->n_think++;
	else if (tok && was == REASON_BEFORE) ch->n_unsure++;
	if (ch->rs.phase != REASON_BEFORE && ch->n_unsure) {
		if (ch->rs.thought) ch->n_think += ch->n_unsure;
		ch->n_unsure = 0;
	}
	if (ch->rs.think_len > ch->thinking.len) {
		const size_t from = ch->thinking.len, k = ch->rs.think_len - from;
		srv_buf_add(&ch->thinking, ch->raw.p + ch->rs.think_off + from, k);
		if (c->api->thinking && c->g.stream) c->api->thinking(c, i, ch->raw.p + ch->rs.think_off + from, k);
	}
	const size_t al = reason_scan_answer(&ch->rs, ch->raw.len), from = ch->text.len;
	if (al > from) srv_buf_add(&ch->text, ch->raw.p + ch->rs.answer_off + from, al - from);
	if (al > from || tok) c->api->text(c, i, ch->text.p ? ch->text.p + from : "", al > from ? al - from : 0, tok);
}

int32_t srv_call_thought(const srv_call *c) {
	int32_t n = 0;
	for (int i = 0; i < c->n; i++) n += c->ch[i].n_think;
	return n;
}

// ---- signatures ---------------------------------------------------------------------------------

void srv_think_sign(const http_server *s, const char *text, size_t len, char out[SRV_THINK_SIG]) {
	static const char b64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
	uint8_t mac[33];
	hmac_sha256(s->think_key, sizeof s->think_key, text, len, mac);
	mac[32] = 0;
	size_t o = 0;
	for (int i = 0; i < 33; i += 3) {
		const uint32_t v = (uint32_t)mac[i] << 16 | (uint32_t)(i + 1 < 33 ? mac[i + 1] : 0) << 8 | (i + 2 < 33 ? mac[i + 2] : 0);
		out[o++] = b64[v >> 18 & 63];
		out[o++] = b64[v >> 12 & 63];
		out[o++] = b64[v >> 6 & 63];
		out[o++] = b64[v & 63];
	}
	// 32 bytes are 43 characters and one '='
	out[43] = '=';
	out[44] = 0;
}

bool srv_think_signed(const http_server *s, const char *text, size_t len, const char *sig) {
	char want[SRV_THINK_SIG];
	srv_think_sign(s, text, len, want);
	if (!sig || strlen(sig) != SRV_THINK_SIG - 1) return false;
	unsigned char d = 0;
	for (int i = 0; i < SRV_THINK_SIG - 1; i++) d |= (unsigned char)(want[i] ^ sig[i]);
	return d == 0;
}
