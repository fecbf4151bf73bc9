"""Byte-level BPE for the demo model: a small trainer, an encoder, and the HF tokenizer.json writer.

Written here (not HF `tokenizers`) because the CPU machine has no `tokenizers` package, and the data
must be tokenized before the GPU call; train.py re-encodes a sample with HF `tokenizers` on the GPU
machine and records the agreement, and tessera's own tokenizer is checked against it too.
The pre-tokenizer is the Qwen2 split regex followed by the GPT-2 byte-to-unicode map, NFC first.
"""
import heapq
import json
import unicodedata
from collections import defaultdict

import regex

SPLIT_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                 r"|\s*[\r\n]+|\s+(?!\S)|\s+")
_SPLIT = regex.compile(SPLIT_PATTERN)

# Added tokens, in id order after the learned vocabulary. "special" ones are skipped when decoding.
ADDED_TOKENS = [
    ("<|endoftext|>", True), ("<|im_start|>", True), ("<|im_end|>", True),
    ("<tool_call>", False), ("</tool_call>", False), ("<tool_response>", False),
    ("</tool_response>", False), ("<|mask|>", True),
]


def bytes_to_unicode():
    """GPT-2's reversible map from bytes to printable unicode characters."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("\xa1"), ord("\xac") + 1)) + \
        list(range(ord("\xae"), ord("\xff") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, (chr(c) for c in cs)))


BYTE_CHARS = bytes_to_unicode()


def pretokenize(text):
    """Yields (byte-level string, char start) for each pre-token of a special-free text."""
    text = unicodedata.normalize("NFC", text)
    for m in _SPLIT.finditer(text):
        yield "".join(BYTE_CHARS[b] for b in m.group().encode("utf-8")), m.start()


def train(texts, vocab_size, log=print):
    """Learns merges until the vocabulary (256 bytes + merges + added tokens) reaches vocab_size."""
    n_merges = vocab_size - 256 - len(ADDED_TOKENS)
    counts = defaultdict(int)
    for t in texts:
        for piece, _ in pretokenize(t):
            counts[piece] += 1
    sym_of = {BYTE_CHARS[b]: b for b in range(256)}
    tokens = [BYTE_CHARS[b] for b in range(256)]
    words = [[sym_of[c] for c in w] for w in counts]
    freq = list(counts.values())
    pair_count = defaultdict(int)
    where = defaultdict(set)
    for wi, w in enumerate(words):
        for a, b in zip(w, w[1:]):
            pair_count[(a, b)] += freq[wi]
            where[(a, b)].add(wi)
    heap = [(-c, p) for p, c in pair_count.items()]
    heapq.heapify(heap)
    merges = []
    while len(merges) < n_merges and heap:
        negc, pair = heapq.heappop(heap)
        if pair_count.get(pair, 0) != -negc or negc == 0:
            continue  # stale heap entry
        new_id = len(tokens)
        tokens.append(tokens[pair[0]] + tokens[pair[1]])
        merges.append(pair)
        changed = set()
        for wi in list(where[pair]):
            w = words[wi]
            f = freq[wi]
            for a, b in zip(w, w[1:]):
                pair_count[(a, b)] -= f
                changed.add((a, b))
            out = []
            i = 0
            while i < len(w):
                if i + 1 < len(w) and w[i] == pair[0] and w[i + 1] == pair[1]:
                    out.append(new_id)
                    i += 2
                else:
                    out.append(w[i])
                    i += 1
            words[wi] = out
            for a, b in zip(out, out[1:]):
                pair_count[(a, b)] += f
                where[(a, b)].add(wi)
                changed.add((a, b))
        del where[pair]
        pair_count.pop(pair, None)
        for p in changed:
            c = pair_count.get(p, 0)
            if c > 0:
                heapq.heappush(heap, (-c, p))
            else:
                pair_count.pop(p, None)
        if len(merges) % 500 == 0:
            log(f"bpe: {len(merges)} merges, last {tokens[-1]!r} x{-negc}")
    return tokens, [(tokens[a], tokens[b]) for a, b in merges]


class Encoder:
    """Encodes text exactly as HF tokenizers would with the tokenizer.json written by write_files."""

    def __init__(self, tokens, merges):
        self.tokens = list(tokens) + [t for t, _ in ADDED_TOKENS]
        self.ids = {t: i for i, t in enumerate(self.tokens)}
        self.ranks = {m: r for r, m in enumerate(merges)}
        self.added = {t: len(tokens) + i for i, (t, _) in enumerate(ADDED_TOKENS)}
        self.special_ids = {self.added[t] for t, s in ADDED_TOKENS if s}
        self._added_re = regex.compile("|".join(regex.escape(t) for t, _ in ADDED_TOKENS))
        self._cache = {}
        self._unbyte = {c: b for b, c in BYTE_CHARS.items()}

    def _bpe(self, piece):
        got = self._cache.get(piece)
        if got is not None:
            return got
        parts = list(piece)
        while len(parts) > 1:
            best, best_rank = None, None
            for i in range(len(parts) - 1):
                r = self.ranks.get((parts[i], parts[i + 1]))
                if r is not None and (best_rank is None or r < best_rank):
                    best, best_rank = (parts[i], parts[i + 1]), r
            if best is None:
                break
            out, i = [], 0
            while i < len(parts):
                if i + 1 < len(parts) and (parts[i], parts[i + 1]) == best:
                    out.append(parts[i] + parts[i + 1])
                    i += 2
                else:
                    out.append(parts[i])
                    i += 1
            parts = out
        ids = [self.ids[p] for p in parts]
        self._cache[piece] = ids
        return ids

    def encode_with_offsets(self, text):
        """Returns (ids, char offsets of the first character each token's pre-token starts at)."""
        ids, offs = [], []
        pos = 0
        for m in list(self._added_re.finditer(text)) + [None]:
            end = m.start() if m else len(text)
            seg = text[pos:end]
            if seg:
                for piece, start in pretokenize(seg):
                    for t in self._bpe(piece):
                        ids.append(t)
                        offs.append(pos + start)
            if m:
                ids.append(self.added[m.group()])
                offs.append(m.start())
                pos = m.end()
        return ids, offs

    def encode(self, text):
        return self.encode_with_offsets(text)[0]

    def decode(self, ids, skip_special=True):
        out = bytearray()
        for i in ids:
            if i in self.special_ids and skip_special:
                continue
            t = self.tokens[i]
            if i >= len(self.tokens) - len(ADDED_TOKENS):
                out += t.encode("utf-8")
            else:
                out += bytes(self._unbyte[c] for c in t)
        return out.decode("utf-8", errors="replace")


def tokenizer_json(tokens, merges):
    n = len(tokens)
    vocab = {t: i for i, t in enumerate(tokens)}
    added = []
    for i, (t, special) in enumerate(ADDED_TOKENS):
        vocab[t] = n + i
        added.append({"id": n + i, "content": t, "single_word": False, "lstrip": False, "rstrip": False,
                      "normalized": False, "special": special})
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}
    return {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": added,
        "normalizer": {"type": "NFC"},
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": SPLIT_PATTERN}, "behavior": "Isolated", "invert": False},
            byte_level]},
        "post_processor": None,
        "decoder": byte_level,
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                  "vocab": vocab, "merges": [[a, b] for a, b in merges]},
    }


def tokenizer_config(tokens, chat_template):
    n = len(tokens)
    decoder = {str(n + i): {"content": t, "lstrip": False, "normalized": False, "rstrip": False,
                            "single_word": False, "special": s} for i, (t, s) in enumerate(ADDED_TOKENS)}
    return {
        "add_bos_token": False, "add_prefix_space": False, "added_tokens_decoder": decoder,
        "bos_token": None, "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>", "mask_token": "<|mask|>",
        "unk_token": None, "model_max_length": 2048, "tokenizer_class": "PreTrainedTokenizerFast",
        "clean_up_tokenization_spaces": False, "errors": "replace", "split_special_tokens": False,
        "chat_template": chat_template,
    }


def write_files(directory, tokens, merges, chat_template):
    import os
    os.makedirs(directory, exist_ok=True)
    with open(os.path.join(directory, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(tokenizer_json(tokens, merges), f, ensure_ascii=False, indent=1)
    with open(os.path.join(directory, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(tokenizer_config(tokens, chat_template), f, ensure_ascii=False, indent=1)


def load(directory):
    """Encoder from a tokenizer.json written by write_files."""
    import os
    with open(os.path.join(directory, "tokenizer.json"), encoding="utf-8") as f:
        tj = json.load(f)
    n = len(tj["model"]["vocab"]) - len(ADDED_TOKENS)
    inv = {i: t for t, i in tj["model"]["vocab"].items()}
    tokens = [inv[i] for i in range(n)]
    return Encoder(tokens, [tuple(m) for m in tj["model"]["merges"]])
