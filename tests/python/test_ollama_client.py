"""The `ollama` Python package as a real client of `qvl serve`: chat with images (streaming and not),
generate, list, show, and errors raised as ollama.ResponseError."""
import ollama
import pydantic
import pytest

from conftest import scaled


@pytest.fixture(scope="module")
def client(server):
    return ollama.Client(host=server.url, timeout=scaled(120))


def test_list_and_show(client, server):
    models = client.list().models
    assert [m.model for m in models] == [server.model]
    assert models[0].details is not None
    shown = client.show(server.model)
    assert "vision" in (shown.capabilities or [])


def test_chat_with_image(client, image_path):
    r = client.chat(model="qwen3-vl",
                    messages=[{"role": "user", "content": "What is in this picture?", "images": [image_path]}],
                    options={"num_predict": 10, "temperature": 0.7, "seed": 3})
    assert r.done and r.done_reason in ("stop", "length")
    assert r.message.role == "assistant" and r.message.content
    assert 1 <= r.eval_count <= 10
    assert r.prompt_eval_count > 64  # the image's tokens are in the prompt


def test_chat_streaming_with_image_bytes(client, image_path):
    parts = list(client.chat(
        model="qwen3-vl",
        messages=[{"role": "user", "content": "Describe it.", "images": [image_path.read_bytes()]}],
        options={"num_predict": 12, "seed": 5}, stream=True))
    assert len(parts) >= 3
    assert not any(p.done for p in parts[:-1]) and parts[-1].done
    text = "".join(p.message.content for p in parts)
    assert text
    assert parts[-1].eval_count >= 1 and parts[-1].total_duration > 0


def test_generate_streaming_and_not(client, image_b64):
    r = client.generate(model="qwen3-vl", prompt="Describe the image.", images=[image_b64],
                        options={"num_predict": 8, "seed": 11})
    assert r.done and r.response
    parts = list(client.generate(model="qwen3-vl", prompt="Describe the image.", images=[image_b64],
                                 options={"num_predict": 8, "seed": 11}, stream=True))
    assert parts[-1].done
    assert "".join(p.response for p in parts) == r.response  # same seed, same text


def test_refused_option_raises_response_error(client):
    with pytest.raises(ollama.ResponseError) as e:
        client.chat(model="qwen3-vl", messages=[{"role": "user", "content": "hi"}], think=True)
    assert e.value.status_code == 400
    with pytest.raises(ollama.ResponseError) as e:
        client.chat(model="qwen3-vl", messages=[{"role": "user", "content": "hi"}],
                    format={"type": "string", "format": "date"})
    assert e.value.status_code == 400 and "format" in str(e.value)


class Item(pydantic.BaseModel):
    name: str = pydantic.Field(max_length=6)
    count: int
    sold_out: bool


def test_structured_output_validates_with_pydantic(client):
    # Ollama's documented way: format=Model.model_json_schema(), then Model.model_validate_json.
    for seed in (1, 2):
        r = client.chat(model="qwen3-vl", messages=[{"role": "user", "content": "Describe the item as JSON."}],
                        format=Item.model_json_schema(), options={"num_predict": 200, "seed": seed, "temperature": 1})
        assert r.done_reason == "stop"
        Item.model_validate_json(r.message.content)


def test_tool_result_in_history(client):
    # A conversation with the assistant's call and the tool's result, as the ollama package writes them.
    messages = [{"role": "user", "content": "Weather in Paris?"},
                {"role": "assistant", "content": "",
                 "tool_calls": [{"function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
                {"role": "tool", "content": "21 C"}]
    tools = [{"type": "function", "function": {"name": "get_weather", "description": "The weather.",
                                               "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                                                              "required": ["city"]}}}]
    r = client.chat(model="qwen3-vl", messages=messages, tools=tools, options={"num_predict": 6, "seed": 1})
    assert r.done and isinstance(r.message.content, str)
