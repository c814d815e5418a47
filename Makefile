# kvactor's entry points on a fresh Debian machine:
#   make run    install what is missing (apt), build, run the main example
#   make test   install what is missing (apt), build, run the whole suite
BUILD ?= build
JOBS ?= $(shell nproc)
# Empty: Release for a new build directory (CMakeLists.txt), and whatever
# an existing one was configured with.
BUILD_TYPE ?=
PACKAGES := cmake g++ make libcaf-dev libboost-test-dev nlohmann-json3-dev \
            libdlpack-dev prometheus-cpp-dev gnuplot-nox
SUDO := $(shell [ "$$(id -u)" -eq 0 ] || echo sudo)

.PHONY: all deps configure build run test clean

all: build

deps:
	@missing=$$(for p in $(PACKAGES); do \
	  dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q 'ok installed' || echo $$p; \
	done); \
	if [ -n "$$missing" ]; then \
	  echo "installing:" $$missing; \
	  $(SUDO) apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq --no-install-recommends $$missing; \
	fi

# Every time (under a second): a configure that failed or was interrupted
# is redone, and BUILD_TYPE, when given, applies to an existing build
# directory too.
configure: deps
	cmake -S . -B $(BUILD) $(if $(BUILD_TYPE),-DCMAKE_BUILD_TYPE=$(BUILD_TYPE))

build: configure
	cmake --build $(BUILD) -j$(JOBS)

run: build
	$(BUILD)/examples/multi_tenant_sim

test: build
	ctest --test-dir $(BUILD) --output-on-failure -j$(JOBS)

clean:
	rm -rf $(BUILD)
