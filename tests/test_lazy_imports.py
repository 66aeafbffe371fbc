"""`import muxplm` and every help screen import neither PyTorch nor Transformers, and the MUX
classes still reach Transformers' Auto classes; the light tables of names match what they name.
Each check that depends on what a process has imported runs in a fresh interpreter."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest


def _fresh_python(code: str) -> dict:
    """Run ``code`` in a new interpreter; it prints one JSON line, returned parsed."""
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def tiny_mux_checkpoint(tmp_path_factory):
    from muxplm import MuxBertConfig, MuxBertForSequenceClassification

    folder = tmp_path_factory.mktemp("tiny-mux")
    config = MuxBertConfig(num_instances=2, vocab_size=64, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                           intermediate_size=32, num_labels=3)
    MuxBertForSequenceClassification(config).save_pretrained(folder)
    return folder


@pytest.mark.parametrize("first", ["", "import transformers.models.bert.modeling_bert",
                                   "from transformers import AutoConfig"])
def test_import_muxplm_is_light_and_the_auto_classes_still_load_a_mux_checkpoint(first, tiny_mux_checkpoint):
    # `first`: Transformers half way through importing BERT's modelling when its Auto configs are
    # imported (MUX modules import that module), or Auto configs imported before muxplm.
    seen = _fresh_python(f"""
        import json, sys
        {first}
        import muxplm
        light = not any(name in sys.modules for name in ("torch", "transformers"))
        from transformers import AutoConfig, AutoModel, AutoModelForSequenceClassification
        config = AutoConfig.from_pretrained({str(tiny_mux_checkpoint)!r})
        model = AutoModelForSequenceClassification.from_pretrained({str(tiny_mux_checkpoint)!r})
        print(json.dumps({{"light": light, "config": type(config).__name__, "model": type(model).__name__,
                          "labels": model.config.num_labels, "base": type(AutoModel.from_config(config)).__name__}}))
    """)
    assert seen == {"light": first == "", "config": "MuxBertConfig", "model": "MuxBertForSequenceClassification",
                    "labels": 3, "base": "MuxBertModel"}


def test_the_package_names_are_imported_on_first_use():
    import muxplm
    import muxplm.configuration

    assert set(muxplm.__all__) <= set(dir(muxplm)) and len(muxplm.__all__) == 52
    for name in muxplm.__all__:
        assert getattr(muxplm, name) is getattr(sys.modules[f"muxplm.{muxplm._EXPORTS[name]}"], name), name
    from muxplm import SIZE_PRESETS, MuxBertConfig  # the `from` form

    assert MuxBertConfig is muxplm.configuration.MuxBertConfig and SIZE_PRESETS is muxplm.configuration.SIZE_PRESETS
    import transformers

    assert muxplm.AutoModelForSequenceClassification is transformers.AutoModelForSequenceClassification  # as before
    with pytest.raises(AttributeError, match="no attribute 'NoSuchName'"):
        muxplm.NoSuchName  # noqa: B018
    for package in ("muxplm.training", "muxplm.bench", "muxplm.serving"):
        module = __import__(package, fromlist=["__all__"])
        assert all(getattr(module, name) is not None for name in module.__all__), package


def test_no_help_screen_imports_torch_or_transformers():
    seen = _fresh_python("""
        import contextlib, io, json, sys
        from muxplm.cli import COMMANDS, main
        screens = [[], *([name] for name in COMMANDS), ["data", "fetch"], ["bench", "throughput"],
                   ["bench", "profile"], ["analyze", "muxology"], ["analyze", "pareto"], ["export", "onnx"]]
        shown = 0
        for words in screens:
            with contextlib.redirect_stdout(io.StringIO()) as out:
                try:
                    main([*words, "--help"])
                except SystemExit:
                    pass
            shown += "usage: muxplm" in out.getvalue()
        print(json.dumps({"shown": shown, "screens": len(screens),
                          "heavy": sorted(name for name in ("torch", "transformers", "accelerate", "datasets")
                                          if name in sys.modules)}))
    """)
    assert seen["shown"] == seen["screens"] and seen["heavy"] == []


def test_the_light_name_tables_match_what_they_name():
    from muxplm import choices, devices, timing
    from muxplm.bench import throughput
    from muxplm.demux import DEMUX_REGISTRY
    from muxplm.families import FAMILIES
    from muxplm.mux import MUX_REGISTRY
    from muxplm.quantization import QUANTIZE_CHOICES
    from muxplm.serving.predictor import COMPILE_MODES

    assert set(choices.MUX_TYPES) <= set(MUX_REGISTRY) and set(choices.DEMUX_TYPES) <= set(DEMUX_REGISTRY)
    assert {name: (family.config_class.model_type, family.config_class.__name__)
            for name, family in FAMILIES.items()} == choices.FAMILY_CONFIGS
    assert tuple(devices.DTYPES) == choices.DTYPE_NAMES and throughput.DTYPES is devices.DTYPES
    assert (timing.CLOCKS, QUANTIZE_CHOICES, COMPILE_MODES) == (choices.CLOCKS, choices.QUANTIZE_CHOICES,
                                                                choices.COMPILE_MODES)
