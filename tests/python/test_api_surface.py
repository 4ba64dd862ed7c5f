"""The endpoints clients beyond chat expect, through the official `openai` package and plain HTTP: legacy
completions (prompt text or ids, echo, the legacy logprobs columns, streaming), logprobs in chat (stream and
not) and in Ollama's /api/chat, and llama-server's /tokenize, /detokenize and /apply-template, which agree
with `qvl tokenize`. The values themselves are checked against the model's logits in tests/test_logprobs.cpp."""
import json
import math
import subprocess
import urllib.request

import openai
import pytest

from conftest import _binary, _model_files, scaled


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=scaled(120))


def post(server, path: str, body: dict):
    req = urllib.request.Request(server.url + path, data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=scaled(60)) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"null")


def test_completion_text_and_ids_give_the_same_answer(client, server):
    r = client.completions.create(model=server.model, prompt="The colour of the sky is", max_tokens=6, temperature=0)
    assert r.object == "text_completion"
    assert r.choices[0].finish_reason in ("stop", "length")
    assert 1 <= r.usage.completion_tokens <= 6
    status, tok = post(server, "/tokenize", {"content": "The colour of the sky is"})
    assert status == 200
    by_ids = client.completions.create(model=server.model, prompt=tok["tokens"], max_tokens=6, temperature=0)
    assert by_ids.choices[0].text == r.choices[0].text
    assert by_ids.usage.prompt_tokens == len(tok["tokens"]) == r.usage.prompt_tokens


def test_completion_echo_scores_the_prompt(client, server):
    prompt = "<|im_start|>user\nHello<|im_end|>\n"
    r = client.completions.create(model=server.model, prompt=prompt, max_tokens=0, echo=True, logprobs=3)
    c = r.choices[0]
    assert c.text == prompt
    lp = c.logprobs
    status, tok = post(server, "/tokenize", {"content": prompt, "with_pieces": True})
    assert [t["piece"] for t in tok["tokens"]] == lp.tokens
    assert lp.token_logprobs[0] is None and lp.top_logprobs[0] is None
    assert all(v <= 0 for v in lp.token_logprobs[1:])
    assert lp.text_offset[0] == 0 and lp.text_offset == sorted(lp.text_offset)
    for value, top in zip(lp.token_logprobs[1:], lp.top_logprobs[1:]):
        assert 1 <= len(top) <= 3
        assert max(top.values()) >= value - 1e-6  # the best alternative is at least as likely
        assert sum(math.exp(v) for v in top.values()) <= 1 + 1e-5
    assert r.usage.completion_tokens == 0


def test_completion_streaming_matches_non_streaming(client, server):
    kw = dict(model=server.model, prompt="Once upon a time", max_tokens=8, temperature=0.9, seed=5)
    whole = client.completions.create(**kw, logprobs=1)
    pieces, tokens = [], []
    for chunk in client.completions.create(**kw, logprobs=1, stream=True):
        c = chunk.choices[0]
        pieces.append(c.text)
        if c.logprobs:
            tokens += c.logprobs.tokens
    assert "".join(pieces) == whole.choices[0].text
    assert tokens == whole.choices[0].logprobs.tokens


def test_completion_several_prompts_are_choices(client, server):
    r = client.completions.create(model=server.model, prompt=["One", "Two", "Three"], max_tokens=3, temperature=0)
    assert [c.index for c in r.choices] == [0, 1, 2]
    alone = client.completions.create(model=server.model, prompt="Two", max_tokens=3, temperature=0)
    assert r.choices[1].text == alone.choices[0].text


def test_chat_choices_through_the_openai_client(client, server):
    kw = dict(model=server.model, messages=[{"role": "user", "content": "Name a colour."}], max_tokens=6,
              temperature=1.2, seed=11, logprobs=True)
    r = client.chat.completions.create(**kw, n=3)
    assert [c.index for c in r.choices] == [0, 1, 2]
    for c in r.choices:
        alone = client.chat.completions.create(**dict(kw, seed=11 + c.index))
        assert c.message.content == alone.choices[0].message.content
        assert [t.token for t in c.logprobs.content] == [t.token for t in alone.choices[0].logprobs.content]
    streamed = {}
    for chunk in client.chat.completions.create(**kw, n=3, stream=True, stream_options={"include_usage": True}):
        for c in chunk.choices:
            streamed[c.index] = streamed.get(c.index, "") + (c.delta.content or "")
        if chunk.usage:
            assert chunk.usage.completion_tokens == r.usage.completion_tokens
            assert chunk.usage.prompt_tokens == r.usage.prompt_tokens
    assert streamed == {c.index: c.message.content for c in r.choices}


def test_completion_prompts_times_choices_streamed(client, server):
    kw = dict(model=server.model, prompt=["One", "Two"], max_tokens=4, temperature=1.2, seed=3, n=2)
    whole = client.completions.create(**kw)
    assert [c.index for c in whole.choices] == [0, 1, 2, 3]
    streamed = {}
    for chunk in client.completions.create(**kw, stream=True):
        for c in chunk.choices:
            streamed[c.index] = streamed.get(c.index, "") + c.text
    assert streamed == {c.index: c.text for c in whole.choices}


@pytest.mark.parametrize("body, field", [
    ({"max_tokens": 3}, "prompt"),
    ({"prompt": "x", "logprobs": 21}, "logprobs"),
    ({"prompt": "x", "suffix": "y"}, "suffix"),
    ({"prompt": [1, "a"]}, "prompt[1]"),
    ({"prompt": [-1]}, "prompt[0]"),
    ({"prompt": [999999999]}, "prompt"),
    ({"prompt": "x", "echo": True, "logprobs": 1, "stream": True}, "logprobs"),
    ({"prompt": "x", "n": 17}, "n"),
    ({"prompt": ["a", "b", "c"], "n": 6}, "n"),
    ({"prompt": "x", "n": 2, "best_of": 3}, "best_of"),
    ({"prompt": "<|vision_start|><|image_pad|><|vision_end|>"}, "image"),
])
def test_completion_bad_requests_name_the_field(server, body, field):
    status, e = post(server, "/v1/completions", body)
    assert status == 400 and field in e["error"]["message"], e
    assert e["error"]["type"] == "invalid_request_error"


def test_chat_logprobs_streamed_and_not(client, server):
    kw = dict(model=server.model, messages=[{"role": "user", "content": "Say something."}], max_tokens=8,
              temperature=0.8, seed=3, logprobs=True, top_logprobs=4)
    whole = client.chat.completions.create(**kw)
    content = whole.choices[0].logprobs.content
    assert len(content) == whole.usage.completion_tokens
    assert "".join(bytes(t.bytes).decode("utf-8", "replace") for t in content).startswith(whole.choices[0].message.content[:1])
    for t in content:
        assert len(t.top_logprobs) == 4
        assert t.top_logprobs[0].logprob >= t.logprob - 1e-6
        assert [a.logprob for a in t.top_logprobs] == sorted((a.logprob for a in t.top_logprobs), reverse=True)
    streamed = []
    for chunk in client.chat.completions.create(**kw, stream=True):
        if chunk.choices and chunk.choices[0].logprobs and chunk.choices[0].logprobs.content:
            streamed += chunk.choices[0].logprobs.content
    assert [(t.token, round(t.logprob, 5)) for t in streamed] == [(t.token, round(t.logprob, 5)) for t in content]
    plain = client.chat.completions.create(**{k: v for k, v in kw.items() if k not in ("logprobs", "top_logprobs")})
    assert plain.choices[0].logprobs is None
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(**{**kw, "top_logprobs": 21})
    assert "top_logprobs" in e.value.message


def test_ollama_chat_logprobs(server):
    status, r = post(server, "/api/chat", {"messages": [{"role": "user", "content": "hi"}], "stream": False,
                                           "logprobs": True, "top_logprobs": 2, "options": {"num_predict": 4}})
    assert status == 200
    assert len(r["logprobs"]) == r["eval_count"]
    assert all(len(t["top_logprobs"]) == 2 for t in r["logprobs"])


def qvl_tokenize(*args: str) -> list[int]:
    out = subprocess.run([str(_binary()), "tokenize", "--model", str(_model_files()), "--json", *args],
                         capture_output=True, text=True, timeout=scaled(60), check=True)
    return json.loads(out.stdout)["ids"]


def test_tokenize_agrees_with_the_command_line(server):
    text = "<|im_start|>Grüße, 世界! 🙂"
    status, r = post(server, "/tokenize", {"content": text})
    assert status == 200 and r["tokens"] == qvl_tokenize("--special", "--", text)
    status, r = post(server, "/tokenize", {"content": text, "parse_special": False})
    assert r["tokens"] == qvl_tokenize("--", text)
    status, r = post(server, "/tokenize", {"content": "🙂", "with_pieces": True})
    pieces = [t["piece"] for t in r["tokens"]]
    assert b"".join(bytes(p) if isinstance(p, list) else p.encode() for p in pieces) == "🙂".encode()
    status, d = post(server, "/detokenize", {"tokens": qvl_tokenize("--special", "--", text)})
    assert status == 200 and d["content"] == text
    status, e = post(server, "/detokenize", {"tokens": [1, -5]})
    assert status == 400 and "tokens[1]" in e["error"]
    status, e = post(server, "/tokenize", {"content": 5})
    assert status == 400 and "content" in e["error"]


def test_apply_template_is_the_prompt_the_model_reads(server, tmp_path):
    conversation = {"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]}
    status, r = post(server, "/apply-template", conversation)
    assert status == 200
    assert r["prompt"] == ("<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
                           "<|im_start|>assistant\n")
    path = tmp_path / "chat.json"
    path.write_text(json.dumps(conversation))
    out = subprocess.run([str(_binary()), "tokenize", "--model", str(_model_files()), "--json", "--prompt", "--chat",
                          str(path)], capture_output=True, text=True, timeout=scaled(60), check=True)
    assert json.loads(out.stdout)["prompt"] == r["prompt"]
    status, e = post(server, "/apply-template", {"messages": "hi"})
    assert status == 400 and "messages" in e["error"]
