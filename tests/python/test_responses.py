"""OpenAI's Responses API through the official `openai` package: plain and streamed (the documented event
sequence), an image, text.format, a function-call round trip, previous_response_id (a follow-up sends only its
new turn; its prompt is restored from the prefix cache), logprobs, retrieval, the bounded store, and errors that
name the field."""
import json

import openai
import pydantic
import pytest

from conftest import run_server, scaled


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=scaled(120))


def test_plain_text(client, server):
    r = client.responses.create(model=server.model, input="Say hello.", max_output_tokens=8, temperature=0)
    assert r.object == "response" and r.id.startswith("resp_")
    assert r.status in ("completed", "incomplete")
    assert r.output[0].type == "message" and r.output[0].role == "assistant"
    assert r.output_text == r.output[0].content[0].text and r.output_text
    assert 1 <= r.usage.output_tokens <= 8
    assert r.usage.total_tokens == r.usage.input_tokens + r.usage.output_tokens
    assert r.usage.input_tokens_details.cached_tokens >= 0
    if r.status == "incomplete":  # the message item says so too
        assert r.incomplete_details.reason == "max_output_tokens" and r.output[0].status == "incomplete"
    else:
        assert r.output[0].status == "completed"
    # The same question as a chat completion: the same prompt, the same greedy answer.
    c = client.chat.completions.create(model=server.model, messages=[{"role": "user", "content": "Say hello."}],
                                       max_tokens=8, temperature=0)
    assert c.choices[0].message.content == r.output_text
    assert c.usage.prompt_tokens == r.usage.input_tokens


def test_instructions_are_the_system_message(client, server):
    r = client.responses.create(model=server.model, instructions="Be brief.", input="Hi", max_output_tokens=6, temperature=0)
    c = client.chat.completions.create(model=server.model, max_tokens=6, temperature=0, messages=[
        {"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}])
    assert r.output_text == c.choices[0].message.content and r.instructions == "Be brief."


def test_streamed_events_follow_the_documented_sequence(client, server):
    kw = dict(model=server.model, input="Tell me a story.", max_output_tokens=10, temperature=0.8, extra_body={"seed": 4})
    events = list(client.responses.create(**kw, stream=True))
    types = [e.type for e in events]
    assert types[:4] == ["response.created", "response.in_progress", "response.output_item.added",
                         "response.content_part.added"]
    assert types[-4:] == ["response.output_text.done", "response.content_part.done", "response.output_item.done",
                          types[-1]]
    assert types[-1] in ("response.completed", "response.incomplete")
    assert [e.sequence_number for e in events] == list(range(len(events)))
    deltas = [e.delta for e in events if e.type == "response.output_text.delta"]
    assert len(deltas) >= 2
    final = events[-1].response
    assert "".join(deltas) == final.output_text == events[-4].text
    whole = client.responses.create(**kw)
    assert whole.output_text == final.output_text
    assert final.usage.output_tokens == whole.usage.output_tokens


def test_image_input(client, server, image_data_uri):
    r = client.responses.create(model=server.model, max_output_tokens=6, input=[{"role": "user", "content": [
        {"type": "input_text", "text": "What is in this picture?"},
        {"type": "input_image", "image_url": image_data_uri, "detail": "low"}]}])
    assert r.output_text
    assert r.timings["image_tokens"] > 0  # qvl's extra field, kept by the client's models


class Verdict(pydantic.BaseModel):
    cat: bool
    confidence: float


def test_text_format_json_schema(client, server):
    r = client.responses.create(model=server.model, input="Is there a cat? Answer in JSON.", max_output_tokens=200,
                                temperature=0, text={"format": {"type": "json_schema", "name": "verdict",
                                                                "schema": Verdict.model_json_schema(), "strict": True}})
    assert r.status == "completed"
    Verdict.model_validate_json(r.output_text)
    parsed = client.responses.parse(model=server.model, input="JSON please", text_format=Verdict, max_output_tokens=200,
                                    temperature=0)
    assert isinstance(parsed.output_parsed, Verdict)


WEATHER = {"type": "function", "name": "get_weather", "description": "The weather in a city.",
           "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 10}},
                          "required": ["city"], "additionalProperties": False}}


def test_function_call_round_trip(client, server):
    r = client.responses.create(model=server.model, input="Weather in Paris?", tools=[WEATHER], max_output_tokens=100,
                                temperature=0, tool_choice={"type": "function", "name": "get_weather"})
    calls = [o for o in r.output if o.type == "function_call"]
    assert len(calls) == 1 and calls[0].name == "get_weather" and calls[0].call_id
    assert set(json.loads(calls[0].arguments)) == {"city"}
    # The result goes back as a function_call_output item, continuing the stored response.
    follow = client.responses.create(model=server.model, previous_response_id=r.id, tools=[WEATHER], tool_choice="none",
                                     max_output_tokens=6, temperature=0, input=[{"type": "function_call_output", "call_id": calls[0].call_id,
                                                                  "output": json.dumps({"temp_c": 21})}])
    assert follow.output[0].type == "message" and follow.previous_response_id == r.id
    # The same round trip without the store: the call item sent back by the client.
    again = client.responses.create(model=server.model, tools=[WEATHER], tool_choice="none", max_output_tokens=6, store=False,
                                    temperature=0,
                                    input=[{"role": "user", "content": "Weather in Paris?"}, calls[0].model_dump(exclude_none=True),
                                           {"type": "function_call_output", "call_id": calls[0].call_id,
                                            "output": json.dumps({"temp_c": 21})}])
    assert again.output_text == follow.output_text
    # Streamed: the call arrives as its own item with its arguments.
    events = list(client.responses.create(model=server.model, input="Weather in Paris?", tools=[WEATHER],
                                          max_output_tokens=100, temperature=0, tool_choice="required", stream=True))
    done = [e for e in events if e.type == "response.function_call_arguments.done"]
    assert len(done) == 1 and done[0].name == "get_weather"
    assert events[-1].response.output[-1].type == "function_call"


def test_previous_response_id_continues_with_the_prefix_cache(client, server):
    first = client.responses.create(model=server.model, input="My name is Ada. Remember it.", max_output_tokens=8,
                                    temperature=0)
    follow = client.responses.create(model=server.model, previous_response_id=first.id, input="What is my name?",
                                     max_output_tokens=8, temperature=0)
    # The same conversation sent whole as chat messages: the same prompt.
    whole = client.chat.completions.create(model=server.model, max_tokens=8, temperature=0, messages=[
        {"role": "user", "content": "My name is Ada. Remember it."},
        {"role": "assistant", "content": first.output_text},
        {"role": "user", "content": "What is my name?"}])
    assert follow.usage.input_tokens == whole.usage.prompt_tokens
    assert follow.output_text == whole.choices[0].message.content
    # The follow-up read only its new turn: the first exchange came from the prefix cache.
    assert follow.usage.input_tokens_details.cached_tokens >= first.usage.input_tokens
    got = client.responses.retrieve(follow.id)
    assert got.id == follow.id and got.output_text == follow.output_text


def test_input_items_list_what_the_model_was_given(client, server, image_data_uri):
    # client.responses.input_items.list: this response's input after the previous response's input and output,
    # newest first (OpenAI's default), paged with limit/after, ascending with order="asc".
    first = client.responses.create(model=server.model, instructions="Be brief.", max_output_tokens=4, temperature=0,
                                    input=[{"role": "user", "content": [
                                        {"type": "input_text", "text": "My name is Ada."},
                                        {"type": "input_image", "image_url": image_data_uri, "detail": "low"}]}])
    follow = client.responses.create(model=server.model, previous_response_id=first.id, max_output_tokens=4, temperature=0,
                                     input=[{"role": "user", "content": [
                                         {"type": "input_text", "text": "Describe it."},
                                         {"type": "input_image", "image_url": image_data_uri, "detail": "low"}]}])
    items = list(client.responses.input_items.list(follow.id))
    assert [i.type for i in items] == ["message"] * 3
    assert [i.role for i in items] == ["user", "assistant", "user"]
    assert items[0].content[0].text == "Describe it." and items[0].content[1].type == "input_image"
    assert items[0].content[1].image_url is None  # only with include=message.input_image.image_url
    assert items[1].id == first.output[0].id and items[1].content[0].text == first.output_text
    assert items[2].content[0].type == "input_text" and items[2].content[0].text == "My name is Ada."
    assert len({i.id for i in items}) == 3
    asc = client.responses.input_items.list(follow.id, order="asc", limit=2)
    assert [i.id for i in asc.data] == [items[2].id, items[1].id] and asc.has_more
    rest = client.responses.input_items.list(follow.id, order="asc", limit=2, after=asc.data[-1].id)
    assert [i.id for i in rest.data] == [items[0].id] and not rest.has_more
    with_urls = client.responses.input_items.list(follow.id, include=["message.input_image.image_url"])
    assert with_urls.data[0].content[1].image_url == image_data_uri
    assert with_urls.data[2].content[1].image_url == image_data_uri  # an earlier turn's too
    # Ids stay the same between calls, and a response with store=false has none to list.
    assert [i.id for i in client.responses.input_items.list(follow.id)] == [i.id for i in items]
    with pytest.raises(openai.BadRequestError) as e:
        client.responses.input_items.list(follow.id, limit=500)
    assert "limit" in e.value.message
    with pytest.raises(openai.BadRequestError):
        client.responses.input_items.list(follow.id, after="msg_nope")
    unstored = client.responses.create(model=server.model, input="hi", max_output_tokens=2, store=False)
    with pytest.raises(openai.NotFoundError):
        client.responses.input_items.list(unstored.id)
    # client.responses.delete forgets one: it is no longer retrieved, listed or continued.
    client.responses.delete(first.id)
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(first.id)
    with pytest.raises(openai.NotFoundError):
        client.responses.create(model=server.model, previous_response_id=first.id, input="again")
    with pytest.raises(openai.NotFoundError):
        client.responses.delete(first.id)


def test_logprobs_are_included_when_asked(client, server):
    r = client.responses.create(model=server.model, input="Count.", max_output_tokens=6, temperature=0,
                                include=["message.output_text.logprobs"], top_logprobs=3)
    lps = r.output[0].content[0].logprobs
    assert len(lps) == r.usage.output_tokens
    assert all(len(t.top_logprobs) == 3 and t.top_logprobs[0].logprob >= t.logprob - 1e-6 for t in lps)
    streamed = [t for e in client.responses.create(model=server.model, input="Count.", max_output_tokens=6, temperature=0,
                                                   include=["message.output_text.logprobs"], top_logprobs=3, stream=True)
                if e.type == "response.output_text.delta" for t in (e.logprobs or [])]
    assert [t.token for t in streamed] == [t.token for t in lps]
    plain = client.responses.create(model=server.model, input="Count.", max_output_tokens=6, temperature=0)
    assert not plain.output[0].content[0].logprobs


def test_fields_that_change_nothing_are_repeated(client, server):
    r = client.responses.create(model=server.model, input="Hi", max_output_tokens=2, user="u1", service_tier="default",
                                reasoning={"effort": "low"},
                                extra_body={"safety_identifier": "s1", "prompt_cache_key": "k1"})
    got = r.model_dump()
    assert (got["user"], got["service_tier"], got["safety_identifier"], got["prompt_cache_key"]) == ("u1", "default", "s1", "k1")
    assert got["reasoning"]["effort"] == "low"
    plain = client.responses.create(model=server.model, input="Hi", max_output_tokens=2).model_dump()
    assert plain["user"] is None and plain["reasoning"]["effort"] is None


def test_unknown_or_unstored_ids_are_404(client, server):
    with pytest.raises(openai.NotFoundError) as e:
        client.responses.create(model=server.model, previous_response_id="resp_nope", input="hi")
    assert "resp_nope" in e.value.message and e.value.body["param"] == "previous_response_id"
    r = client.responses.create(model=server.model, input="hi", max_output_tokens=2, store=False)
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(r.id)
    with pytest.raises(openai.NotFoundError):
        client.responses.create(model=server.model, previous_response_id=r.id, input="again")


@pytest.mark.parametrize("body, field", [
    ({}, "input"),
    ({"input": 5}, "input"),
    ({"input": [{"role": "robot", "content": "x"}]}, "input[0].role"),
    ({"input": [{"role": "user", "content": [{"type": "input_audio"}]}]}, "input[0].content[0].type"),
    ({"input": [{"role": "user", "content": [{"type": "input_image", "file_id": "f"}]}]}, "input[0].content[0].file_id"),
    ({"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "data:image/png;base64,AAAA"}]}]},
     "input[0].content[0].image_url"),
    ({"input": "x", "tools": [{"type": "web_search"}]}, "tools[0].type"),
    ({"input": "x", "text": {"format": {"type": "json_schema", "name": "n", "schema": {"type": "string", "pattern": "a"}}}},
     "text.format.schema"),
    ({"input": "x", "max_output_tokens": 0}, "max_output_tokens"),
    ({"input": "x", "temperature": "hot"}, "temperature"),
    ({"input": "x", "include": ["file_search_call.results"]}, "include[0]"),
    ({"input": "x", "background": True}, "background"),
    ({"input": [{"type": "function_call", "call_id": "c", "name": "f"}]}, "input[0].arguments"),
])
def test_bad_requests_name_the_field(client, server, body, field):
    with pytest.raises(openai.BadRequestError) as e:
        client.responses.create(model=server.model, **body)
    assert field in e.value.message, e.value.message


def test_the_store_is_bounded_least_recently_used_first(tmp_path):
    # A store of 2 MiB; each response carries a ~550 KB image (a few tokens at detail low), so three fit and a
    # fourth evicts the least recently used.
    import base64, io, os
    from PIL import Image
    buf = io.BytesIO()
    Image.frombytes("RGB", (370, 370), os.urandom(370 * 370 * 3)).save(buf, "PNG")
    uri = "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()
    with run_server("--response-store-mb", "2") as s:
        c = openai.OpenAI(base_url=s.url + "/v1", api_key="unused", max_retries=0, timeout=scaled(120))

        def ask():
            return c.responses.create(model=s.model, max_output_tokens=1, input=[{"role": "user", "content": [
                {"type": "input_image", "image_url": uri, "detail": "low"}, {"type": "input_text", "text": "hi"}]}]).id
        a, b, _ = ask(), ask(), ask()
        c.responses.retrieve(a)  # used: now the most recent
        ask()
        with pytest.raises(openai.NotFoundError):
            c.responses.retrieve(b)
        assert c.responses.retrieve(a).id == a
