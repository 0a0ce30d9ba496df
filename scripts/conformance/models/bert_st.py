"""Write a tiny random-weight BERT saved as a sentence-transformers model, with a WordPiece
vocabulary trained here.

    python bert_st.py OUT_DIR

Run with the embeddings virtualenv's python, so that the model is saved by the same
sentence-transformers version that the server loads.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import torch
from sentence_transformers import SentenceTransformer
from sentence_transformers import models as st_models
from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors, trainers
from transformers import BertConfig, BertModel, BertTokenizerFast

CORPUS = ["the quick brown fox jumps over the lazy dog", "server logs count embeddings and requests",
          "hello world this is a test of the embeddings server", "one two three four five six seven"] * 50


def main(out: Path) -> None:
    """Write the model into ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(0)
    tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.train_from_iterator(CORPUS, trainers.WordPieceTrainer(
        vocab_size=500, special_tokens=["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]))
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", tok.token_to_id("[CLS]")), ("[SEP]", tok.token_to_id("[SEP]"))])
    hf = out / "hf"
    BertTokenizerFast(tokenizer_object=tok, unk_token="[UNK]", pad_token="[PAD]", cls_token="[CLS]",
                      sep_token="[SEP]", mask_token="[MASK]", model_max_length=128).save_pretrained(str(hf))
    cfg = BertConfig(vocab_size=tok.get_vocab_size(), hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                     intermediate_size=64, max_position_embeddings=128)
    BertModel(cfg).save_pretrained(str(hf))
    word = st_models.Transformer(str(hf), max_seq_length=128)
    SentenceTransformer(modules=[word, st_models.Pooling(word.get_word_embedding_dimension(), "mean")]).save(str(out))
    shutil.rmtree(hf)


if __name__ == "__main__":
    main(Path(sys.argv[1]))
