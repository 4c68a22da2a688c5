#!/usr/bin/env python3
"""Expected GPT-2 token ids for the C++ tokenizer test (tests/data/gpt2_fixture.json).

The encoder below is OpenAI's published algorithm (gpt-2 repository, src/encoder.py:
bytes_to_unicode, get_pairs, Encoder.bpe, Encoder.encode) run over the repository's own
data/gpt2/encoder.json and data/gpt2/vocab.bpe, with the `regex` module for the pre-tokenising
pattern, as the original does. It is a test oracle only: the product does not use Python.

Every test string must classify each code point the same way under `regex` and under this
Python's unicodedata (from which data/unicode_ranges.inc is generated), so the fixture tests the
algorithm and not a difference between two Unicode versions; the script refuses a string that
does not. Besides the named strings it writes the token count and the sha256 of the ids (as
little-endian uint16) of whole corpus files, and the canonical split sizes of eval.md 1.1.

Usage: pip install regex; python3 tools/gpt2_reference_ids.py [OUT]
"""
import hashlib
import json
import os
import random
import struct
import sys
import unicodedata
from functools import lru_cache

import regex as re

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
EOT = 50256


@lru_cache()
def bytes_to_unicode():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(2**8):
        if b not in bs:
            bs.append(b)
            cs.append(2**8 + n)
            n += 1
    cs = [chr(n) for n in cs]
    return dict(zip(bs, cs))


def get_pairs(word):
    pairs = set()
    prev_char = word[0]
    for char in word[1:]:
        pairs.add((prev_char, char))
        prev_char = char
    return pairs


class Encoder:
    def __init__(self, encoder, bpe_merges):
        self.encoder = encoder
        self.decoder = {v: k for k, v in self.encoder.items()}
        self.byte_encoder = bytes_to_unicode()
        self.byte_decoder = {v: k for k, v in self.byte_encoder.items()}
        self.bpe_ranks = dict(zip(bpe_merges, range(len(bpe_merges))))
        self.cache = {}
        self.pat = re.compile(PATTERN)

    def bpe(self, token):
        if token in self.cache:
            return self.cache[token]
        word = tuple(token)
        pairs = get_pairs(word)
        if not pairs:
            return token
        while True:
            bigram = min(pairs, key=lambda pair: self.bpe_ranks.get(pair, float("inf")))
            if bigram not in self.bpe_ranks:
                break
            first, second = bigram
            new_word = []
            i = 0
            while i < len(word):
                try:
                    j = word.index(first, i)
                    new_word.extend(word[i:j])
                    i = j
                except ValueError:
                    new_word.extend(word[i:])
                    break
                if word[i] == first and i < len(word) - 1 and word[i + 1] == second:
                    new_word.append(first + second)
                    i += 2
                else:
                    new_word.append(word[i])
                    i += 1
            new_word = tuple(new_word)
            word = new_word
            if len(word) == 1:
                break
            else:
                pairs = get_pairs(word)
        word = " ".join(word)
        self.cache[token] = word
        return word

    def encode(self, text):
        bpe_tokens = []
        for token in re.findall(self.pat, text):
            token = "".join(self.byte_encoder[b] for b in token.encode("utf-8"))
            bpe_tokens.extend(self.encoder[bpe_token] for bpe_token in self.bpe(token).split(" "))
        return bpe_tokens

    def decode(self, tokens):
        text = "".join([self.decoder[token] for token in tokens])
        return bytearray([self.byte_decoder[c] for c in text]).decode("utf-8", errors="replace")


def get_encoder():
    with open(os.path.join(ROOT, "data/gpt2/encoder.json"), "r", encoding="utf-8") as f:
        encoder = json.load(f)
    with open(os.path.join(ROOT, "data/gpt2/vocab.bpe"), "r", encoding="utf-8") as f:
        bpe_data = f.read()
    bpe_merges = [tuple(merge_str.split()) for merge_str in bpe_data.split("\n")[1:-1]]
    return Encoder(encoder=encoder, bpe_merges=bpe_merges)


# ---- the test set --------------------------------------------------------------------------

CLASSES = [(re.compile(r"\p{L}"), "L"), (re.compile(r"\p{N}"), "N"), (re.compile(r"\s"), "S")]
WHITE_SPACE = {0x09, 0x0A, 0x0B, 0x0C, 0x0D, 0x20, 0x85, 0xA0, 0x1680, *range(0x2000, 0x200B), 0x2028, 0x2029,
               0x202F, 0x205F, 0x3000}


def class_regex(c):
    for pat, name in CLASSES:
        if pat.match(c):
            return name
    return "O"


def class_unicodedata(c):
    if ord(c) in WHITE_SPACE:
        return "S"
    cat = unicodedata.category(c)[0]
    return cat if cat in "LN" else "O"


def same_class_everywhere(c):
    return class_regex(c) == class_unicodedata(c)


def read_text(rel):
    with open(os.path.join(ROOT, rel), "rb") as f:
        return f.read().decode("utf-8")


def named_cases():
    shakespeare = read_text("data/tinyshakespeare/input.txt")
    brown = read_text("data/brown/brown.txt")
    return [
        ("hello world", "Hello world"),
        ("empty", ""),
        ("single space", " "),
        ("contractions", "I'm sure you'll see it's what they've said: we'd, I'd, you're, can't, don't."),
        ("contractions upper case and curly", "IT'S WE'LL I'M DON'T it\u2019s you\u2019re 'sand 'tis 'llama ''s"),
        ("apostrophes alone", "' '' ''' 's's 'S 'x"),
        ("digits", "In 1961 there were 3,141,592 tokens; 007 0.5 12345678901234567890 1e10 -42 +7"),
        ("digits other scripts", "\u0661\u0662\u0663 \u0967\u0968 \u2163 \u00bd \u00b2 \uff11\uff12 \u3007\u4e8c"),
        ("unicode letters", "caf\u00e9 na\u00efve \u00fcber Stra\u00dfe \u0395\u03bb\u03bb\u03b7\u03bd\u03b9\u03ba\u03ac "
                            "\u0440\u0443\u0441\u0441\u043a\u0438\u0439 \u65e5\u672c\u8a9e\u306e\u6587 \ud55c\uad6d\uc5b4 "
                            "\u05e2\u05d1\u05e8\u05d9\u05ea \u0627\u0644\u0639\u0631\u0628\u064a\u0629 \u0939\u093f\u0928\u094d\u0926\u0940"),
        ("combining marks", "e\u0301te\u0301 n\u0303 a\u0308\u0308 \u0301start"),
        ("emoji", "Hi \U0001f600! \U0001f44d\U0001f3fd \U0001f468\u200d\U0001f469\u200d\U0001f467 \u2764\ufe0f "
                  "\U0001f1fa\U0001f1f8 done\U0001f389"),
        ("whitespace runs", "a  b   c    d\t\te \t f  \n  g   "),
        ("newlines", "line one\nline two\n\nline four\n\n\n\nend\n"),
        ("leading and trailing spaces", "   spaced out   "),
        ("only whitespace", " \t\n \r\n  \n\n"),
        ("unicode whitespace", "a\u00a0b\u3000c\u2009d\u0085e\u2028f\u000bg\u000ch \u00a0 i\u1680j"),
        ("space before punctuation", "Wait ... what?! (yes) [no] {maybe} -- \"quoted\" #tag @user $5 %d ^_^ ~tilde"),
        ("mixed runs", "abc123def 456ghi!!!jkl ;;; mno\u00e9\u00e9 pq7r"),
        ("control characters", "a\x00b\x01c\x1fd\x7fe\x1cf"),
        ("code", "def f(x):\n    return x**2 + 1  # comment\n\tif (a && b) { c++; }\n"),
        ("url and email", "See https://example.com/a?b=c&d=e#f or mail me@host.org."),
        ("long word", "Pneumonoultramicroscopicsilicovolcanoconiosis antidisestablishmentarianism"),
        ("endoftext as text", "<|endoftext|> is plain text here"),
        ("shakespeare excerpt", shakespeare[:3000]),
        ("shakespeare middle", shakespeare[500000:502000]),
        ("brown excerpt", brown[:3000]),
        ("brown later sample", brown[4000000:4002500]),
        ("long pieces", "".join(random.Random(7).choice("ab") for _ in range(3000)) + " " + "9" * 1500 + " "
                        + "=-" * 800 + " " * 1200 + "x"),
    ]


def random_cases(count=24, length=60):
    # Pools that hit every branch of the pattern: ASCII, Latin-1, Greek, Cyrillic, CJK, digits of
    # several scripts, marks, emoji, every White_Space code point and apostrophe contractions.
    pools = [
        [chr(c) for c in range(0x20, 0x7F)],
        [chr(c) for c in range(0xA0, 0x250)],
        [chr(c) for c in range(0x370, 0x530)],
        [chr(c) for c in range(0x4E00, 0x4E80)] + [chr(c) for c in range(0x3040, 0x30FF)],
        [chr(c) for c in list(range(0x660, 0x66A)) + list(range(0x966, 0x970)) + list(range(0x2150, 0x2189))],
        [chr(c) for c in range(0x300, 0x370)],
        [chr(c) for c in range(0x1F300, 0x1F650)] + ["\u200d", "\ufe0f"],
        [chr(c) for c in sorted(WHITE_SPACE)],
        ["'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'", " '", "  ", "\n\n"],
    ]
    rng = random.Random(20240520)
    out = []
    for k in range(count):
        parts = []
        while len(parts) < length:
            s = rng.choice(rng.choice(pools))
            if all(same_class_everywhere(c) for c in s):
                parts.append(s)
        out.append((f"random {k}", "".join(parts)))
    return out


def ids_sha256(ids):
    return hashlib.sha256(struct.pack(f"<{len(ids)}H", *ids)).hexdigest()


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "tests/data/gpt2_fixture.json")
    enc = get_encoder()
    cases = []
    for name, text in named_cases() + random_cases():
        bad = sorted({f"U+{ord(c):04X}" for c in text if not same_class_everywhere(c)})
        assert not bad, f"case {name!r}: code points classified differently by regex and unicodedata: {bad}"
        ids = enc.encode(text)
        assert enc.decode(ids) == text, f"case {name!r}: decode does not round-trip"
        cases.append({"name": name, "text": text, "ids": ids})
    assert cases[0]["ids"] == [15496, 995], cases[0]["ids"]

    files = []
    for rel in ["data/tinyshakespeare/input.txt", "data/brown/brown.txt"]:
        ids = enc.encode(read_text(rel))
        files.append({"path": rel, "tokens": len(ids), "ids_sha256": ids_sha256(ids)})

    # Canonical splits of eval.md 1.1 with this encoder.
    ts = enc.encode(read_text("data/tinyshakespeare/input.txt"))
    cut = len(ts) * 9 // 10
    splits = {"ts.train": ts[:cut], "ts.val": ts[cut:]}
    samples = read_text("data/brown/brown.txt").split("\n\n")
    assert len(samples) == 500, len(samples)
    for name, rem in [("brown.train", range(8)), ("brown.val", [8]), ("brown.test", [9])]:
        ids = []
        for i, s in enumerate(samples):
            if i % 10 in rem:
                ids += enc.encode(s) + [EOT]
        splits[name] = ids
    split_info = {k: {"tokens": len(v), "sha256": ids_sha256(v)} for k, v in splits.items()}

    fixture = {
        "generator": "tools/gpt2_reference_ids.py (OpenAI gpt-2 src/encoder.py algorithm, regex "
                     f"{re.__version__}, Python {sys.version.split()[0]})",
        "cases": cases,
        "files": files,
        "splits": split_info,
    }
    with open(out, "w", encoding="ascii") as f:
        json.dump(fixture, f, ensure_ascii=True, indent=1)
        f.write("\n")
    print(f"wrote {out}: {len(cases)} cases; " + ", ".join(f"{k} {v['tokens']}" for k, v in split_info.items()))


if __name__ == "__main__":
    main()
