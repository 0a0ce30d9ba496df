"""Write a tiny random-weight Whisper (Hugging Face format) whose vocabulary is laid out like the
multilingual Whisper's, then convert it for CTranslate2 (faster-whisper). It ends every text after
a token or two, so that a transcription takes well under a second on a CPU.

    python whisper_ct2.py HF_DIR CT2_DIR

Run with the whisper virtualenv's python (torch, transformers, ctranslate2). The vocabulary is the
256 byte tokens, fillers up to id 50255, ``<|endoftext|>`` at 50256 and the special tokens after it,
so that faster-whisper takes the model for a multilingual one.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import torch
from transformers import GenerationConfig, WhisperConfig, WhisperForConditionalGeneration, WhisperTokenizer
from transformers.models.whisper.tokenization_whisper import LANGUAGES


def byte_chars() -> list[str]:
    """GPT-2's printable stand-ins for the 256 byte values."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("\xa1"), ord("\xac") + 1)) + list(
        range(ord("\xae"), ord("\xff") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return [chr(c) for c in cs]


def main(hf: Path, ct2: Path) -> None:
    """Write the model to ``hf`` and its CTranslate2 conversion to ``ct2``."""
    hf.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(0)
    vocab = {c: i for i, c in enumerate(byte_chars())}
    merges = [("\u0120", "t"), ("h", "e"), ("\u0120t", "he"), ("\u0120", "a"), ("i", "n")]
    for a, b in merges:
        vocab.setdefault(a + b, len(vocab))
    n = 0
    while len(vocab) < 50256:
        vocab.setdefault(f"zz{n}", len(vocab))
        n += 1
    vocab["<|endoftext|>"] = 50256
    (hf / "vocab.json").write_text(json.dumps(vocab))
    (hf / "merges.txt").write_text("#version: 0.2\n" + "\n".join(f"{a} {b}" for a, b in merges) + "\n")
    langs = list(LANGUAGES)[:100]
    specials = (["<|startoftranscript|>"] + [f"<|{lang}|>" for lang in langs]
                + ["<|translate|>", "<|transcribe|>", "<|startoflm|>", "<|startofprev|>", "<|nocaptions|>",
                   "<|notimestamps|>"])
    tok = WhisperTokenizer(vocab=vocab, merges=merges, unk_token="<|endoftext|>", bos_token="<|endoftext|>",
                           eos_token="<|endoftext|>", additional_special_tokens=specials)
    tok.save_pretrained(str(hf))
    ids = {t: tok.convert_tokens_to_ids(t) for t in specials}
    assert ids["<|startoftranscript|>"] == 50257 and ids["<|notimestamps|>"] == 50363, ids
    cfg = WhisperConfig(vocab_size=51866, num_mel_bins=80, d_model=64, encoder_layers=2, decoder_layers=2,
                        encoder_attention_heads=2, decoder_attention_heads=2, encoder_ffn_dim=128,
                        decoder_ffn_dim=128, max_source_positions=1500, max_target_positions=448,
                        pad_token_id=50256, bos_token_id=50256, eos_token_id=50256,
                        decoder_start_token_id=50257, suppress_tokens=[], begin_suppress_tokens=[220, 50256])
    model = WhisperForConditionalGeneration(cfg).eval()
    model.generation_config = GenerationConfig(
        decoder_start_token_id=50257, eos_token_id=50256, pad_token_id=50256, bos_token_id=50256,
        suppress_tokens=[], begin_suppress_tokens=[220, 50256],
        lang_to_id={f"<|{lang}|>": ids[f"<|{lang}|>"] for lang in langs},
        task_to_id={"transcribe": ids["<|transcribe|>"], "translate": ids["<|translate|>"]},
        no_timestamps_token_id=ids["<|notimestamps|>"], is_multilingual=True, alignment_heads=[[1, 0], [1, 1]],
        max_length=448)
    with torch.no_grad():
        # Make the end of text the likeliest token after the first: the decoder's last norm puts out
        # almost only its bias, and the end-of-text row of the (tied) output matrix points along it.
        # A random model would otherwise write up to its 448-token limit, and fall back through
        # every temperature, for each request.
        dec = model.model.decoder
        unit = torch.zeros(cfg.d_model)
        unit[0] = 1.0
        dec.layer_norm.weight.mul_(0.01)
        dec.layer_norm.bias.copy_(unit * 10)
        dec.embed_tokens.weight[50256] = unit * 10
    model.save_pretrained(str(hf))
    (hf / "preprocessor_config.json").write_text(json.dumps({
        "chunk_length": 30, "feature_extractor_type": "WhisperFeatureExtractor", "feature_size": 80,
        "hop_length": 160, "n_fft": 400, "n_samples": 480000, "nb_max_frames": 3000, "padding_side": "right",
        "padding_value": 0.0, "processor_class": "WhisperProcessor", "return_attention_mask": False,
        "sampling_rate": 16000}))
    converter = Path(sys.executable).with_name("ct2-transformers-converter")
    subprocess.run([str(converter), "--model", str(hf), "--output_dir", str(ct2), "--force", "--copy_files",
                    "tokenizer.json", "preprocessor_config.json"], check=True)


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]))
