"""Data: offline sources, task loaders, tokenization and collators."""

from .collators import MLMCollator, PaddingCollator, ReplacedTokenCollator
from .sources import SOURCES, ChecksumError, MissingToolError, default_cache_dir
from .fetching import fetch
from .pretrained import MODELS, ModelNotFetchedError, mpnet_base_dir
from .corpus import load_pretraining_corpus
from .hub import GLUE_TASKS, conll2003_to_rows, glue_to_rows, load_hub_task, ud_to_rows
from .local_files import load_local_sentence_task, load_local_token_task
from .pretraining import load_corpus
from .rows import TaskSpec, split_fixed
from .tasks import BUILTIN_TASKS, brown_to_universal, get_task, load_ner, load_pos, load_sentiment, load_trec
from .tokenization import (
    default_tokenizer_path,
    load_tokenizer,
    tokenize_pretraining,
    tokenize_sentence_task,
    tokenize_token_task,
)

__all__ = [
    "SOURCES", "ChecksumError", "MissingToolError", "default_cache_dir", "fetch",
    "MODELS", "ModelNotFetchedError", "mpnet_base_dir",
    "TaskSpec", "BUILTIN_TASKS", "GLUE_TASKS", "get_task", "split_fixed", "brown_to_universal",
    "load_sentiment", "load_trec", "load_pos", "load_ner", "load_pretraining_corpus",
    "load_local_sentence_task", "load_local_token_task", "load_corpus",
    "load_hub_task", "glue_to_rows", "conll2003_to_rows", "ud_to_rows",
    "default_tokenizer_path", "load_tokenizer",
    "tokenize_sentence_task", "tokenize_token_task", "tokenize_pretraining",
    "PaddingCollator", "MLMCollator", "ReplacedTokenCollator",
]
