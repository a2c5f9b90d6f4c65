// base/version: what this build is — the version and commit the Makefile passes from git
// (`unknown` without it) and the compiler flags — for `lanes --version`, logs and /props.
#include "base/base.h"

#ifndef LANES_VERSION
#define LANES_VERSION "unknown"
#endif
#ifndef LANES_COMMIT
#define LANES_COMMIT "unknown"
#endif
#ifndef LANES_BUILD_FLAGS
#define LANES_BUILD_FLAGS "unknown"
#endif

const char *base_version_string(void) { return "lanes " LANES_VERSION " (commit " LANES_COMMIT ")"; }

const char *base_build_flags(void) { return LANES_BUILD_FLAGS; }
