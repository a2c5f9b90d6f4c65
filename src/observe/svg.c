// observe/svg: the expert report as an SVG image — a heat map of experts x layers for all rows
// and for each domain (red: more than the uniform share of activations, blue: less), and the
// working-set curves (the share of a layer's mass its k hottest experts hold, mean over layers).
#include "observe/observe_int.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static const char *const palette[] = {"#222222", "#d62728", "#1f77b4", "#2ca02c", "#ff7f0e", "#9467bd",
				      "#8c564b", "#e377c2", "#17becf", "#bcbd22", "#7f7f7f"};
#define N_COLORS (sizeof palette / sizeof palette[0])

// Text escaped for XML.
static void text(FILE *f, const char *s) {
	for (; *s; s++) {
		switch (*s) {
		case '<': fputs("&lt;", f); break;
		case '>': fputs("&gt;", f); break;
		case '&': fputs("&amp;", f); break;
		case '"': fputs("&quot;", f); break;
		case '\'': fputs("&#39;", f); break;
		default:
			if ((unsigned char)*s >= 0x20) fputc(*s, f);
		}
	}
}

static double clampd(double v, double lo, double hi) { return v < lo ? lo : v > hi ? hi : v; }

// A cell's colour: log2 of activations over the uniform share, from -2 (blue) through 0 (white) to +2 (red).
static void cell_color(double ratio, char *out, size_t n) {
	const double t = ratio > 0 ? clampd(log2(ratio) / 2, -1, 1) : -1;
	const int fade = (int)lround(255 * (1 - fabs(t)));
	if (t >= 0) snprintf(out, n, "#ff%02x%02x", fade, fade);
	else snprintf(out, n, "#%02x%02xff", fade, fade);
}

// One heat map at (x, y): returns its height.
static int heat(FILE *f, const obs_view *v, int x, int y, int cw, int ch, bool titles) {
	fprintf(f, "<text x=\"%d\" y=\"%d\" class=\"h\">", x, y + 14);
	text(f, v->name);
	fprintf(f, " (%llu rows)</text>\n", (unsigned long long)v->rows);
	const int top = y + 22, left = x + 34;
	const double uniform = v->rows ? (double)v->rows * v->K / v->E : 0;
	const int lstep = ch >= 12 ? 1 : (12 + ch - 1) / ch, xstep = cw >= 16 ? 1 : (16 + cw - 1) / cw;
	for (int32_t e = 0; e < v->E; e += xstep) fprintf(f, "<text x=\"%d\" y=\"%d\" class=\"s\">%d</text>", left + e * cw, top + 8, e);
	for (int32_t l = 0; l < v->L; l++) {
		const int cy = top + 12 + l * ch;
		if (l % lstep == 0) fprintf(f, "<text x=\"%d\" y=\"%d\" class=\"s\">L%d</text>", x, cy + ch - 1, l);
		for (int32_t e = 0; e < v->E; e++) {
			const uint64_t a = v->act[(size_t)l * v->E + e];
			const double ratio = uniform > 0 ? a / uniform : 1;
			char col[8];
			cell_color(ratio, col, sizeof col);
			fprintf(f, "<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" fill=\"%s\">", left + e * cw, cy, cw, ch, col);
			if (titles) fprintf(f, "<title>layer %d, expert %d: %llu (%.2fx uniform)</title>", l, e, (unsigned long long)a, ratio);
			fputs("</rect>", f);
		}
		fputc('\n', f);
	}
	return 22 + 12 + v->L * ch + 8;
}

// The working-set curves at (x, y), w x h: the share of mass the k hottest experts hold.
static void curves(FILE *f, const obs_report *r, int x, int y, int w, int h) {
	fprintf(f, "<text x=\"%d\" y=\"%d\" class=\"h\">working set: share of a layer's mass on its k hottest experts "
		   "(mean over layers)</text>\n", x, y + 14);
	const int px = x + 40, py = y + 24, pw = w - 160, ph = h - 50;
	fprintf(f, "<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" fill=\"none\" stroke=\"#999\"/>\n", px, py, pw, ph);
	fprintf(f, "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"#bbb\" stroke-dasharray=\"4 3\"/>\n", px, py + ph, px + pw, py);
	for (int i = 0; i <= 4; i++) {
		const int yy = py + ph - i * ph / 4;
		fprintf(f, "<text x=\"%d\" y=\"%d\" class=\"s\">%d%%</text>", x, yy + 4, i * 25);
	}
	fprintf(f, "<text x=\"%d\" y=\"%d\" class=\"s\">0</text><text x=\"%d\" y=\"%d\" class=\"s\">%d experts</text>\n", px,
		py + ph + 12, px + pw - 40, py + ph + 12, r->all.E);
	for (int32_t d = -1; d < r->n_dom; d++) {
		const obs_view *v = d < 0 ? &r->all : &r->dom[d];
		const char *col = palette[(size_t)(d + 1) % N_COLORS];
		fprintf(f, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"%d\" points=\"%d,%d", col, d < 0 ? 2 : 1, px, py + ph);
		for (int32_t k = 1; k <= v->E; k++) {
			double share = 0;
			for (int32_t l = 0; l < v->L; l++) {
				const double *cum = v->cum + (size_t)l * (v->E + 1);
				share += cum[v->E] > 0 ? cum[k] / cum[v->E] : (double)k / v->E;
			}
			share /= v->L;
			fprintf(f, " %.1f,%.1f", px + (double)pw * k / v->E, py + ph - ph * share);
		}
		fprintf(f, "\"/>\n<text x=\"%d\" y=\"%d\" style=\"fill:%s\">", px + pw + 10, py + 10 + (d + 1) * 14, col);
		text(f, v->name);
		fprintf(f, "</text>\n");
	}
}

char *obs_experts_svg(const lane_experts *e, const char *model_name, size_t *len) {
	obs_report r;
	if (obs_report_make(&r, e)) return NULL;
	char *buf = NULL;
	size_t n = 0;
	FILE *f = open_memstream(&buf, &n);
	if (!f) {
		obs_report_free(&r);
		return NULL;
	}
	const int32_t E = r.all.E, L = r.all.L;
	const int cw = (int)clampd(520.0 / E, 3, 24), ch = (int)clampd(200.0 / L, 3, 18);
	const int panel_w = 34 + E * cw + 20, width = panel_w * 2 + 20 > 720 ? panel_w * 2 + 20 : 720;
	const int panel_h = 22 + 12 + L * ch + 8, rows_of_panels = (r.n_dom + 2) / 2, top = 46;
	const int height = top + rows_of_panels * panel_h + 240;
	const bool titles = (int64_t)E * L <= 4096;
	fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\">\n", width, height,
		width, height);
	fprintf(f, "<style>text{font:11px sans-serif;fill:#333}.h{font-weight:bold;font-size:12px}.s{font-size:9px}</style>\n"
		   "<rect width=\"100%%\" height=\"100%%\" fill=\"#fff\"/>\n<text x=\"10\" y=\"18\" class=\"h\">");
	text(f, model_name);
	fprintf(f, ": %d experts, %d per token, %d layers</text>\n<text x=\"10\" y=\"36\">activations against the "
		   "uniform share:</text>\n", E, r.all.K, L);
	static const double scale[] = {0.25, 0.5, 1, 2, 4};
	for (int i = 0; i < 5; i++) {
		char col[8];
		cell_color(scale[i], col, sizeof col);
		fprintf(f, "<rect x=\"%d\" y=\"27\" width=\"14\" height=\"12\" fill=\"%s\" stroke=\"#ccc\"/>"
			   "<text x=\"%d\" y=\"37\" class=\"s\">%gx</text>\n", 250 + i * 46, col, 267 + i * 46, scale[i]);
	}
	for (int32_t p = -1; p < r.n_dom; p++) {
		const int col = (p + 1) % 2, row = (p + 1) / 2;
		heat(f, p < 0 ? &r.all : &r.dom[p], 10 + col * panel_w, top + row * panel_h, cw, ch, titles);
	}
	curves(f, &r, 10, top + 4 + rows_of_panels * panel_h, width - 20 < 600 ? width - 20 : 600, 220);
	fprintf(f, "</svg>\n");
	const bool bad = ferror(f) != 0;
	fclose(f);
	obs_report_free(&r);
	if (bad) {
		free(buf);
		return NULL;
	}
	*len = n;
	return buf;
}
