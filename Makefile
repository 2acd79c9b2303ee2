# gridpool -- the only entry point.  See README.md.
#
#   make deps        install the Debian packages (root, idempotent)
#   make             build everything into build/
#   make SANITIZE=address,undefined      same, with sanitizers, into build/san/
#   make test        deps + build + every suite; ends "N passed, N failed"
#   make up / down   private stack + services in the background
#   make demo        up, health of every service, what to try next
#   make bench       benchmarks, each next to its reference measured in the same run

PYTHON    := /usr/bin/python3
CC        ?= gcc
SANITIZE  ?=
ifeq ($(SANITIZE),)
BUILD     ?= build
OPT       ?= -O2
else
BUILD     ?= build/san
OPT       ?= -O1 -fno-omit-frame-pointer -fsanitize=$(SANITIZE) -fno-sanitize-recover=undefined
LDFLAGS   += -fsanitize=$(SANITIZE)
endif

PKGS      := libnats msgpack libpq yaml-0.1
CFLAGS    ?= -g
CFLAGS    += $(OPT) -std=c11 -D_DEFAULT_SOURCE -D_GNU_SOURCE -Wall -Wextra -Werror -Wshadow \
             -Wstrict-prototypes -Wwrite-strings -Wno-missing-field-initializers -pthread
# hiredis' --cflags would put /usr/include/hiredis on the path (its sds.h,
# read.h... shadow ours), so it is included as <hiredis/...> instead.
CPPFLAGS  += -Ishared/include -I$(BUILD)/gen $(shell pkg-config --cflags $(PKGS) 2>/dev/null) -D_FILE_OFFSET_BITS=64
LDLIBS    += $(shell pkg-config --libs $(PKGS) hiredis 2>/dev/null) -lev -ldl -lm -pthread

SCHEMAS   := $(shell find schemas -name '*.json' 2>/dev/null | sort)
GEN_C     := $(BUILD)/gen/msg_gen.c
GEN_H     := $(BUILD)/gen/msg_gen.h
LIB       := $(BUILD)/lib/libgp.a
LIB_SRC   := $(wildcard shared/src/*.c)
LIB_OBJ   := $(LIB_SRC:%.c=$(BUILD)/obj/%.o) $(BUILD)/obj/gen/msg_gen.o
# The library's pure part (no NATS, Redis, PostgreSQL or event loop): what
# a layer that must do no I/O links against, with no I/O library at all,
# so an upward call into the I/O code does not build.
CORE_SRC  := $(addprefix shared/src/,backoff.c buf.c cfg.c clock.c codec.c dbarray.c detect.c \
             err.c id.c imageref.c log.c metrics.c money.c op.c ratelimit.c shard.c streamcfg.c \
             xid.c)
CORE_OBJ  := $(CORE_SRC:%.c=$(BUILD)/obj/%.o) $(BUILD)/obj/gen/msg_gen.o
CORE      := $(BUILD)/lib/libgpcore.a
CORE_LDLIBS := -lmsgpackc -lm
SECCOMP   := $(BUILD)/seccomp.json

# Every folder in services/ is one program; its name maps to the binary.
# services/agent/ is also a library: the simulator runs the agent's own code
# (all but the gridpool-agent process' own files: main.c config.c start.c).
binname    = $(if $(filter gpctl,$(1)),gpctl,gridpool-$(1))
SERVICES  := $(notdir $(wildcard services/*))
BINS      := $(foreach s,$(SERVICES),$(BUILD)/bin/$(call binname,$(s)))
AGENT_PROC_SRC := $(addprefix services/agent/,main.c config.c start.c)
AGENT_LIB_SRC := $(filter-out $(AGENT_PROC_SRC),$(wildcard services/agent/*.c))
AGENT_LIB_OBJ := $(AGENT_LIB_SRC:%.c=$(BUILD)/obj/%.o)
SCHED_LIB_SRC := $(filter-out services/scheduler/main.c,$(wildcard services/scheduler/*.c services/scheduler/*/*.c))
SCHED_LIB_OBJ := $(SCHED_LIB_SRC:%.c=$(BUILD)/obj/%.o)
# The scheduler's planning layer (services/scheduler/plan/): no I/O.
SCHED_PLAN_OBJ := $(patsubst %.c,$(BUILD)/obj/%.o,$(wildcard services/scheduler/plan/*.c))
# gpctl's pure modules (no bus, no printing to the terminal), for its unit tests.
GPCTL_PURE_OBJ := $(patsubst %.c,$(BUILD)/obj/%.o,$(addprefix services/gpctl/,output.c jobspec.c jobview.c))
BILL_PURE_OBJ := $(BUILD)/obj/services/billing/rate.o
ALERT_PURE_OBJ := $(patsubst %.c,$(BUILD)/obj/%.o,$(addprefix services/alerting/,rules.c diag.c))
METER_PURE_OBJ := $(BUILD)/obj/services/metering/keys.o

# The test of a module is found by its name: tests/unit/<area>/<module>_test.c,
# <area> the folder of the code it tests (a service's folder, shared for
# shared/src; see tests/README.md), built into $(BUILD)/test/unit/<area>/;
# tests/integration/<area>/ likewise.  A C test outside a folder is not built.
STRAY_TESTS := $(wildcard tests/unit/*_test.* tests/integration/*_test.*)
$(if $(STRAY_TESTS),$(error $(STRAY_TESTS): a test goes in its area's folder, tests/unit/<area>/ or tests/integration/<area>/))
UNIT_SRC  := $(wildcard tests/unit/*/*_test.c)
UNIT_BIN  := $(UNIT_SRC:tests/%.c=$(BUILD)/test/%)
INT_SRC   := $(wildcard tests/integration/*/*_test.c)
INT_BIN   := $(INT_SRC:tests/%.c=$(BUILD)/test/%)
TEST_HELPERS := $(wildcard tests/helpers/*.c)
TEST_HELPER_BIN := $(TEST_HELPERS:tests/helpers/%.c=$(BUILD)/test/bin/%)
BENCH_SRC := $(wildcard tests/bench/*.c)
BENCH_BIN := $(BENCH_SRC:tests/bench/%.c=$(BUILD)/test/bench/%)

.PHONY: all bins image pilot deps test test-unit test-integration up down demo bench deb clean lint format
.SECONDARY:

all: $(LIB) $(CORE) $(BINS) $(UNIT_BIN) $(INT_BIN) $(TEST_HELPER_BIN) $(BENCH_BIN) $(SECCOMP)

# The programs alone (no tests, no benchmarks): what an image is built from.
bins: $(BINS)

deps:
	@deploy/deps.sh

# The containers' seccomp profile: containers-common's default (podman's),
# as an OCI linux.seccomp object for a process without capabilities.
$(SECCOMP): tools/seccomp_oci.py
	@mkdir -p $(@D)
	$(PYTHON) tools/seccomp_oci.py /usr/share/containers/seccomp.json $@

$(GEN_H) $(GEN_C) &: $(SCHEMAS) schemas/gen.py
	@mkdir -p $(BUILD)/gen
	$(PYTHON) schemas/gen.py --schemas schemas --out $(BUILD)/gen

$(BUILD)/obj/gen/msg_gen.o: $(GEN_C) $(GEN_H)
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS) $(CFLAGS) -MMD -MP -c -o $@ $<

$(BUILD)/obj/%.o: %.c $(GEN_H)
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS) $(CFLAGS) -MMD -MP -c -o $@ $<

$(LIB): $(LIB_OBJ)
	@mkdir -p $(@D)
	rm -f $@ && ar rcs $@ $^

$(CORE): $(CORE_OBJ)
	@mkdir -p $(@D)
	rm -f $@ && ar rcs $@ $^

# One link rule per service folder.
define service_rule
$(BUILD)/bin/$(call binname,$(1)): $(patsubst %.c,$(BUILD)/obj/%.o,$(wildcard services/$(1)/*.c services/$(1)/*/*.c)) \
    $(if $(filter sim,$(1)),$(AGENT_LIB_OBJ)) $(LIB)
	@mkdir -p $$(@D)
	$$(CC) $$(CFLAGS) $$(LDFLAGS) -o $$@ $$^ $$(LDLIBS)
endef
$(foreach s,$(SERVICES),$(eval $(call service_rule,$(s))))

# Every test object finds the tests' C library (tests/lib/: test.h, test_stack.h).
$(BUILD)/obj/tests/%.o: CPPFLAGS += -Itests/lib

# test_rule(FOLDER,OBJECTS,LIBS): the tests of tests/FOLDER/ link OBJECTS (the
# code under test, then the library) with LIBS.  The most specific folder wins.
define test_rule
$(BUILD)/test/$(1)/%: $(BUILD)/obj/tests/$(1)/%.o $(2)
	@mkdir -p $$(@D)
	$$(CC) $$(CFLAGS) $$(LDFLAGS) -o $$@ $$^ $(3)
endef
# Any other folder (shared/, registry/...): the library alone.
$(eval $(call test_rule,unit,$(LIB),$(LDLIBS)))
$(eval $(call test_rule,integration,$(LIB),$(LDLIBS)))
# The agent's code (services/agent/ but main.c): agent/, and sim/ (the
# simulator runs the agent's code).
$(eval $(call test_rule,unit/agent,$(AGENT_LIB_OBJ) $(LIB),$(LDLIBS)))
$(eval $(call test_rule,unit/sim,$(AGENT_LIB_OBJ) $(LIB),$(LDLIBS)))
# The pure modules of gpctl, billing (rate.c), alerting (rules, diagnosis)
# and metering (keys.c: key names, record lines).
$(eval $(call test_rule,unit/gpctl,$(GPCTL_PURE_OBJ) $(LIB),$(LDLIBS)))
$(eval $(call test_rule,unit/billing,$(BILL_PURE_OBJ) $(LIB),$(LDLIBS)))
$(eval $(call test_rule,unit/alerting,$(ALERT_PURE_OBJ) $(LIB),$(LDLIBS)))
$(eval $(call test_rule,unit/metering,$(METER_PURE_OBJ) $(LIB),$(LDLIBS)))
# The scheduler's planning layer (plan/) and the library's pure part only,
# with no I/O library: a planning file that calls into the stores, the bus
# or the flows does not link.  Its integration tests drive its stores and
# flows (services/scheduler/ but main.c).
$(eval $(call test_rule,unit/scheduler,$(SCHED_PLAN_OBJ) $(CORE),$(CORE_LDLIBS)))
$(eval $(call test_rule,integration/scheduler,$(SCHED_LIB_OBJ) $(LIB),$(LDLIBS)))

$(BUILD)/test/bin/%: $(BUILD)/obj/tests/helpers/%.o $(LIB)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $^ $(LDLIBS)

$(BUILD)/test/bench/%: $(BUILD)/obj/tests/bench/%.o $(AGENT_LIB_OBJ) $(LIB)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $^ $(LDLIBS)

# tests/run.sh runs GP_TEST_JOBS programs at once (default 3); .ci/run sets
# GP_TEST_PASS (normal, san) so each long end-to-end test runs once per CI run.
test: deps
	@$(MAKE) --no-print-directory -j2 all
	@tests/run.sh $(BUILD) all

test-unit: all
	@tests/run.sh $(BUILD) unit

test-integration: all
	@tests/run.sh $(BUILD) integration

up: deps all
	@deploy/up.sh $(BUILD)

down:
	@deploy/down.sh

demo: up
	@deploy/demo.sh $(BUILD)

# The images docker-compose.yml names.  gridpool:0.1.0 from deploy/Dockerfile
# where a registry is reached (FROM debian:12); on machines that reach none
# (these, CI) every image is assembled from the built programs and this
# machine's engines instead (deploy/compose/images.sh).  podman settings:
# deploy/compose/podman.conf unless CONTAINERS_CONF says otherwise.
image: bins
	@export CONTAINERS_CONF=$${CONTAINERS_CONF:-$(CURDIR)/deploy/compose/podman.conf}; \
	if podman build -f deploy/Dockerfile --target gridpool -t gridpool:0.1.0 . >$(BUILD)/image.log 2>&1; then \
	    echo "make image: gridpool:0.1.0 built from deploy/Dockerfile"; \
	else \
	    echo "make image: deploy/Dockerfile could not be built ($$(grep -m1 -o 'pinging container registry[^:]*' $(BUILD)/image.log || tail -n 1 $(BUILD)/image.log)): assembling the images from $(BUILD)/bin"; \
	    deploy/compose/images.sh $(BUILD); \
	fi

# The pilot rehearsal: the control plane deployed with docker-compose.yml,
# a 10-site simulated pilot through a day of work and faults in
# fast-forward (GP_PILOT_HOUR_S seconds an hour, default 10), and the
# operator's checklist (deploy/pilot.sh).  About 6 minutes.
pilot: deps all
	@deploy/pilot.sh $(BUILD)

# The node agent's Debian package (deploy/deb/build.sh): build/deb/*.deb
deb: all
	@bash deploy/deb/build.sh $(BUILD) $(BUILD)/deb

bench: deps all
	@tests/bench/run.sh $(BUILD)

# Files that already match .clang-format (clang-format 14): `make lint`
# checks them, `make format` keeps them so.  The rest of the tree is not
# reformatted wholesale (people edit it concurrently): format a file you own
# with `make format FILES=path.c`, then add it here.
FORMAT_FILES := shared/include/gp/dbarray.h shared/include/gp/id.h shared/src/err.c \
                shared/src/log.c tests/helpers/schema_dump.c tests/unit/shared/backoff_test.c \
                shared/include/gp/detect.h shared/src/detect.c tests/unit/shared/detect_test.c \
                tests/integration/registry/detect_lua_test.c shared/include/gp/streamcfg.h \
                shared/src/streamcfg.c tests/unit/shared/streamcfg_test.c services/alerting/streams.c
CLANG_FORMAT ?= clang-format

# varFuncNullUB: gp_app_serve(app, state, routes..., NULL) ends its list with
# NULL, which glibc defines as ((void *)0), a pointer: the UB cppcheck fears
# (NULL as a plain int 0) cannot happen here.  Other false positives are
# suppressed where they are, with the reason (// cppcheck-suppress ID ; why).
# tools/depcheck.py: no two files of a folder call each other in a circle,
# read from the objects (so lint builds the programs first).
lint: $(BINS)
	cppcheck -j2 --quiet --error-exitcode=1 --inline-suppr --enable=warning,portability --std=c11 \
	    --suppress=varFuncNullUB -Ishared/include -I$(BUILD)/gen shared/src services
	$(CLANG_FORMAT) --dry-run --Werror $(FORMAT_FILES)
	$(PYTHON) tools/depcheck.py --src . $(BUILD)

format:
	$(CLANG_FORMAT) -i $(FORMAT_FILES) $(FILES)

clean:
	rm -rf build

-include $(shell find $(BUILD)/obj -name '*.d' 2>/dev/null)
