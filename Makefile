# The two entry points of the README. Both install missing Debian packages
# first (scripts/install-deps.sh), then build with CMake + Ninja in build/.
BUILD ?= build
JOBS ?= $(shell nproc)
PYTHON ?= /usr/bin/python3

.PHONY: all build deps doctor test test-fast test-sanitize fuzz fuzz-smoke bench rules-doc guide layers-doc format wheel portable portable-arm64 test-portable clean

all: build

deps:
	@scripts/install-deps.sh

build: deps
	@cmake -S . -B $(BUILD) -G Ninja >/dev/null
	@cmake --build $(BUILD) -j $(JOBS)

# The preflight of this machine and the Python environment on PATH (pass
# ARGS="--python /path/to/python" for another). Findings (exit 1) are the
# report, not a failure of make; a tool error (2) is.
doctor: build
	@$(BUILD)/mldoctor check $(ARGS); rc=$$?; [ $$rc -le 1 ]

# The non-free Debian packages some scenario tests run against (Intel MKL,
# the CUDA 11 runtime) are downloaded under a private apt configuration and
# unpacked into $(BUILD)/test-debs (scripts/fetch-test-debs.sh); the Debian
# roots (bullseye, trixie, sid) that tests run real ML stacks in are made or
# reused in $MLD_TEST_ROOTS, by default /var/cache/mldoctor/test-roots
# (scripts/make-test-roots.sh). A failed download makes the tests that need
# it fail with what could not be fetched.
# The downloads and roots are made while the code compiles
# (scripts/build-with-test-data.sh).
test: deps
	@scripts/build-with-test-data.sh $(BUILD) $(JOBS)
	@cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

# Every test again (but the Debian-root oracles, label "roots", and the tests labelled "slow") in a build with ASan, UBSan and LeakSanitizer
# (build-sanitize/); fails on any sanitizer report (scripts/test-sanitize.sh).
SANITIZE_BUILD ?= build-sanitize
test-sanitize: deps
	@scripts/build-with-test-data.sh $(SANITIZE_BUILD) $(JOBS) -DMLD_SANITIZE=ON
	@scripts/test-sanitize.sh $(SANITIZE_BUILD)

# Everything but the scenario tests labelled "slow".
test-fast: build
	@cd $(BUILD) && ctest --output-on-failure -j $(JOBS) -LE slow

# The libFuzzer targets (test/fuzz) and the libraries they use, instrumented,
# in build-fuzz/; `cmake --build build-fuzz` builds the whole project so.
fuzz: deps
	@CC=clang-14 CXX=clang++-14 cmake -S . -B build-fuzz -G Ninja -DMLD_FUZZ=ON >/dev/null
	@cmake --build build-fuzz -j $(JOBS) --target mld-fuzz-targets

# Each fuzz target: its corpus replayed, then FUZZ_SECONDS of new inputs
# (scripts/fuzz-smoke.sh); fails on any crash, leak or timeout.
FUZZ_SECONDS ?= 20
fuzz-smoke: fuzz
	@scripts/fuzz-smoke.sh build-fuzz $(FUZZ_SECONDS)

bench: build
	@bench/run.sh

# docs/rules.md is generated from rules/*.toml (a test checks it is current).
rules-doc: build
	@$(BUILD)/mldoctor rules --markdown > docs/rules.md

# docs/guide.md's outputs, rewritten from real runs of their golden cases
# (a test checks they are current).
guide: build
	@$(PYTHON) scripts/update-guide.py $(BUILD)/mldoctor

# docs/design.md's layer diagram, generated from CMakeLists.txt's
# mld_library() calls (a test checks it is current).
layers-doc:
	@$(PYTHON) tools/check-layers.py --update-doc docs/design.md

# The C and C++ sources formatted in place with clang-format-14 and
# .clang-format (a test checks they are).
format:
	@tools/format-tree.sh

# The portable build in $(PORTABLE_BUILD)/: linked against Debian 11's glibc
# 2.31 (a sysroot that scripts/make-sysroot.sh downloads and unpacks in
# $(PORTABLE_BUILD)/sysroot, the machine's apt untouched), so that it runs on
# glibc 2.28 and newer; fails if any shipped object needs a newer symbol
# version (tools/check-glibc-versions.py). docs/design.md explains the choice.
PORTABLE_BUILD ?= build-portable
portable: deps
	@scripts/make-sysroot.sh amd64 $(PORTABLE_BUILD)/sysroot
	@cmake -S . -B $(PORTABLE_BUILD) -G Ninja -DMLD_TESTS=OFF \
	  -DCMAKE_TOOLCHAIN_FILE=$(CURDIR)/cmake/portable-toolchain.cmake \
	  -DMLD_SYSROOT=$(CURDIR)/$(PORTABLE_BUILD)/sysroot/root >/dev/null
	@cmake --build $(PORTABLE_BUILD) -j $(JOBS)
	@$(PYTHON) tools/check-glibc-versions.py --max-glibc 2.28 \
	  $(PORTABLE_BUILD)/mldoctor $(PORTABLE_BUILD)/mldoctor-tls-probe $(PORTABLE_BUILD)/libmldoctor-*.so

# The same for aarch64 in $(PORTABLE_ARM64_BUILD)/: Debian's cross compiler
# against an arm64 sysroot of the same packages; the build's own tools run
# under qemu-user (docs/design.md, "aarch64").
PORTABLE_ARM64_BUILD ?= build-portable-arm64
portable-arm64: deps
	@scripts/install-deps.sh --cross-arm64
	@scripts/make-sysroot.sh arm64 $(PORTABLE_ARM64_BUILD)/sysroot
	@cmake -S . -B $(PORTABLE_ARM64_BUILD) -G Ninja -DMLD_TESTS=OFF -DMLD_TARGET_ARCH=arm64 \
	  -DCMAKE_TOOLCHAIN_FILE=$(CURDIR)/cmake/portable-toolchain.cmake \
	  -DMLD_SYSROOT=$(CURDIR)/$(PORTABLE_ARM64_BUILD)/sysroot/root >/dev/null
	@cmake --build $(PORTABLE_ARM64_BUILD) -j $(JOBS)
	@$(PYTHON) tools/check-glibc-versions.py --max-glibc 2.28 \
	  $(PORTABLE_ARM64_BUILD)/mldoctor $(PORTABLE_ARM64_BUILD)/mldoctor-tls-probe \
	  $(PORTABLE_ARM64_BUILD)/libmldoctor-*.so

# The Debian-root oracles (test/e2e/roots-*.py) run against the portable
# build, whose binary and shims also run in bullseye (glibc 2.31), and its
# wheel installed with each root's pip (roots-wheel.py). .ci/run runs it.
test-portable: portable
	@scripts/make-test-roots.sh
	@rc=0; for t in test/e2e/roots-*.py; do \
	  MLDOCTOR=$(CURDIR)/$(PORTABLE_BUILD)/mldoctor MLD_SOURCE_DIR=$(CURDIR) \
	  MLD_BUILD_DIR=$(CURDIR)/$(PORTABLE_BUILD) $(PYTHON) $$t || rc=1; done; exit $$rc

# dist/mldoctor-<version>-py3-none-manylinux_<glibc>_<arch>.whl: the portable
# binary, its shims and the Python package python/mldoctor
# (scripts/build-wheel.py, standard library only; pip install it into a venv).
wheel: portable portable-arm64
	@$(PYTHON) scripts/build-wheel.py $(PORTABLE_BUILD) dist
	@$(PYTHON) scripts/build-wheel.py $(PORTABLE_ARM64_BUILD) dist

clean:
	rm -rf $(BUILD) build-fuzz $(SANITIZE_BUILD) $(PORTABLE_BUILD) dist
