# lanes — build, test, bench, run. `make help` lists the targets.

CC       ?= cc
BUILD    ?= build
SHARED   ?= $(if $(LANES_SHARED),$(LANES_SHARED),../shared)
MODEL    ?= $(SHARED)/models/stories260K.gguf
SANITIZE ?=
HOST     ?= 127.0.0.1
PORT     ?= 8080
ARGS     ?=

# Parallel by default; an explicit -j on the command line wins.
ifeq ($(filter -j%,$(MAKEFLAGS)),)
MAKEFLAGS += -j$(shell nproc 2>/dev/null || echo 2)
endif

# The tests and the default model live in the shared data folder: say so before building.
ifneq ($(filter test unit unit-c bench,$(MAKECMDGOALS)),)
ifeq ($(wildcard $(SHARED)/models),)
$(error the shared data folder is missing: no $(SHARED)/models. Put it beside this repository as ../shared, or set LANES_SHARED=/path/to/shared)
endif
endif
ifneq ($(filter run,$(MAKECMDGOALS)),)
ifeq ($(wildcard $(MODEL)),)
$(error no model at $(MODEL): put the shared data folder beside this repository as ../shared, set LANES_SHARED=/path/to/shared, or give MODEL=path/to/model.gguf)
endif
endif

WARN     := -Wall -Wextra -Werror -Wshadow -Wno-unused-parameter -Wno-format-truncation
CFLAGS   ?= -O2 -g
CFLAGS   += -std=c11 $(WARN) -D_GNU_SOURCE -pthread -Isrc -fno-strict-aliasing -ffp-contract=off
LDLIBS   := -lmicrohttpd -lpcre2-8 -ljansson -lcurl -lm -lpthread

ifneq ($(SANITIZE),)
override BUILD := $(BUILD)/san
CFLAGS   += -fsanitize=$(SANITIZE) -fno-omit-frame-pointer -fno-sanitize-recover=all
LDFLAGS  += -fsanitize=$(SANITIZE)
endif

LIB_SRC  := $(sort $(shell find src -name '*.c' ! -path 'src/cli/*'))
CLI_SRC  := $(sort $(wildcard src/cli/*.c))
TEST_SRC := $(sort $(wildcard tests/unit/test_*.c))
TEST_SUP := $(sort $(filter-out $(TEST_SRC),$(wildcard tests/unit/*.c)))
BENCH_SRC:= $(sort $(wildcard bench/*.c))

LIB_OBJ  := $(LIB_SRC:%.c=$(BUILD)/%.o)
CLI_OBJ  := $(CLI_SRC:%.c=$(BUILD)/%.o)
CLI_LIB  := $(BUILD)/liblanes-cli.a
SUP_OBJ  := $(TEST_SUP:%.c=$(BUILD)/%.o)
TESTS    := $(TEST_SRC:tests/unit/%.c=$(BUILD)/tests/%)
BENCHES  := $(BENCH_SRC:bench/%.c=$(BUILD)/bench/%)
LIB      := $(BUILD)/liblanes.a

.DEFAULT_GOAL := all

# One line per file built ("  CC   src/x.c"); V=1 prints the full commands.
ifeq ($(V),1)
quiet =
else
quiet = @printf '  %-4s %s\n' '$(1)' '$(2)';
endif

# lanes_version_string(): git's names for this tree, or `unknown` outside a checkout.
VERSION  := $(or $(shell git describe --tags --always --dirty 2>/dev/null),unknown)
COMMIT   := $(or $(shell git rev-parse --short HEAD 2>/dev/null),unknown)
BUILD_ID := $(VERSION) $(COMMIT) $(CC) $(CFLAGS)
$(BUILD)/src/base/version.o: EXTRA := -DLANES_VERSION='"$(VERSION)"' -DLANES_COMMIT='"$(COMMIT)"' \
	-DLANES_BUILD_FLAGS='"$(CC) $(CFLAGS)"'
$(BUILD)/src/base/version.o: $(BUILD)/build-id
# rewritten only when the version, commit or flags change, so version.o rebuilds then alone
$(BUILD)/build-id: FORCE
	@mkdir -p $(dir $@)
	@echo '$(BUILD_ID)' | cmp -s - $@ || echo '$(BUILD_ID)' > $@

# The web page's files as C arrays (xxd -i), compiled into the server.
WEBUI    := $(sort $(wildcard src/server/ops/webui/*))
$(BUILD)/gen/webui_files.h: $(WEBUI)
	@mkdir -p $(dir $@)
	$(call quiet,GEN,$@)cd src/server/ops/webui && for f in $(notdir $(WEBUI)); do xxd -i $$f; done > $(CURDIR)/$@.tmp && mv $(CURDIR)/$@.tmp $(CURDIR)/$@
$(BUILD)/src/server/ops/webui.o: $(BUILD)/gen/webui_files.h
$(BUILD)/src/server/ops/webui.o: EXTRA := -I$(BUILD)/gen

# x86 kernels are compiled for their instruction set; CPUID picks them at run time.
AVX2_FLAGS   := -mavx2 -mfma -mf16c
AVX512_FLAGS := -mavx512f -mavx512bw -mavx512vl -mavx512dq -mavx512vnni -mavx512bf16 -mavx2 -mfma -mf16c
$(BUILD)/src/tensor/x86/%_avx2.o:   EXTRA := $(AVX2_FLAGS)
$(BUILD)/src/tensor/x86/%_avx512.o: EXTRA := $(AVX512_FLAGS)

.PHONY: all test unit unit-c bench run deps clean fuzz help
all: deps-check $(BUILD)/lanes

help:
	@echo "make            build $(BUILD)/lanes"
	@echo "make run        serve MODEL (default: stories260K) on HOST:PORT (127.0.0.1:8080), extra ARGS"
	@echo "make test       build and run every test"
	@echo "make bench      run the benchmarks"
	@echo "make SANITIZE=address,undefined test   the same under ASan+UBSan"
	@echo "make V=1        build printing each command in full (by default one line per file)"
	@echo "make install    install lanes, its man pages, completions and systemd unit under PREFIX (/usr/local); DESTDIR stages"
	@echo "make uninstall  remove what make install wrote"

# order-only: under -j the packages are in before the first compile, and a rebuild is never forced
$(BUILD)/%.o: %.c | deps-check
	@mkdir -p $(dir $@)
	$(call quiet,CC,$<)$(CC) $(CFLAGS) $(EXTRA) -MMD -MP -c $< -o $@

$(LIB): $(LIB_OBJ)
	@mkdir -p $(dir $@)
	$(call quiet,AR,$@)rm -f $@ && ar rcs $@ $^

$(BUILD)/lanes: $(CLI_OBJ) $(LIB)
	$(call quiet,LD,$@)$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $(CLI_OBJ) $(LIB) $(LDLIBS)

# the CLI without main: its settings table, for the tests and benchmarks that read the environment
$(CLI_LIB): $(filter-out $(BUILD)/src/cli/main.o,$(CLI_OBJ))
	$(call quiet,AR,$@)rm -f $@ && ar rcs $@ $^

$(BUILD)/tests/%: $(BUILD)/tests/unit/%.o $(SUP_OBJ) $(CLI_LIB) $(LIB)
	@mkdir -p $(dir $@)
	$(call quiet,LD,$@)$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $< $(SUP_OBJ) $(CLI_LIB) $(LIB) $(LDLIBS)

$(BUILD)/bench/%: $(BUILD)/bench/%.o $(CLI_LIB) $(LIB)
	@mkdir -p $(dir $@)
	$(call quiet,LD,$@)$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $< $(CLI_LIB) $(LIB) $(LDLIBS)

# Installs missing Debian packages when root, else prints the apt-get line.
deps:
	@scripts/deps.sh

deps-check:
	@scripts/deps.sh --quiet

unit: deps-check $(BUILD)/lanes $(TESTS)
	@scripts/deps.sh --node --quiet
	@LANES_SHARED=$(SHARED) LANES_BIN=$(BUILD)/lanes scripts/run-tests.sh $(BUILD)

# the C unit tests alone (CI runs them once more under the sanitizers)
unit-c: deps-check $(BUILD)/lanes $(TESTS)
	@LANES_SHARED=$(SHARED) LANES_BIN=$(BUILD)/lanes LANES_ONLY=c scripts/run-tests.sh $(BUILD)

test: unit

bench: deps-check $(BUILD)/lanes $(BENCHES)
	@LANES_SHARED=$(SHARED) scripts/bench.sh $(BUILD)

run: all
	$(BUILD)/lanes serve -m $(MODEL) --host $(HOST) --port $(PORT) $(ARGS)

# libFuzzer targets (clang 14 or newer); `make fuzz` builds them and replays each one's corpus
# through it once (the corpora replay in `make test` too). The library is built once for them,
# instrumented, with the reference kernels alone: the targets fuzz parsers, and the SIMD kernel
# files are neither needed nor quick to build under the sanitizers.
FUZZ_CC    ?= clang
FUZZ_FLAGS := -std=c11 -D_GNU_SOURCE -pthread -Isrc -g -O1 -fno-omit-frame-pointer -fsanitize=address,undefined
FUZZ_SRC   := $(sort $(wildcard tests/fuzz/fuzz_*.c))
FUZZ_LIB   := $(BUILD)/fuzz/liblanes.a
FUZZ_BINS  := $(FUZZ_SRC:tests/fuzz/%.c=$(BUILD)/fuzz/%)
# each target's corpus folder under tests/corpus
FUZZ_CORPUS_fuzz_gguf      := gguf
FUZZ_CORPUS_fuzz_grammar   := grammar
FUZZ_CORPUS_fuzz_http_head := http_head
FUZZ_CORPUS_fuzz_schema    := schema_text
FUZZ_CORPUS_fuzz_template  := template
fuzz: $(FUZZ_BINS)
	@set -e; $(foreach f,$(notdir $(FUZZ_BINS)),\
		test -n "$(FUZZ_CORPUS_$f)" || { echo "$f: no corpus named in the Makefile (FUZZ_CORPUS_$f)"; exit 1; }; \
		$(BUILD)/fuzz/$f -runs=0 tests/corpus/$(FUZZ_CORPUS_$f) 2>$(BUILD)/fuzz/$f.log || { tail -n 30 $(BUILD)/fuzz/$f.log; exit 1; }; \
		echo "$f: tests/corpus/$(FUZZ_CORPUS_$f) replayed ($$(ls tests/corpus/$(FUZZ_CORPUS_$f) | wc -l) inputs)";)
$(BUILD)/fuzz/obj/%.o: %.c
	@mkdir -p $(dir $@)
	$(call quiet,CC,$<)$(FUZZ_CC) $(FUZZ_FLAGS) -fsanitize=fuzzer-no-link $(EXTRA) -MMD -MP -c $< -o $@
$(BUILD)/fuzz/obj/src/tensor/kernels.o: EXTRA := -DLANES_KERNELS_REF_ONLY
$(BUILD)/fuzz/obj/src/server/ops/webui.o: $(BUILD)/gen/webui_files.h
$(BUILD)/fuzz/obj/src/server/ops/webui.o: EXTRA := -I$(BUILD)/gen
FUZZ_LIB_SRC := $(filter-out src/tensor/x86/kernels_%.c,$(LIB_SRC))
$(FUZZ_LIB): $(FUZZ_LIB_SRC:%.c=$(BUILD)/fuzz/obj/%.o)
	$(call quiet,AR,$@)rm -f $@ && ar rcs $@ $^
$(BUILD)/fuzz/%: tests/fuzz/%.c $(FUZZ_LIB)
	$(call quiet,LD,$@)$(FUZZ_CC) $(FUZZ_FLAGS) -fsanitize=fuzzer -MMD -MP -o $@ $< $(FUZZ_LIB) $(LDLIBS)

clean:
	rm -rf $(BUILD)

# ---- install -------------------------------------------------------------------------------
# `make install [PREFIX=/usr/local] [DESTDIR=staging]`: the binary, a man page for lanes and one
# per command and the bash and zsh completions (all written by the binary from its settings
# table), the systemd unit and the license. `make uninstall` removes exactly these.
PREFIX      ?= /usr/local
BINDIR      ?= $(PREFIX)/bin
MANDIR      ?= $(PREFIX)/share/man
BASHCOMPDIR ?= $(PREFIX)/share/bash-completion/completions
ZSHCOMPDIR  ?= $(PREFIX)/share/zsh/site-functions
UNITDIR     ?= $(PREFIX)/lib/systemd/system
DOCDIR      ?= $(PREFIX)/share/doc/lanes
LANES_CMDS  := $(shell sed -n 's/^\t{CMD_[A-Z]*, "\([a-z]*\)".*/\1/p' src/cli/main.c)
INSTALLED   := $(BINDIR)/lanes $(MANDIR)/man1/lanes.1 $(LANES_CMDS:%=$(MANDIR)/man1/lanes-%.1) $(BASHCOMPDIR)/lanes \
	$(ZSHCOMPDIR)/_lanes $(UNITDIR)/lanes.service $(DOCDIR)/LICENSE

.PHONY: install uninstall
install: $(BUILD)/lanes
	@echo "install $(DESTDIR)$(PREFIX)"
	install -d $(DESTDIR)$(BINDIR) $(DESTDIR)$(MANDIR)/man1 $(DESTDIR)$(BASHCOMPDIR) $(DESTDIR)$(ZSHCOMPDIR) \
		$(DESTDIR)$(UNITDIR) $(DESTDIR)$(DOCDIR)
	install -m 755 $(BUILD)/lanes $(DESTDIR)$(BINDIR)/lanes
	$(BUILD)/lanes help --man > $(DESTDIR)$(MANDIR)/man1/lanes.1
	for c in $(LANES_CMDS); do $(BUILD)/lanes help --man $$c > $(DESTDIR)$(MANDIR)/man1/lanes-$$c.1 || exit 1; done
	chmod 644 $(DESTDIR)$(MANDIR)/man1/lanes.1 $(LANES_CMDS:%=$(DESTDIR)$(MANDIR)/man1/lanes-%.1)
	$(BUILD)/lanes help --bash > $(DESTDIR)$(BASHCOMPDIR)/lanes && chmod 644 $(DESTDIR)$(BASHCOMPDIR)/lanes
	$(BUILD)/lanes help --zsh > $(DESTDIR)$(ZSHCOMPDIR)/_lanes && chmod 644 $(DESTDIR)$(ZSHCOMPDIR)/_lanes
	sed 's|@BINDIR@|$(BINDIR)|g' dist/lanes.service.in > $(DESTDIR)$(UNITDIR)/lanes.service && chmod 644 $(DESTDIR)$(UNITDIR)/lanes.service
	install -m 644 LICENSE $(DESTDIR)$(DOCDIR)/LICENSE

uninstall:
	rm -f $(INSTALLED:%=$(DESTDIR)%)
	-rmdir $(DESTDIR)$(DOCDIR) 2>/dev/null

.PHONY: deps-check FORCE
.SECONDARY:
-include $(shell find $(BUILD) -name '*.d' 2>/dev/null)
