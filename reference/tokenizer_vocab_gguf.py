#!/usr/bin/env python3
"""Small vocabulary-only GGUFs for each tokenizer the runtime reads, and
llama.cpp's ids for a set of hard strings on each (the fixture
runtime/tests/tokenizers.rs compares against).

Two steps, two Pythons (the `gguf` package and llama-cpp-python live apart
here):

    python3 reference/tokenizer_vocab_gguf.py write --out runtime/tests/fixtures/tokenizers
    ~/.cache/draftwise/bench-venv/bin/python reference/tokenizer_vocab_gguf.py \
        reference --dir runtime/tests/fixtures/tokenizers --json reference/data/tokenizers.llamacpp.json

`write` (needs `gguf`): learns one byte-level BPE vocabulary and one
SentencePiece vocabulary on a corpus written below, deterministically. The
BPE merges are learned on whole lines, so they cross every place a
pre-tokenizer cuts (word/space, digit groups, contractions, punctuation
runs, line breaks, case changes): a wrong split meets merges the right one
never does, and the ids differ. A few tokens have no merge path (for
`ignore_merges`), and there are control and user-defined tokens. The BPE
vocabulary is written once per pre-tokenizer name; the SentencePiece one as
Llama 2 files are (no space-prefix or BOS keys: the defaults) and as
Mistral's (explicit keys, `[INST]` control tokens). Characters left out of
the SentencePiece pieces exercise byte fallback.

`reference` (needs llama_cpp): loads each GGUF with vocab_only and records,
per string, `llama_tokenize` with BOS and special tokens parsed
(`with_specials`) and with neither (`as_text`).
"""

import argparse
import json
import os
import sys
from collections import Counter

# --- corpus -------------------------------------------------------------------

LINES = [
    "It's a test. I'LL see; we've done it, they'RE here and she'd know. Don't!",
    "The year 2024 had 365 days; 1234567 and 3.14159 and 1,000,000 and 00042.",
    "HelloWorld HTTPServer getHTTPResponse parseJSONValue XMLHttpRequest iPhone",
    "def main():\n    x = [a for a in range(10) if a % 2]\n    return x  # done\n",
    "fn main() {\n\tlet s = \"hi\";\n\tprintln!(\"{s}\");\n}\n\n\n",
    "Wait... what?! Really?? -- yes ==> no <== maybe :) ;-) (ok) [sure] {fine}",
    "naïve café résumé Straße façade Ελληνικά русский язык Ünïcödé",
    "日本語のテキスト 中文字符 한국어 텍스트 東京 北京",
    "emoji 🙂🙂 🚀 and symbols ∑ ≠ ≤ ™ © and a/b/c //comment /path/to/file",
    "  two leading spaces   three inside    four\t\ttabs \n \n  end  ",
    "line one\nline two\r\nline three\n\n\nafter blank lines\n",
    "ABC DEF GHI abc def ghi AbC dEf 123abc abc123 a1b2c3",
    "you're right, it isn't, I'm sure, we'll see, I've got it, he's IT'S",
    "price: $19.99, 50% off, #tag @user user@example.com https://x.org/a?b=1",
    "    indented(code):\n        return [a for a in b if a]\n    pass\n",
    "Mixed UPPERlower lowerUPPER ÉCOLE école ÀÉÎ àéî",
]


def corpus():
    """The training text: each line, each pair of lines joined, and the hard
    strings themselves (so merges span where their words are cut)."""
    out = []
    for i, a in enumerate(LINES):
        out.append(a)
        out.append(a + " " + LINES[(i + 3) % len(LINES)])
        out.append(LINES[(i + 7) % len(LINES)] + "\n" + a)
    for h in HARD:
        # Without the special tokens' texts: no learned token may equal one.
        for t in BPE_CONTROL + BPE_USER + ["<s>", "</s>", "<unk>", "[INST]", "[/INST]"]:
            h = h.replace(t, " ")
        out += [h, h]
    return out


# --- byte-level BPE -----------------------------------------------------------


def byte_chars():
    """GPT-2's byte -> character table."""
    keep = list(range(0x21, 0x7F)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    table = {b: chr(b) for b in keep}
    n = 0
    for b in range(256):
        if b not in table:
            table[b] = chr(256 + n)
            n += 1
    return table


def learn_merges(chunks, n_merges):
    """Plain BPE on `chunks` (lists of symbols): the most frequent adjacent
    pair merges first, ties broken by the pair's text (deterministic)."""
    words = Counter(tuple(c) for c in chunks)
    merges = []
    for _ in range(n_merges):
        pairs = Counter()
        for w, k in words.items():
            for a, b in zip(w, w[1:]):
                pairs[(a, b)] += k
        if not pairs:
            break
        best = min(pairs.items(), key=lambda kv: (-kv[1], kv[0]))[0]
        if pairs[best] < 2:
            break
        merges.append(best)
        new = Counter()
        for w, k in words.items():
            out, i = [], 0
            while i < len(w):
                if i + 1 < len(w) and (w[i], w[i + 1]) == best:
                    out.append(w[i] + w[i + 1])
                    i += 2
                else:
                    out.append(w[i])
                    i += 1
            new[tuple(out)] += k
        words = new
    return merges


BPE_CONTROL = ["<|begin_of_text|>", "<|end_of_text|>", "<|im_start|>", "<|im_end|>", "<|eot_id|>"]
BPE_USER = ["<tool_call>"]
# Tokens no merge builds: taken whole only where llama.cpp ignores merges.
BPE_WHOLE = [" extraordinary", "Supercalifragilistic", " 999"]


def bpe_vocab():
    bc = byte_chars()
    enc = lambda s: "".join(bc[b] for b in s.encode())
    chunks = [[bc[b] for b in line.encode()] for line in corpus()]
    merges = learn_merges(chunks, 2000)
    tokens = [bc[b] for b in range(256)]
    seen = set(tokens)
    for a, b in merges:
        if a + b not in seen:
            seen.add(a + b)
            tokens.append(a + b)
    for w in BPE_WHOLE:
        if enc(w) not in seen:
            seen.add(enc(w))
            tokens.append(enc(w))
    types = [1] * len(tokens)
    for t in BPE_CONTROL:
        tokens.append(t)
        types.append(3)
    for t in BPE_USER:
        tokens.append(t)
        types.append(4)
    return tokens, types, [f"{a} {b}" for a, b in merges]


# --- SentencePiece ------------------------------------------------------------

# Characters that get no piece: written as <0xXX> byte tokens.
SPM_LEFT_OUT = set("🙂🚀∑≠≤™©東京北京한국어텍스트")


def spm_vocab():
    text = [" " + line.replace(" ", "\u2581") for line in corpus()]
    text = [t.replace(" ", "\u2581") for t in text]
    chunks = []
    for t in text:
        # SentencePiece learns within whitespace-separated pieces.
        for part in t.split("\u2581"):
            if part:
                chunks.append(["\u2581"] + [c for c in part])
    chunks = [[c for c in ch if c not in SPM_LEFT_OUT] for ch in chunks]
    merges = learn_merges([c for c in chunks if len(c) > 1], 900)
    pieces = ["<unk>", "<s>", "</s>", "[INST]", "[/INST]"]
    types = [2, 3, 3, 3, 3]
    scores = [0.0] * 5
    for b in range(256):
        pieces.append(f"<0x{b:02X}>")
        types.append(6)
        scores.append(0.0)
    chars = sorted({c for ch in chunks for c in ch})
    seen = set(pieces)
    for i, (a, b) in enumerate(merges):
        if a + b not in seen:
            seen.add(a + b)
            pieces.append(a + b)
            types.append(1)
            scores.append(-float(i))
    for j, c in enumerate(chars):
        if c not in seen:
            seen.add(c)
            pieces.append(c)
            types.append(1)
            scores.append(-1000.0 - j)
    return pieces, types, scores


# --- GGUF files ---------------------------------------------------------------

BPE_PRES = ["gpt-2", "default", "smollm", "llama-bpe", "qwen2", "tekken"]


def write_gguf(path, model, fill):
    import gguf
    import numpy as np

    w = gguf.GGUFWriter(path, "llama")
    # The hyperparameters llama.cpp reads before the vocabulary; no tensors
    # (vocab_only loads stop before them).
    w.add_context_length(64)
    w.add_embedding_length(8)
    w.add_block_count(1)
    w.add_feed_forward_length(16)
    w.add_head_count(2)
    w.add_head_count_kv(2)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_dimension_count(4)
    w.add_tokenizer_model(model)
    fill(w)
    w.add_tensor("token_embd.weight", np.zeros((1, 8), dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def cmd_write(args):
    os.makedirs(args.out, exist_ok=True)
    tokens, types, merges = bpe_vocab()
    bos, eos = tokens.index("<|begin_of_text|>"), tokens.index("<|end_of_text|>")
    for pre in BPE_PRES:

        def fill(w, pre=pre):
            w.add_tokenizer_pre(pre)
            w.add_token_list(tokens)
            w.add_token_types(types)
            w.add_token_merges(merges)
            w.add_bos_token_id(bos)
            w.add_eos_token_id(eos)
            # llama-bpe and tekken leave BOS to the pre-tokenizer's default (on).
            if pre not in ("llama-bpe", "tekken"):
                w.add_add_bos_token(pre == "qwen2")

        write_gguf(os.path.join(args.out, f"bpe-{pre}.gguf"), "gpt2", fill)
    pieces, ptypes, scores = spm_vocab()
    for name in ["llama2", "mistral"]:

        def fill(w, name=name):
            w.add_token_list(pieces)
            w.add_token_types(ptypes)
            w.add_token_scores(scores)
            w.add_bos_token_id(1)
            w.add_eos_token_id(2)
            w.add_unk_token_id(0)
            if name == "mistral":
                w.add_add_bos_token(True)
                w.add_add_eos_token(False)
                w.add_add_space_prefix(True)

        write_gguf(os.path.join(args.out, f"spm-{name}.gguf"), "llama", fill)
    print(f"BPE: {len(tokens)} tokens, {len(merges)} merges; SentencePiece: {len(pieces)} pieces")


# --- llama.cpp's ids ----------------------------------------------------------

HARD = [
    "Hello world",
    "It's a test. I'LL see; we'Ve done it, THEY'RE here, she'D know.",
    "don't 'tis 's 'S 'x",
    "1234567 12 123 1234 3.14159 1,000,000 00042 ٣٤٥ ½",
    "year 2024 and 999 and  999 and  1",
    "HelloWorld HTTPServer getHTTPResponse iPhone ABCdef abcDEF",
    "Wait... what?! Really?? -- ==> <== :) (ok) [x] {y}",
    "a/b/c //comment /path/to/file\n//\n",
    "  two leading spaces   three inside    four\t\ttabs",
    "trailing spaces   ",
    "line one\nline two\r\nline three\n\n\nafter\n \n  x",
    "\n\n\n\n",
    "   \n\n   \n",
    "def main():\n    x = [a for a in range(10) if a % 2]\n    return x  # done\n",
    "naïve café résumé Straße ÉCOLE école ÀÉÎ àéî Ünïcödé",
    "Ελληνικά русский язык",
    "日本語のテキスト 中文字符 東京 한국어",
    "emoji 🙂🙂 🚀 👩\u200d👩\u200d👧 ∑ ≠ ™ ©",
    "combining e\u0301 and a\u0308 marks",
    "nbsp\u00a0here and\u3000ideographic space",
    " extraordinary Supercalifragilistic extraordinary",
    "<|begin_of_text|>hi<|im_start|>user\nyo<|im_end|>\n<|eot_id|>",
    "call <tool_call>{\"a\": 1}</tool_call> done",
    "[INST] What is 2+2? [/INST] 4</s><s>",
    "x<s>y</s>z<unk>",
    "price: $19.99, 50% off, #tag @user user@example.com https://x.org/a?b=1",
    "Mixed UPPERlower lowerUPPER AbC dEf 123abc abc123 a1b2c3",
    "getHTTPResponse XMLHttpRequest McDonald'S iOSApp ÉcoleNormale ÀBCdef",
    "path/to/file/ and a//b\n/\nc/ /d",
    "numbers 1 12 123 1234 12345 123456 1234567890",
    "tabs\t\tand spaces \t \n\t\nend",
    "Ωμέγα ΑΒΓ абвГДЕ 你好世界 ١٢٣",
    "x = y+z; a<=b; c==d; e!=f; g->h; i::j",
    "",
    " ",
    "a",
]


def cmd_reference(args):
    import llama_cpp

    out = {
        "command": " ".join(["reference/tokenizer_vocab_gguf.py"] + sys.argv[1:]),
        "llama_cpp_python": llama_cpp.__version__,
        "files": {},
    }
    names = sorted(f for f in os.listdir(args.dir) if f.endswith(".gguf"))
    for f in names:
        llm = llama_cpp.Llama(os.path.join(args.dir, f), vocab_only=True, verbose=False)
        cases = []
        for text in HARD:
            b = text.encode()
            cases.append(
                {
                    "text": text,
                    "with_specials": llm.tokenize(b, add_bos=True, special=True),
                    "as_text": llm.tokenize(b, add_bos=False, special=False),
                }
            )
        out["files"][f] = {"cases": cases}
        del llm
    # One case per line: reviewable diffs, a compact file.
    with open(args.json, "w") as fh:
        fh.write("{\n")
        fh.write(f' "command": {json.dumps(out["command"])},\n')
        fh.write(f' "llama_cpp_python": {json.dumps(out["llama_cpp_python"])},\n')
        fh.write(' "files": {\n')
        for i, (f, v) in enumerate(out["files"].items()):
            fh.write(f'  {json.dumps(f)}: {{"cases": [\n')
            rows = [json.dumps(c, ensure_ascii=False, separators=(",", ":")) for c in v["cases"]]
            fh.write(",\n".join("   " + r for r in rows))
            fh.write("\n  ]}" + ("," if i + 1 < len(out["files"]) else "") + "\n")
        fh.write(" }\n}\n")
    print(f"{len(names)} files, {len(HARD)} strings each -> {args.json}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    w = sub.add_parser("write")
    w.add_argument("--out", required=True)
    r = sub.add_parser("reference")
    r.add_argument("--dir", required=True)
    r.add_argument("--json", required=True)
    args = ap.parse_args()
    cmd_write(args) if args.cmd == "write" else cmd_reference(args)


if __name__ == "__main__":
    main()
