"""English text for the demo model, from Debian's `fortunes` and `jargon-text` packages.

Fortune files are '%'-separated cookies; the Jargon File (jargon.txt.gz) is a list of
`   :term: part-of-speech` headings followed by indented paragraphs. Both are cleaned to plain ASCII
prose: curly quotes straightened, {cross-reference} braces dropped, ASCII art and very long items
left out.
"""
import glob
import gzip
import os
import re
import unicodedata

FORTUNE_DIR = "/usr/share/games/fortunes"
JARGON_TXT = "/usr/share/doc/jargon-text/jargon.txt.gz"
SKIP_FORTUNE_FILES = {"art", "ascii-art", "translate-me"}

_REPLACE = {"\u2018": "'", "\u2019": "'", "\u201c": '"', "\u201d": '"', "\u2014": " -- ", "\u2013": "-",
            "\u2026": "...", "\u00a0": " ", "\u2022": "*", "\u2192": "->", "\u00b7": "-"}


def to_ascii(text):
    for a, b in _REPLACE.items():
        text = text.replace(a, b)
    text = unicodedata.normalize("NFKD", text)
    return text.encode("ascii", "ignore").decode("ascii")


def _looks_like_prose(text):
    letters = sum(c.isalpha() for c in text)
    return letters >= 0.6 * len(text.replace(" ", "").replace("\n", "")) and letters >= 20


def fortunes():
    """Returns a list of (file name, cookie text)."""
    out = []
    for path in sorted(glob.glob(os.path.join(FORTUNE_DIR, "*"))):
        name = os.path.basename(path)
        if "." in name or name in SKIP_FORTUNE_FILES or not os.path.isfile(path):
            continue
        with open(path, encoding="utf-8", errors="replace") as f:
            raw = f.read()
        for cookie in re.split(r"\n%\n", raw):
            text = to_ascii(cookie).replace("\t", "    ")
            lines = [l.rstrip() for l in text.strip("\n").split("\n")]
            # Reflow ordinary paragraphs; keep short lines (verse, dialogue, attributions).
            text = "\n".join(l.strip() if len(l.strip()) > 0 else "" for l in lines).strip()
            if not text or len(text) > 1200 or not _looks_like_prose(text):
                continue
            out.append((name, text))
    return out


def jargon():
    """Returns a list of (term, definition) with the definition's paragraphs reflowed."""
    with gzip.open(JARGON_TXT, "rt", encoding="utf-8", errors="replace") as f:
        lines = f.read().split("\n")
    entries, term, body = [], None, []
    head = re.compile(r"^   :([^:]+):\s*(.*)$")

    def flush():
        if term is None:
            return
        paras = " ".join(body).split("\x00")
        text = "\n\n".join(re.sub(r"\s+", " ", p).strip() for p in paras if p.strip())
        text = to_ascii(re.sub(r"[{}]", "", text))
        text = re.sub(r"\s+([,.;:])", r"\1", text)
        if 40 <= len(text) <= 1500 and _looks_like_prose(text):
            entries.append((to_ascii(term).strip(), text))

    for line in lines:
        m = head.match(line)
        if m:
            flush()
            term, body = m.group(1), []
            continue
        if term is None:
            continue
        if not line.strip():
            body.append("\x00")
        elif line.startswith("   ") and not line.startswith("    " * 4):
            body.append(line.strip())
        else:
            flush()
            term, body = None, []
    flush()
    return entries


def strip_etymology(definition):
    """The first paragraph of a jargon entry without a leading [bracketed] origin note or '1.' number."""
    first = definition.split("\n\n")
    for p in first:
        p = re.sub(r"^\d+\.\s*", "", p.strip())
        p = re.sub(r"^\[[^\]]*\]\s*", "", p).strip()
        if len(p) >= 15:
            return p
    return first[0]
