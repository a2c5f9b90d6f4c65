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

enum MHD_Result srv_webui(srv_conn *c) {
	const char *url = c->path;
	if (c->s->cfg.no_webui) {
		srv_err e;
		srv_fail(&e, SRV_E_NOT_FOUND, NULL, "the web page is off (--no-webui)");
		return srv_reply_error(c, &e);
	}
	for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
		if (strcmp(url, files[i].path)) continue;
		struct MHD_Response *r = MHD_create_response_from_buffer(*files[i].len, (void *)files[i].data, MHD_RESPMEM_PERSISTENT);
		if (!r) return MHD_NO;
		MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, files[i].ctype);
		MHD_add_response_header(r, "Content-Security-Policy",
					"default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self'; "
					"base-uri 'none'; form-action 'none'; frame-ancestors 'none'");
		MHD_add_response_header(r, "X-Content-Type-Options", "nosniff");
		MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
		return srv_reply_response(c, 200, r);
	}
	srv_err e;
	srv_fail(&e, SRV_E_NOT_FOUND, NULL, "no such file: %s", url);
	return srv_reply_error(c, &e);
}
