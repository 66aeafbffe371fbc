"""Where a checkpoint's tokenizer comes from: the files saved beside it, or else the default
tokenizer (BERT's uncased WordPiece vocabulary), but only for a family whose usual checkpoints
use that vocabulary: a RoBERTa or MPNet model read with it would see the wrong token ids."""

from __future__ import annotations

from pathlib import Path

from .families import family_of_model_type

# What Transformers' tokenizers save (fast and slow formats); a folder with any of the first
# six holds a tokenizer, the others are its companions.
TOKENIZER_FILES = (
    "tokenizer.json", "tokenizer_config.json", "vocab.txt", "vocab.json", "sentencepiece.bpe.model", "spiece.model",
    "merges.txt", "special_tokens_map.json", "added_tokens.json",
)


def has_saved_tokenizer(folder: str | Path) -> bool:
    return any((Path(folder) / name).is_file() for name in TOKENIZER_FILES[:6])


def default_tokenizer_fits(model_type: str | None) -> bool:
    """Whether the default tokenizer suits a checkpoint of ``model_type`` (MUX or plain)."""
    family = family_of_model_type(model_type)
    return family is None or family.bert_vocabulary


def tokenizer_source(folder: str | Path, model_type: str | None) -> Path | None:
    """``folder`` when a tokenizer is saved there; ``None`` (use the default tokenizer) when none
    is and the default fits the model; a ``ValueError`` when it does not."""
    if has_saved_tokenizer(folder):
        return Path(folder)
    if default_tokenizer_fits(model_type):
        return None
    raise ValueError(
        f"{folder} holds a {model_type!r} model but no tokenizer, and the default tokenizer (BERT's uncased "
        f"WordPiece vocabulary) is not that family's: save the model's tokenizer beside it "
        f"(tokenizer.save_pretrained) or name one (--tokenizer DIR, or tokenizer_path=...)"
    )
