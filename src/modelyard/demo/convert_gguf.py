"""Convert a GGUF chat model into a safetensors model directory that any engine can serve.

Run as a child process (``python -m modelyard.demo.convert_gguf GGUF_FILE OUT_DIR``) so that the
server never imports torch. transformers reads GGUF offline but slowly, and refuses to save a
GGUF-loaded model ("quantized with gguf and is not serializable"); the loaded weights are already
dense, so the quantizer marker is cleared before saving. Writes ``OUT_DIR`` atomically: into a
temporary sibling, renamed when complete. Prints one line per stage for the parent's progress.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path


def convert(gguf_file: Path, out_dir: Path) -> None:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from transformers import AutoModelForCausalLM, AutoTokenizer

    staging = out_dir.with_name(out_dir.name + ".partial")
    shutil.rmtree(staging, ignore_errors=True)
    print("stage: reading tokenizer", flush=True)
    tokenizer = AutoTokenizer.from_pretrained(str(gguf_file.parent), gguf_file=gguf_file.name)
    print("stage: reading weights", flush=True)
    model = AutoModelForCausalLM.from_pretrained(str(gguf_file.parent), gguf_file=gguf_file.name)
    model.hf_quantizer = None  # type: ignore[assignment]
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    print("stage: writing safetensors", flush=True)
    model.save_pretrained(str(staging), safe_serialization=True)
    tokenizer.save_pretrained(str(staging))
    shutil.rmtree(out_dir, ignore_errors=True)
    staging.rename(out_dir)
    print("stage: done", flush=True)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        print("usage: python -m modelyard.demo.convert_gguf GGUF_FILE OUT_DIR", file=sys.stderr)
        sys.exit(2)
    convert(Path(sys.argv[1]), Path(sys.argv[2]))
