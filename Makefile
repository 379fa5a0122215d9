# Thin wrapper over CMake: `make`, `make run`, `make test`, `make sweep`, `make install`.
BUILD ?= build
CMAKE_FLAGS ?=
JOBS ?= $(shell nproc 2>/dev/null || echo 2)

.PHONY: all build run test sweep install clean

all: build

$(BUILD)/CMakeCache.txt:
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release $(CMAKE_FLAGS)

build: $(BUILD)/CMakeCache.txt
	cmake --build $(BUILD) -j $(JOBS)

# The main job: train the small CNN on procedurally drawn shapes (no download).
run: build
	$(BUILD)/gradus train cnn --data shapes

test: build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

sweep: build
	$(BUILD)/gradus sweep --plugin $(BUILD)/plugins-test/libgradus_testdev.so --doc docs/ops.md

install: build
	cmake --install $(BUILD)

clean:
	rm -rf $(BUILD)
