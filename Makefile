# The README's two commands:
#   make demo   install what is missing, build, run the main job on the embedded data
#   make test   install what is missing, build, run all tests
BUILD ?= build
JOBS ?= $(shell nproc)

.PHONY: demo test setup build clean

setup:
	@scripts/setup.sh

build: setup
	@[ -f $(BUILD)/build.ninja ] || cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release
	@cmake --build $(BUILD) -j $(JOBS)

test: build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

demo: build
	@scripts/demo.sh $(BUILD)

clean:
	rm -rf $(BUILD)
