"""Prompts used for the llama2.c fixtures (ours; no dataset text).

ENCODE_PROMPTS go through `harness encode` for both tokenizers; GENERATE_CASES through
`harness generate` and run.c for both tiny models. Prompts are bytes so that invalid
UTF-8 can be included.

    python3 prompts.py encode OUT_FILE     -> one hex prompt per line
    python3 prompts.py generate            -> prints "STEPS HEX" per line
"""
import sys

PARAGRAPH = (
    "Tom had a small red boat. Every morning he carried it down to the pond behind his "
    "house and watched it float. One day the wind blew hard, and the boat sailed far "
    "away, past the reeds and the old wooden bridge. Tom ran along the bank, calling for "
    "his dad. Together they found a long stick and pulled the boat back to the shore. "
    "Tom was so happy that he hugged his dad and said, \"Thank you! Next time I will "
    "hold the string.\""
)
assert 380 <= len(PARAGRAPH) <= 440, len(PARAGRAPH)

ENCODE_PROMPTS = [
    b"Hello world",
    b"The quick brown fox jumps over the lazy dog.",
    b"Once upon a time, there was a little girl named Lily. She loved to play outside.",
    b"",
    b" leading space",
    b"trailing space ",
    b"two  spaces",
    b"   ",
    b"tab\tand\nnewline",
    b"2024 and 3.14",
    b"She said, \"Hi!\" (really?) -- yes; no: 100% & more... #1 @home [x] {y} <z> / \\ | ~ ^ `q` *b* _u_ $5 'single'",
    b"I don't think it's Tom's ball, isn't it?",
    "caf\u00e9 na\u00efve".encode(),
    "Z\u00fcrich Stra\u00dfe \u00df".encode(),
    "\u039a\u03b1\u03bb\u03b7\u03bc\u03ad\u03c1\u03b1 \u03ba\u03cc\u03c3\u03bc\u03b5".encode(),  # Greek
    "\u041f\u0440\u0438\u0432\u0435\u0442, \u043c\u0438\u0440".encode(),  # Cyrillic
    "\u4f60\u597d\uff0c\u4e16\u754c".encode(),  # Chinese
    "\u3053\u3093\u306b\u3061\u306f\u4e16\u754c\u3001\u30ab\u30bf\u30ab\u30ca".encode(),  # Japanese
    "\uc548\ub155\ud558\uc138\uc694 \uc138\uacc4".encode(),  # Korean
    "I \U0001f642 llamas \U0001f999".encode(),  # emoji (slightly smiling face, llama)
    "\U0001f1eb\U0001f1f7 flag".encode(),  # regional indicators F R
    "cafe\u0301".encode(),  # combining acute accent
    b"<s>",
    b"</s>",
    b"<0x41>",
    b"antidisestablishmentarianism",
    PARAGRAPH.encode(),
    b"a" * 40,
    b"line one\r\nline two\r\n",
    b"bell\x07 and del\x7f control",
    b"caf\xe9 latin-1 byte",  # invalid UTF-8 (sentencepiece's Python API cannot take it)
]

GENERATE_CASES = [  # (steps, prompt bytes)
    (100, b"Once upon a time"),
    (100, b""),
    (100, b"Lily and Ben"),
    (100, b"The cat sat on the mat. It"),
    (100, "Zo\u00eb saw a dog".encode()),
    (128, b"Once upon a time"),  # STEPS == max_seq_len
    # both tiny models emit BOS (=1) right after this prompt: exercises run.c's stop rule
    (100, b"The sun was warm in the sky. Everyone played and smiled. It was a wonderful day!"),
]

if __name__ == "__main__":
    if sys.argv[1] == "encode":
        with open(sys.argv[2], "w") as f:
            for p in ENCODE_PROMPTS:
                f.write(p.hex() + "\n")
    elif sys.argv[1] == "generate":
        for steps, p in GENERATE_CASES:
            print(steps, p.hex())
    else:
        raise SystemExit("usage: prompts.py encode OUT | generate")
