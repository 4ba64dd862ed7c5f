"""Writes tests/data/tokenizer_golden.json: ids from Hugging Face `tokenizers` for >= 2000 strings.

Each case holds the text, the ids with added tokens matched (how the chat format's own text is
tokenized), the ids with special tokens disabled (how user text is tokenized: encode_special_tokens),
and HF's decode of the ids. Deterministic: fixed seeds, so re-running reproduces the file byte for byte.
"""
import json
import random
import sys
from pathlib import Path

import tokenizers

ROOT = Path(__file__).resolve().parents[2]
MODEL = ROOT / "models" / "qwen3-vl-2b-instruct"
OUT = ROOT / "tests" / "data" / "tokenizer_golden.json"

FIXED = [
    "", " ", "  ", "\t", "\n", "\r\n", "\r", "\n\n\n", " \n ", "a", "Hello, world!", "Hello world",
    "  leading and trailing  ", "don't you'll we've I'm she'd they're it's", "DON'T YOU'LL WE'VE I'M",
    "'s 't 're 've 'm 'll 'd", "'hello' \"quoted\"", "ſ'ſ 'ſ", "x'S", "123", "1234567890123456789012345",
    "3.14159 2,718 1e-10 0x1F", "¹²³ ½ ⅓ Ⅻ ④ ٣٤٥ ۱۲۳ १२३", "你好，世界！", "我喜欢吃苹果。今天天气很好。",
    "こんにちは世界。カタカナとひらがな", "안녕하세요 세계", "مرحبا بالعالم", "שלום עולם", "Привет, мир!",
    "Γειά σου Κόσμε", "नमस्ते दुनिया", "สวัสดีชาวโลก", "😀😃😄😁", "👨‍👩‍👧‍👦 family", "🏳️‍🌈 flag",
    "👍🏽 thumbs", "🇫🇷🇩🇪🇯🇵", "e\u0301 e\u0301\u0302 a\u0308 n\u0303", "\u00e9 vs e\u0301", "Å vs A\u030a",
    "\u1e9b\u0323", "ﬁ ﬂ ﬀ", "Ｆｕｌｌｗｉｄｔｈ　ｔｅｘｔ", "\u200b\u200c\u200d\ufeff", "\u00a0\u2003\u3000 spaces",
    "tab\there", "a\tb\t\tc", "line1\nline2\r\nline3\rline4", "   \n\n   x", "x   \n", "x   ", "   x",
    "def f(x):\n    return x * 2\n", "for (int i = 0; i < n; ++i) { a[i] += b[i]; }",
    "#include <stdio.h>\nint main() { printf(\"hi\\n\"); }", "<|im_start|>user\nhi<|im_end|>",
    "<|image_pad|><|image_pad|>", "<|vision_start|><|image_pad|><|vision_end|>", "<think>x</think>",
    "<tool_call>{\"a\": 1}</tool_call>", "<|endoftext|>", "<|im_start", "im_start|>", "<<|im_end|>>",
    "<|fim_prefix|>a<|fim_suffix|>b<|fim_middle|>", "a" * 500, "ab" * 300, " " * 200, "\n" * 50,
    "!" * 100, "1" * 300, "😀" * 50, "中" * 200, "...", "!!!???", "--->", "a\u0000b", "\x7f\x01\x1b[0m",
    "https://example.com/path?q=1&r=2#frag", "user@example.com", "C:\\Windows\\System32",
    "$x = \\frac{a}{b}$", "| a | b |\n|---|---|\n| 1 | 2 |", "**bold** _it_ `code`", "\u2028\u2029",
    "\ud7ff\ue000\uffff", "\U0001f600\U0010fffd", "İstanbul ıi", "ß ẞ", "Ǆǅǆ", "ﷺ", "각", "\u0e01\u0e34",
]

SCRIPTS = {
    "latin": "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ",
    "latin_ext": "àáâãäåæçèéêëìíîïñòóôõöøùúûüýÿĀāĂăĄąĆćČčĎďĐđĒēĘęĚěĞğĪīİıŁłŃńŇňŌōŐőŒœŘřŚśŞşŠšŢţŤťŪūŮůŰűŸŹźŻżŽž",
    "cjk": "的一是不了人我在有他这中大来上国个到说们为子和你地出道也时年得就那要下以生会自着去之过家学对可她里后小么心多天而能好都然没日于起还发成事只作当想看文无开手十用主行方又如前所本见经头面公同三已老从动两长",
    "hira": "あいうえおかきくけこさしすせそたちつてとなにぬねのはひふへほまみむめもやゆよらりるれろわをんがぎぐげござじずぜぞだぢづでどばびぶべぼぱぴぷぺぽ",
    "kata": "アイウエオカキクケコサシスセソタチツテトナニヌネノハヒフヘホマミムメモヤユヨラリルレロワヲンガギグゲゴー",
    "hangul": "가나다라마바사아자차카타파하각난닫랄맘밥삿앙잦찿캌탙팦핳한국어입니다세요",
    "arabic": "ابتثجحخدذرزسشصضطظعغفقكلمنهوي٠١٢٣٤٥٦٧٨٩ًٌٍَُِّْ",
    "cyrillic": "абвгдеёжзийклмнопрстуфхцчшщъыьэюяАБВГДЕЁЖЗИЙКЛМНОПРСТУФХЦЧШЩЪЫЬЭЮЯ",
    "greek": "αβγδεζηθικλμνξοπρστυφχψωΑΒΓΔΕΖΗΘΙΚΛΜΝΞΟΠΡΣΤΥΦΧΨΩάέήίόύώ",
    "devanagari": "अआइईउऊएऐओऔकखगघचछजझटठडढणतथदधनपफबभमयरलवशषसह्ािीुूेैोौंः०१२३",
    "thai": "กขคงจฉชซญดตถทธนบปผพฟภมยรลวศสหอฮะาิีึืุูเแโใไ่้๊๋",
    "digits": "0123456789",
    "punct": "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~¡¿«»“”‘’…—–·•°±×÷§¶©®™€£¥¢",
    "space": " \t\n\r\u00a0\u3000\u2009\u200b\u2028\u0085\x0b\x0c",
    "emoji": "😀😂🥲😍🤔👍👎🙏🔥✨🎉❤️💔🚀🌍🐱🐶🍕☕⚽🏳️‍🌈👨‍💻👩‍🔬🧑🏾‍🤝‍🧑🏻🇨🇳🇺🇸🏴‍☠️",
    "combining": "\u0300\u0301\u0302\u0303\u0308\u030a\u0327\u0323\u0331\u20d7\u0640",
    "special": None,  # filled with added-token texts
    "code": None,
}

CODE_SNIPPETS = [
    "int x = 42;", "if (a && b) { return; }", "std::vector<int> v{1,2,3};", "print(f'{x:.2f}')",
    "SELECT * FROM t WHERE id = 7;", "fn main() -> Result<(), Box<dyn Error>> {", "    x += 1\n",
    "<div class=\"a\">&amp;</div>", "a == b != c <= d >= e", "// comment\n/* block */", "lambda x: x**2",
    "0b1010 | 0o17 ^ 0xFF", "#!/usr/bin/env bash\nset -euo pipefail\n", "\t\treturn nil, err\n",
]


def random_string(rng, specials):
    kind = rng.random()
    parts = []
    n_parts = rng.randint(1, 8)
    for _ in range(n_parts):
        script = rng.choice(list(SCRIPTS))
        if script == "special":
            parts.append(rng.choice(specials))
        elif script == "code":
            parts.append(rng.choice(CODE_SNIPPETS))
        else:
            alphabet = SCRIPTS[script]
            length = rng.choice([1, 2, 3, 5, 8, 13, 40]) if kind < 0.95 else rng.randint(50, 250)
            parts.append("".join(rng.choice(alphabet) for _ in range(length)))
        sep = rng.choice(["", " ", " ", "  ", "\n", ", ", "\t", "'s ", "'LL "])
        parts.append(sep)
    return "".join(parts)


def main():
    tok = tokenizers.Tokenizer.from_file(str(MODEL / "tokenizer.json"))
    added = [t.content for t in tok.get_added_tokens_decoder().values()]
    rng = random.Random(20261130)
    texts = list(FIXED)
    # Words from each script on their own and with a leading space, so common merges are exercised.
    for script, alphabet in SCRIPTS.items():
        if alphabet is None:
            continue
        for _ in range(30):
            w = "".join(rng.choice(alphabet) for _ in range(rng.randint(1, 12)))
            texts.append(w)
            texts.append(" " + w)
    for s in CODE_SNIPPETS:
        texts.append(s)
    while len(texts) < 2100:
        texts.append(random_string(rng, added))
    # Every added token alone and inside text.
    for a in sorted(added):
        texts.append(a)
        texts.append("x" + a + " y")

    cases = []
    for text in texts:
        tok.encode_special_tokens = False
        ids = tok.encode(text, add_special_tokens=False).ids
        tok.encode_special_tokens = True
        ids_plain = tok.encode(text, add_special_tokens=False).ids
        decoded = tok.decode(ids, skip_special_tokens=False)
        cases.append({"text": text, "ids": ids, "ids_user": ids_plain, "decoded": decoded})
    OUT.parent.mkdir(parents=True, exist_ok=True)
    with open(OUT, "w", encoding="utf-8") as f:
        f.write('{"tokenizers_version": %s,\n "cases": [\n' % json.dumps(tokenizers.__version__))
        for i, c in enumerate(cases):
            f.write(json.dumps(c, ensure_ascii=False) + (",\n" if i + 1 < len(cases) else "\n"))
        f.write("]}\n")
    print(f"{OUT}: {len(cases)} cases", file=sys.stderr)


if __name__ == "__main__":
    main()
