// cli/progress: the one progress display of the commands (pull, gen, quantize, model loads) —
// a bar redrawn in place when stderr is a terminal, else a plain line at each tenth or none;
// quiet below --log info and with --log-format json.
#include "cli/cli.h"

#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

#define REDRAW_US 100000 // a bar is redrawn at most ten times a second

void cli_progress_start(cli_progress *p, const char *what, bool bytes, bool lines) {
	memset(p, 0, sizeof *p);
	p->what = what;
	p->bytes = bytes;
	p->tty = isatty(2);
	p->on = base_log_level >= LOG_LEVEL_INFO && !base_log_json && (p->tty || lines);
	p->t0_us = base_now_us();
	p->t0_done = -1;
	p->last_step = -1;
}

static void mib(int64_t b, char *out, size_t n) { snprintf(out, n, "%.1f MiB", (double)b / 1048576.0); }

void cli_progress_update(cli_progress *p, int64_t done, int64_t total, const char *note) {
	if (!p->on) return;
	const uint64_t now = base_now_us();
	if (p->t0_done < 0) p->t0_done = done; // a resumed download's rate counts what this run adds
	const bool whole = total > 0 && done >= total;
	const double secs = (double)(now - p->t0_us) / 1e6;
	const double rate = secs > 0 ? (double)(done - p->t0_done) / secs : 0;
	const int pct = total > 0 ? (int)(done * 100 / total) : 0;
	char amount[96] = "", a[32], b[32];
	if (p->bytes) {
		mib(done, a, sizeof a);
		mib(total, b, sizeof b);
		snprintf(amount, sizeof amount, "%s / %s  %.1f MiB/s", a, total > 0 ? b : "?", rate / 1048576.0);
	} else {
		snprintf(amount, sizeof amount, "%lld / %lld", (long long)done, (long long)total);
	}
	if (!p->tty) {
		const int step = total > 0 ? (int)(done * 10 / total) : -1;
		if (step <= p->last_step) return;
		p->last_step = step;
		fprintf(stderr, "%s: %d%% (%s)\n", p->what, step * 10, amount);
		return;
	}
	if (p->drawn && !whole && now - p->last_us < REDRAW_US) return;
	p->last_us = now;
	char bar[31], eta[32] = "";
	const int fill = total > 0 ? (int)(done * 30 / total) : 0;
	for (int i = 0; i < 30; i++) bar[i] = i < fill ? '#' : '.';
	bar[30] = 0;
	if (p->bytes && rate > 0 && total > done) snprintf(eta, sizeof eta, "  ETA %.0f s", (double)(total - done) / rate);
	char line[512];
	int n = snprintf(line, sizeof line, "%s [%s] %3d%%  %s%s%s%s", p->what, bar, pct, amount, eta, note ? "  " : "", note ? note : "");
	struct winsize ws;
	if (!ioctl(2, TIOCGWINSZ, &ws) && ws.ws_col > 1 && n >= ws.ws_col) line[ws.ws_col - 1] = 0; // one row: \r redraws it
	flockfile(stderr);
	fprintf(stderr, "\r%s\033[K", line);
	base_log_bar(true);
	funlockfile(stderr);
	p->drawn = true;
}

// Leaves the line the bar held: wiped, or ended as drawn (unless a log line wiped it since).
static void leave(cli_progress *p, const char *how) {
	if (!p->on || !p->tty || !p->drawn) return;
	flockfile(stderr);
	if (base_log_bar(false)) fputs(how, stderr);
	funlockfile(stderr);
	p->drawn = false;
}

void cli_progress_clear(cli_progress *p) { leave(p, "\r\033[K"); }
void cli_progress_end(cli_progress *p) { leave(p, "\n"); }

void cli_progress_model(void *ud, uint64_t done, uint64_t total) {
	cli_progress *p = ud;
	cli_progress_update(p, (int64_t)done, (int64_t)total, NULL);
	if (done >= total) cli_progress_end(p);
}
