# Convenience targets; everything runs on a CPU.
PYTHON ?= python

.PHONY: test demo demo-quick

test:
	$(PYTHON) -m pytest tests

# All three stages (retrieval priming -> MLM -> fine-tuning) on the tiny preset, N=1 vs N=2 vs N=5.
demo:
	$(PYTHON) -m muxplm.cli demo --output-dir runs/demo

demo-quick:
	$(PYTHON) -m muxplm.cli demo --quick --output-dir runs/demo-quick
