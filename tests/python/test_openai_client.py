"""The official `openai` Python package as a real client of `qvl serve`: models, chat with images (streaming
and not), multi-turn, and errors raised as the right openai exceptions."""
import json
from typing import Literal

import openai
import pydantic
import pytest

from conftest import run_server, scaled


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=scaled(120))


def image_message(uri: str, text: str) -> dict:
    return {"role": "user", "content": [{"type": "image_url", "image_url": {"url": uri}}, {"type": "text", "text": text}]}


def test_models_list_and_retrieve(client, server):
    models = client.models.list()
    assert [m.id for m in models.data] == [server.model]
    m = client.models.retrieve(server.model)
    assert m.id == server.model and m.object == "model"


def test_chat_with_image(client, image_data_uri):
    r = client.chat.completions.create(
        model="qwen3-vl", messages=[image_message(image_data_uri, "What is in this picture?")],
        max_tokens=12, temperature=0.7, seed=7)
    assert r.object == "chat.completion"
    assert len(r.choices) == 1
    choice = r.choices[0]
    assert choice.message.role == "assistant"
    assert isinstance(choice.message.content, str) and choice.message.content
    assert choice.finish_reason in ("stop", "length")
    assert 1 <= r.usage.completion_tokens <= 12
    assert r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens
    # qvl's extra field, kept by the client's models: the image became image tokens in the prompt.
    timings = r.timings
    assert timings["image_tokens"] > 0
    assert r.usage.prompt_tokens > timings["image_tokens"]
    assert timings["ttft_ms"] > 0


def test_chat_streaming_with_image_matches_non_streaming(client, image_data_uri):
    messages = [image_message(image_data_uri, "Describe the image.")]
    stream = client.chat.completions.create(
        model="qwen3-vl", messages=messages, max_tokens=16, temperature=0.8, seed=42, stream=True,
        stream_options={"include_usage": True})
    pieces, finish, usage, timings, roles = [], None, None, None, []
    for chunk in stream:
        assert chunk.object == "chat.completion.chunk"
        if chunk.usage:
            usage = chunk.usage
        if not chunk.choices:
            continue
        delta = chunk.choices[0].delta
        if delta.role:
            roles.append(delta.role)
        if delta.content:
            pieces.append(delta.content)
        if chunk.choices[0].finish_reason:
            finish = chunk.choices[0].finish_reason
            timings = getattr(chunk, "timings", None)
    assert roles == ["assistant"]
    assert len(pieces) >= 2, "the answer should arrive in several pieces, token by token"
    assert finish in ("stop", "length")
    assert usage is not None and 1 <= usage.completion_tokens <= 16
    assert len(pieces) <= usage.completion_tokens
    assert timings and timings["predicted_n"] == usage.completion_tokens
    # Same seed, same sampling: the non-streaming answer is the same text.
    whole = client.chat.completions.create(model="qwen3-vl", messages=messages, max_tokens=16, temperature=0.8, seed=42)
    assert whole.choices[0].message.content == "".join(pieces)


def test_multi_turn_with_system(client, image_data_uri):
    r = client.chat.completions.create(
        model="qwen3-vl",
        messages=[
            {"role": "system", "content": "You answer briefly."},
            image_message(image_data_uri, "What colour dominates?"),
            {"role": "assistant", "content": "Mostly blue."},
            {"role": "user", "content": "And the second colour?"},
        ],
        max_tokens=6)
    assert r.choices[0].message.content
    assert r.timings["image_tokens"] > 0


class Verdict(pydantic.BaseModel):
    """A structured answer; its strings are bounded so that the random-weight test model must end them."""
    answer: Literal["yes", "no"]
    label: str = pydantic.Field(max_length=8)
    confidence: float


def test_structured_output_validates_with_pydantic(client):
    # The schema as pydantic writes it, sent the way OpenAI's structured outputs are; pydantic checks the answer.
    for temperature in (0, 1):
        r = client.chat.completions.create(
            model="qwen3-vl", messages=[{"role": "user", "content": "Is there a cat? Answer in JSON."}],
            max_tokens=200, temperature=temperature, seed=5,
            response_format={"type": "json_schema",
                             "json_schema": {"name": "verdict", "schema": Verdict.model_json_schema(), "strict": True}})
        assert r.choices[0].finish_reason == "stop"
        Verdict.model_validate_json(r.choices[0].message.content)
    # json_object: an object (a stream's deltas joined).
    parts = client.chat.completions.create(
        model="qwen3-vl", messages=[{"role": "user", "content": "JSON"}], max_tokens=40, temperature=0, stream=True,
        response_format={"type": "json_object"})
    text = "".join(c.choices[0].delta.content or "" for c in parts if c.choices)
    assert text.lstrip().startswith("{")
    # A keyword that cannot be enforced is refused, named.
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(
            model="qwen3-vl", messages=[{"role": "user", "content": "hi"}],
            response_format={"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "string", "pattern": "^a"}}})
    assert "pattern" in e.value.message


WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "The weather in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 10},
                                                     "unit": {"enum": ["celsius", "fahrenheit"]}},
                   "required": ["city", "unit"], "additionalProperties": False}}}


def test_tool_call_loop(client):
    # The client asks for the call (the random-weight model would not make it by itself), runs the tool,
    # sends the result back as a tool message and gets an answer.
    messages = [{"role": "user", "content": "What is the weather in Paris?"}]
    r = client.chat.completions.create(model="qwen3-vl", messages=messages, tools=[WEATHER], max_tokens=200,
                                       temperature=0, tool_choice={"type": "function", "function": {"name": "get_weather"}})
    choice = r.choices[0]
    assert choice.finish_reason == "tool_calls"
    call = choice.message.tool_calls[0]
    assert call.type == "function" and call.function.name == "get_weather"
    args = json.loads(call.function.arguments)
    assert set(args) == {"city", "unit"} and args["unit"] in ("celsius", "fahrenheit")
    messages.append(choice.message.model_dump(exclude_none=True))
    messages.append({"role": "tool", "tool_call_id": call.id, "content": json.dumps({"temp_c": 21})})
    answer = client.chat.completions.create(model="qwen3-vl", messages=messages, tools=[WEATHER], max_tokens=8,
                                            tool_choice="none")
    assert isinstance(answer.choices[0].message.content, str)
    # Streamed: the call arrives as a tool_calls delta.
    deltas = [c.choices[0].delta for c in client.chat.completions.create(
        model="qwen3-vl", messages=messages[:1], tools=[WEATHER], max_tokens=200, temperature=0, stream=True,
        tool_choice="required") if c.choices]
    calls = [tc for d in deltas for tc in (d.tool_calls or [])]
    assert len(calls) == 1 and calls[0].function.name == "get_weather"
    json.loads(calls[0].function.arguments)


def test_bad_request_raises_bad_request_error(client):
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model="qwen3-vl", messages=[{"role": "user", "content": "hi"}], n=17)
    assert e.value.status_code == 400
    assert "n:" in e.value.message
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(
            model="qwen3-vl", messages=[image_message("https://example.com/cat.jpg", "What is this?")])
    assert "not fetched" in e.value.message
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(
            model="qwen3-vl", messages=[image_message("data:image/png;base64,bm90IGFuIGltYWdl", "What is this?")])


def test_logit_bias_and_context_length_code(client, server):
    # The SDK's logit_bias (token id -> bias) steers the sampler: +100 on "Hello" (9707) is every token, sampled too.
    r = client.chat.completions.create(model="qwen3-vl", messages=[{"role": "user", "content": "hi"}], max_tokens=3,
                                       temperature=1.0, seed=3, logit_bias={"9707": 100})
    assert r.choices[0].message.content == "HelloHelloHello"
    c = client.completions.create(model="qwen3-vl", prompt="hi", max_tokens=2, temperature=0, logit_bias={"9707": 100})
    assert c.choices[0].text == "HelloHello"
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model="qwen3-vl", messages=[{"role": "user", "content": "hi"}],
                                       logit_bias={"9707": 250})
    assert "logit_bias.9707" in e.value.message
    # A prompt over the context carries OpenAI's code, which clients branch on.
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model="qwen3-vl", messages=[{"role": "user", "content": "word " * 20000}],
                                       max_tokens=2)
    assert e.value.code == "context_length_exceeded", e.value.body


def test_unknown_model_raises_not_found(client):
    with pytest.raises(openai.NotFoundError):
        client.models.retrieve("no-such-model")


def test_api_key_required_raises_authentication_error():
    with run_server(api_key="sekrit") as s:
        wrong = openai.OpenAI(base_url=s.url + "/v1", api_key="wrong", max_retries=0, timeout=scaled(60))
        with pytest.raises(openai.AuthenticationError) as e:
            wrong.models.list()
        assert e.value.status_code == 401
        right = openai.OpenAI(base_url=s.url + "/v1", api_key="sekrit", max_retries=0, timeout=scaled(60))
        assert [m.id for m in right.models.list().data] == [s.model]
