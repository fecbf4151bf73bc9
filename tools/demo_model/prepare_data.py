"""CPU-side data step for the demo model (run by prepare_data.sh after the Debian packages are in).

Writes into OUT (default build-data/demo-data):
  text/english.txt, text/chat.jsonl, text/chat_rendered.txt  human-readable data (not sent to the GPU)
  train/tokenizer/{tokenizer.json,tokenizer_config.json}     the trained byte-level BPE tokenizer (or --tokenizer's)
  train/english.u16.gz    English token stream, documents separated by <|endoftext|> (uint16 little-endian)
  train/chat.u16.gz       chat token ids, samples back to back (uint16)
  train/chat_loss.u8.gz   1 where the token belongs to an assistant turn (content + <|im_end|>), else 0
  train/chat_index.json   [offset, length] of each chat sample; meta.json: counts and special ids
Everything is deterministic for a given --seed.
"""
import argparse
import array
import gzip
import json
import os
import random
import re
import shutil
import sys
import time

import jinja2

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bpe  # noqa: E402
import chat_data  # noqa: E402
import corpus  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))


def make_renderer():
    """Renders like transformers' apply_chat_template: trim/lstrip blocks, tojson = json.dumps(ensure_ascii=False)."""
    env = jinja2.Environment(trim_blocks=True, lstrip_blocks=True, undefined=jinja2.Undefined)
    env.filters["tojson"] = lambda v, indent=None: json.dumps(v, ensure_ascii=False, indent=indent)
    with open(os.path.join(HERE, "chat_template.jinja"), encoding="utf-8") as f:
        source = f.read()
    tmpl = env.from_string(source)

    def render(messages, tools=None, add_generation_prompt=False):
        return tmpl.render(messages=messages, tools=tools, add_generation_prompt=add_generation_prompt)
    return render, source


ASSISTANT_TURN = re.compile(r"<\|im_start\|>assistant\n(.*?<\|im_end\|>)", re.S)


def write_u16(path, ids):
    a = array.array("H", ids)
    if sys.byteorder != "little":
        a.byteswap()
    with gzip.open(path, "wb", compresslevel=6) as f:
        f.write(a.tobytes())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="build-data/demo-data")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--chats", type=int, default=30000)
    ap.add_argument("--vocab", type=int, default=4096)
    ap.add_argument("--max-len", type=int, default=512, help="chat samples longer than this are dropped")
    ap.add_argument("--tokenizer", metavar="DIR", help="reuse DIR's tokenizer.json and tokenizer_config.json instead "
                    "of training one (continued training of a model that has it, e.g. models/demo)")
    a = ap.parse_args()
    t0 = time.time()
    os.makedirs(os.path.join(a.out, "text"), exist_ok=True)
    os.makedirs(os.path.join(a.out, "train", "tokenizer"), exist_ok=True)

    fortunes = corpus.fortunes()
    jargon = corpus.jargon()
    english = [t for _, t in fortunes] + [f"{term}: {d}" for term, d in jargon]
    random.Random(a.seed).shuffle(english)
    print(f"english: {len(fortunes)} fortunes, {len(jargon)} jargon entries, "
          f"{sum(map(len, english)) / 1e6:.2f} MB", flush=True)

    gen = chat_data.Generator(random.Random(a.seed + 1), fortunes, jargon)
    render, template = make_renderer()
    chats, rendered = [], []
    for _ in range(a.chats):
        s = gen.sample()
        chats.append(s)
        rendered.append(render(s["messages"], s["tools"]))
    print(f"chat: {len(chats)} conversations, {sum(map(len, rendered)) / 1e6:.2f} MB rendered", flush=True)
    with open(os.path.join(a.out, "text", "english.txt"), "w") as f:
        f.write("\n%\n".join(english) + "\n")
    with open(os.path.join(a.out, "text", "chat.jsonl"), "w") as f:
        for s in chats:
            f.write(json.dumps(s) + "\n")
    with open(os.path.join(a.out, "text", "chat_rendered.txt"), "w") as f:
        f.write("\n<<<>>>\n".join(rendered[:2000]))

    tok_dir = os.path.join(a.out, "train", "tokenizer")
    if a.tokenizer:
        for f in ("tokenizer.json", "tokenizer_config.json"):
            shutil.copy(os.path.join(a.tokenizer, f), os.path.join(tok_dir, f))
        enc = bpe.load(a.tokenizer)
    else:
        # Tokenizer: all English plus a slice of the conversations (their JSON and phrasing get merges).
        train_texts = english + rendered[:4000]
        tokens, merges = bpe.train(train_texts, a.vocab, log=lambda m: print(m, flush=True))
        bpe.write_files(tok_dir, tokens, merges, template)
        enc = bpe.Encoder(tokens, merges)
    eot = enc.added["<|endoftext|>"]
    print(f"tokenizer: {len(enc.tokens)} tokens ({time.time() - t0:.0f} s)", flush=True)

    stream = []
    for doc in english:
        stream += enc.encode(doc)
        stream.append(eot)
    write_u16(os.path.join(a.out, "train", "english.u16.gz"), stream)

    ids_all, loss_all, index, dropped = [], bytearray(), [], 0
    for text in rendered:
        ids, offs = enc.encode_with_offsets(text)
        if len(ids) > a.max_len:
            dropped += 1
            continue
        spans = [(m.start(1), m.end(1)) for m in ASSISTANT_TURN.finditer(text)]
        flags = bytes(1 if any(s <= o < e for s, e in spans) else 0 for o in offs)
        index.append([len(ids_all), len(ids)])
        ids_all += ids
        loss_all += flags
    write_u16(os.path.join(a.out, "train", "chat.u16.gz"), ids_all)
    with gzip.open(os.path.join(a.out, "train", "chat_loss.u8.gz"), "wb") as f:
        f.write(bytes(loss_all))
    with open(os.path.join(a.out, "train", "chat_index.json"), "w") as f:
        json.dump(index, f)
    meta = {"seed": a.seed, "vocab_size": len(enc.tokens), "english_tokens": len(stream),
            "chat_samples": len(index), "chat_dropped_too_long": dropped, "chat_tokens": len(ids_all),
            "chat_loss_tokens": int(sum(loss_all)), "max_len": a.max_len,
            "special_ids": dict(enc.added), "fortune_cookies": len(fortunes), "jargon_entries": len(jargon)}
    with open(os.path.join(a.out, "train", "meta.json"), "w") as f:
        json.dump(meta, f, indent=1)
    # Texts for the tokenizer cross-checks (HF tokenizers on the GPU machine, tessera here).
    checks = english[:40] + rendered[:40]
    with open(os.path.join(a.out, "train", "encode_checks.json"), "w") as f:
        json.dump([{"text": t, "ids": enc.encode(t)} for t in checks], f)
    print(json.dumps(meta), flush=True)
    print(f"done in {time.time() - t0:.0f} s", flush=True)


if __name__ == "__main__":
    main()
