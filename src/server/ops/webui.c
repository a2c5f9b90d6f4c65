// server/ops/webui: the web page at GET / — index.html, app.js, app.css and the icon from
// src/server/ops/webui, compiled in by the Makefile (xxd -i into webui_files.h). Nothing is fetched at run time; a strict
// Content-Security-Policy keeps the page to its own script even if model text were misused.
#include "server/net/base.h"
#include "server/routes.h"

#include <string.h>

#include "webui_files.h"

typedef struct {
	const char *path, *ctype;
	const unsigned char *data;
	const unsigned int *len;
} webui_file;

static const webui_file files[] = {
	{"/", "text/html; charset=utf-8", index_html, &index_html_len},
	{"/ui/app.js", "text/javascript; charset=utf-8", app_js, &app_js_len},
	{"/ui/app.css", "text/css; charset=utf-8", app_css, &app_css_len},
	{"/ui/favicon.svg", "image/svg+xml", favicon_svg, &favicon_svg_len},
	{"/favicon.ico", "image/svg+xml", favicon_svg, &favicon_svg_len}, // asked for by browsers whatever the page names
};

void srv_webui(srv_conn *c) {
	const char *url = c->path;
	if (c->s->cfg.no_webui) {
		srv_err e;
		srv_fail(&e, SRV_E_NOT_FOUND, NULL, "the web page is off (%s)", HTTP_SETTING(&c->s->cfg, no_webui));
		srv_reply_error(c, &e);
		return;
	}
	for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
		if (strcmp(url, files[i].path)) continue;
		const char *const hdrs[] = {"Content-Type", files[i].ctype, "Content-Security-Policy",
					    "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self'; "
					    "base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
					    "X-Content-Type-Options", "nosniff", "Cache-Control", "no-cache", NULL};
		srv_reply_body(c, 200, files[i].data, *files[i].len, SRV_MEM_KEEP, hdrs);
		return;
	}
	srv_err e;
	srv_fail(&e, SRV_E_NOT_FOUND, NULL, "no such file: %s", url);
	srv_reply_error(c, &e);
}
