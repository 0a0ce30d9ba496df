"""Write a tiny random-weight Llama in Hugging Face format, with a BPE tokenizer trained here.

    python hf_llama.py OUT_DIR

Run with the vLLM virtualenv's python (it has torch, transformers and tokenizers). Nothing is
downloaded: the tokenizer is trained on generated text, the weights are random (seeded).
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
from transformers import LlamaConfig, LlamaForCausalLM

WORDS = ("the a of to and in is it that for on with as at by this be are from or not model token request "
         "server engine prompt output metrics log latency cache queue batch serve count error time first "
         "second hello world how you today tell me story about small cat dog house tree river quick brown "
         "fox jumps over lazy one two three four five six seven eight nine ten").split()
SPECIAL = ["<unk>", "<s>", "</s>", "<pad>", "<|user|>", "<|assistant|>", "<|system|>"]
CHAT = ("{% for m in messages %}<|{{ m['role'] }}|>\n{{ m['content'] }}\n{% endfor %}"
        "{% if add_generation_prompt %}<|assistant|>\n{% endif %}")


def main(out: Path) -> None:
    """Write tokenizer and model files into ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    rng = random.Random(0)
    text = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(5, 20))) + "." for _ in range(400)]
    tok = Tokenizer(models.BPE(unk_token=None))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(text, trainers.BpeTrainer(
        vocab_size=1000, special_tokens=SPECIAL, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False))
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", pair="<s> $A <s> $B",
                                                       special_tokens=[("<s>", 1)])
    tok.save(str(out / "tokenizer.json"))
    (out / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<s>", "eos_token": "</s>",
        "unk_token": "<unk>", "pad_token": "<pad>", "model_max_length": 2048, "add_bos_token": True,
        "chat_template": CHAT, "clean_up_tokenization_spaces": False}))
    (out / "special_tokens_map.json").write_text(json.dumps(
        {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>", "pad_token": "<pad>"}))
    cfg = LlamaConfig(vocab_size=1024, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                      num_attention_heads=2, num_key_value_heads=2, head_dim=64, max_position_embeddings=2048,
                      bos_token_id=1, eos_token_id=2, pad_token_id=3, tie_word_embeddings=False,
                      torch_dtype="bfloat16", rms_norm_eps=1e-5)
    torch.manual_seed(0)
    LlamaForCausalLM(cfg).to(torch.bfloat16).save_pretrained(str(out), safe_serialization=True)
    (out / "generation_config.json").write_text(json.dumps({"bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 3}))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
