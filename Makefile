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

# The main job: train the tiny language model on this repository's own sources and docs
# (no download), on the GPU when there is one, then let it write a sample.
# The validation split is the last documents: sources, like most of what it trains on.
LM_STEPS ?= 200
run: build
	$(BUILD)/gradus train lm --preset tiny --data docs --data include --data src --out $(BUILD)/lm-run \
	  --steps $(LM_STEPS) --batch 16 --seq 128 --lr 5e-3
	$(BUILD)/gradus generate --model $(BUILD)/lm-run --prompt "gd_status gd_" --max-tokens 120 --temperature 0.7

test: build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

sweep: build
	$(BUILD)/gradus sweep --plugin $(BUILD)/plugins-test/libgradus_testdev.so --doc docs/ops.md

install: build
	cmake --install $(BUILD)

clean:
	rm -rf $(BUILD)
