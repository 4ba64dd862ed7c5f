"""Writes tests/data/chat_golden.json and chat_thinking_golden.json: conversations rendered by transformers'
apply_chat_template with the Qwen3-VL Instruct template and with the Thinking models' template
(models/qwen3-vl-2b-thinking/chat_template.json).

The Thinking file holds every Instruct case without images in system or assistant messages (qvl drops those
before rendering, as the Instruct template does; the Thinking template would print them) and cases of its
own: reasoning_content given or taken from <think> blocks, the last user query after tool responses,
system messages after the first.

Run with the reference venv:
    tools/reference/.venv/bin/python tools/reference/gen_chat_goldens.py

Each case is {name, messages, tools, add_generation_prompt, add_vision_id, expected}. The messages and tools
are round-tripped through JSON before rendering, so `expected` is exactly what the template makes of the JSON
the C++ test reads. The output is deterministic: re-running gives a byte-identical file.
"""

import json
import os
import sys

import transformers
from transformers import PreTrainedTokenizerFast

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
MODEL_DIR = os.environ.get("QVL_MODEL_DIR", os.path.join(REPO, "models", "qwen3-vl-2b-instruct"))
OUT = os.path.join(REPO, "tests", "data", "chat_golden.json")
THINKING_DIR = os.path.join(REPO, "models", "qwen3-vl-2b-thinking")
OUT_THINKING = os.path.join(REPO, "tests", "data", "chat_thinking_golden.json")

# --- Building blocks -------------------------------------------------------------------------------------

IMG = {"type": "image", "image": "file://cat.jpg"}
IMG_URL = {"type": "image_url", "image_url": {"url": "https://example.com/dog.png"}}
IMG_BARE = {"image": "data:image/png;base64,iVBORw0KGgo="}  # no "type": the "image" key decides
IMG_TYPE_ONLY = {"type": "image"}  # no payload: the type decides
VID = {"type": "video", "video": "file://clip.mp4"}
VID_FRAMES = {"video": ["f1.jpg", "f2.jpg", "f3.jpg"]}  # no "type"
VID_TYPE_ONLY = {"type": "video"}


def text(s):
    return {"type": "text", "text": s}


def sys_msg(content):
    return {"role": "system", "content": content}


def user(content):
    return {"role": "user", "content": content}


def asst(content, tool_calls=None, omit_content=False):
    m = {"role": "assistant"}
    if not omit_content:
        m["content"] = content
    if tool_calls is not None:
        m["tool_calls"] = tool_calls
    return m


def tool(content, name=None):
    m = {"role": "tool", "content": content}
    if name is not None:
        m["name"] = name
    return m


def call_wrapped(name, arguments, call_id="call_0"):
    """OpenAI style: {"id", "type": "function", "function": {"name", "arguments"}}."""
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def call_flat(name, arguments):
    """Without the "function" wrapper."""
    return {"name": name, "arguments": arguments}


WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "description": "City name, e.g. 北京 or Zürich"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"], "default": "celsius"},
            },
            "required": ["city"],
        },
    },
}

SEARCH_TOOL = {
    "type": "function",
    "function": {
        "name": "search",
        "description": "Search the web. Use \"quotes\" for exact phrases; backslash \\ is literal.\nTwo lines.",
        "parameters": {
            "type": "object",
            "properties": {
                "query": {"type": "string", "minLength": 1, "maxLength": 512},
                "top_k": {"type": "integer", "minimum": 1, "maximum": 50, "default": 5},
                "temperature": {"type": "number", "minimum": 0.0, "maximum": 2.0, "default": 0.5},
                "epsilon": {"type": "number", "default": 1e-05},
                "big": {"type": "number", "default": 1e20},
                "filters": {
                    "type": "object",
                    "properties": {
                        "site": {"type": ["string", "null"]},
                        "safe": {"type": "boolean", "default": True},
                        "date_range": {
                            "type": "array",
                            "items": {"type": "string", "format": "date"},
                            "minItems": 2,
                            "maxItems": 2,
                        },
                    },
                    "additionalProperties": False,
                },
            },
            "required": ["query"],
        },
    },
}

NUMBERS_TOOL = {
    "type": "function",
    "function": {
        "name": "numbers",
        "description": "Odd numbers and strings for tojson: emoji 🦙, tab\tend, bell\x07, nul\x00, del\x7f, "
        "line sep\u2028para sep\u2029, </tools> and <|im_end|> inside.",
        "parameters": {
            "type": "object",
            "properties": {},
            "examples": [
                1.0, 0.5, 1e-05, 1e20, 1e16, 9999999999999998.0, 1e-4, 0.0001234, 123456.789, 0.1 + 0.2,
                -0.0, 0.0, -2.5e-310, 1.7976931348623157e308, 5e-324, 100.0, 1e22, 12345678901234567,
                -9223372036854775808, 18446744073709551615, 0, -1, True, False, None, [], {}, [[], [{}]],
                "", "\\", "\"", "/", "\b\f\n\r\t", "\x1f\x1b",
            ],
        },
    },
}

# A flat schema (no {"type": "function"} wrapper): the template does not care.
FLAT_TOOL = {
    "name": "calculator",
    "description": "计算数学表达式 ✓",
    "parameters": {"type": "object", "properties": {"expr": {"type": "string"}}, "required": ["expr"]},
}


# --- The cases -------------------------------------------------------------------------------------------


def cases():
    c = []

    def add(name, messages, tools=None, add_generation_prompt=True, add_vision_id=False):
        c.append((name, messages, tools, add_generation_prompt, add_vision_id))

    # Plain text.
    add("user_string", [user("Hello!")])
    add("user_string_no_gen", [user("Hello!")], add_generation_prompt=False)
    add("system_user_string", [sys_msg("You are a helpful assistant."), user("Hi")])
    add("system_only", [sys_msg("Only a system prompt.")])
    add("system_only_no_gen", [sys_msg("Only a system prompt.")], add_generation_prompt=False)
    add("multi_turn", [sys_msg("Be brief."), user("2+2?"), asst("4"), user("3+3?"), asst("6"), user("thanks")])
    add("multi_turn_ends_assistant", [user("Hi"), asst("Hello, how can I help?")], add_generation_prompt=False)
    add("empty_user_string", [user("")])
    add("empty_system_string", [sys_msg(""), user("x")])
    add("empty_assistant_string", [user("a"), asst(""), user("b")])
    add("unicode_text", [user("你好，世界！🌍👋🏽 Grüße — ça va?\nLine two\n\n\tindented"), asst("我很好 😊")])
    add("special_tokens_in_text", [user("literal <|im_start|>assistant\nand <|im_end|> and <|vision_start|><|image_pad|>")])
    add("whitespace_text", [sys_msg("  leading and trailing  \n"), user("\n\n"), asst(" ")])
    add("template_like_text", [user("{{ not jinja }} {% if x %} {# c #}")])

    # List content with images and videos.
    add("user_text_part", [user([text("Describe this.")])])
    add("user_image_then_text", [user([IMG, text("What is in the image?")])])
    add("user_text_then_image", [user([text("Look: "), IMG])])
    add("user_image_url", [user([IMG_URL, text("And this?")])])
    add("user_image_bare_key", [user([IMG_BARE, text("bare image key")])])
    add("user_image_type_only", [user([IMG_TYPE_ONLY, text("type only")])])
    add("user_two_images", [user([IMG, IMG_URL, text("Compare them.")])])
    add("user_two_images_vision_id", [user([IMG, IMG_URL, text("Compare them.")])], add_vision_id=True)
    add("user_video", [user([VID, text("What happens?")])])
    add("user_video_frames", [user([VID_FRAMES, text("frames")])])
    add("user_video_type_only_vision_id", [user([VID_TYPE_ONLY, text("t")])], add_vision_id=True)
    add("user_mixed_vision_id", [user([IMG, VID, IMG_URL, VID_FRAMES, text("all of them")])], add_vision_id=True)
    add("user_mixed_no_vision_id", [user([IMG, VID, IMG_URL, VID_FRAMES, text("all of them")])])
    add(
        "images_across_turns_vision_id",
        [
            sys_msg("You see pictures."),
            user([IMG, text("first")]),
            asst("A cat."),
            user([text("second "), IMG_URL, text(" and a video "), VID]),
            asst("A dog and a clip."),
            user([IMG_BARE, VID_FRAMES]),
        ],
        add_vision_id=True,
    )
    add(
        "images_across_turns_no_vision_id",
        [user([IMG, text("first")]), asst("A cat."), user([IMG_URL, text("second")])],
    )
    add("user_empty_list", [user([])])
    add("user_text_part_empty", [user([text("")])])
    add("user_multiple_text_parts", [user([text("a"), text("b\n"), text("c")])])
    # Parts that are neither an image (by the template's test) nor text render nothing.
    add("user_image_url_type_without_key", [user([{"type": "image_url"}, text("x")])])
    add("user_text_type_without_text", [user([{"type": "text"}, text("y")])])
    add("user_unknown_part", [user([{"type": "audio", "audio": "a.wav"}, text("z")])])
    # An image part that also carries text: the image branch wins for user messages.
    add("user_image_part_with_text", [user([{"type": "image", "image": "a.jpg", "text": "caption"}, text("q")])])
    add("user_video_part_with_text", [user([{"type": "video", "video": "v.mp4", "text": "caption"}])], add_vision_id=True)

    # System message with list content: only the text of each part is rendered, images are not counted.
    add("system_list_content", [sys_msg([text("You are "), text("a vision model.")]), user("hi")])
    add(
        "system_list_with_image",
        [sys_msg([text("sys"), IMG, {"type": "image", "text": "img-text"}]), user([IMG, text("u")])],
        add_vision_id=True,
    )
    add("system_empty_list", [sys_msg([]), user("hi")])
    # A system message anywhere but first is skipped.
    add("system_not_first", [user("hi"), sys_msg("late system"), asst("ok"), user("again")])
    add("two_systems", [sys_msg("first system"), sys_msg("second system"), user("hi")])
    add("system_not_first_with_tools", [user("hi"), sys_msg("late")], tools=[WEATHER_TOOL])
    # Roles the template does not know are skipped.
    add("unknown_roles", [user("a"), {"role": "developer", "content": "dev"}, {"role": "function", "content": "f"}, user("b")])
    add("tools_user_empty_string_no_gen", [user("")], tools=[FLAT_TOOL], add_generation_prompt=False)

    # Assistant content as a list: only text is rendered, images are dropped and not counted.
    add("assistant_list_content", [user("hi"), asst([text("part one, "), text("part two")])])
    add(
        "assistant_list_with_image",
        [user([IMG]), asst([IMG, text("I drew this"), {"type": "image", "text": "t"}]), user([IMG_URL])],
        add_vision_id=True,
    )

    # Tools.
    add("tools_no_system", [user("Weather in Paris?")], tools=[WEATHER_TOOL])
    add("tools_with_system", [sys_msg("You are a tool user."), user("Weather in Paris?")], tools=[WEATHER_TOOL])
    add(
        "tools_with_system_list",
        [sys_msg([text("List "), IMG, text("system")]), user("x")],
        tools=[WEATHER_TOOL, FLAT_TOOL],
    )
    add("tools_with_empty_system", [sys_msg(""), user("x")], tools=[WEATHER_TOOL])
    add("tools_several", [user("Find and compute.")], tools=[WEATHER_TOOL, SEARCH_TOOL, NUMBERS_TOOL, FLAT_TOOL])
    add("tools_no_gen", [user("q")], tools=[SEARCH_TOOL], add_generation_prompt=False)
    add("tools_empty_list", [sys_msg("sys"), user("q")], tools=[])

    # Assistant tool calls.
    add(
        "tool_call_dict_args_wrapped",
        [
            user("Weather in Paris?"),
            asst("", [call_wrapped("get_weather", {"city": "Paris", "unit": "celsius"})]),
            tool("{\"temperature\": 21}"),
            asst("It is 21 °C in Paris."),
        ],
        tools=[WEATHER_TOOL],
    )
    add(
        "tool_call_string_args_wrapped",
        [user("Weather?"), asst(None, [call_wrapped("get_weather", "{\"city\": \"Paris\"}")], omit_content=True)],
        tools=[WEATHER_TOOL],
        add_generation_prompt=False,
    )
    add(
        "tool_call_flat_dict_args",
        [user("calc"), asst(None, [call_flat("calculator", {"expr": "1+1"})], omit_content=True), tool("2")],
        tools=[FLAT_TOOL],
    )
    add(
        "tool_call_flat_string_args",
        [user("calc"), asst("", [call_flat("calculator", "{'expr': not json at all}")])],
    )
    add(
        "tool_call_with_content",
        [user("Weather?"), asst("Let me check.", [call_wrapped("get_weather", {"city": "東京"})])],
        tools=[WEATHER_TOOL],
    )
    add(
        "tool_calls_multiple_with_content",
        [
            user("Weather in two cities?"),
            asst(
                "Checking both.",
                [
                    call_wrapped("get_weather", {"city": "Paris"}, "call_1"),
                    call_flat("get_weather", "{\"city\": \"Berlin\"}"),
                    call_wrapped("search", {"query": "weather", "top_k": 3, "temperature": 0.5}, "call_3"),
                ],
            ),
            tool("sunny"),
            tool("rainy"),
            tool([text("search results: "), text("none")]),
            asst("Paris is sunny, Berlin rainy."),
        ],
        tools=[WEATHER_TOOL, SEARCH_TOOL],
    )
    add(
        "tool_calls_multiple_no_content",
        [user("go"), asst("", [call_flat("a", {}), call_flat("b", []), call_flat("c", {"x": None})])],
    )
    add(
        "tool_call_args_odd_values",
        [
            user("odd"),
            asst(
                None,
                [
                    call_flat(
                        "odd",
                        {
                            "f": 1.0, "g": 1e-05, "h": 1e20, "i": -0.0, "j": 0.30000000000000004, "k": 12345678901234567,
                            "s": "quote\" backslash\\ newline\n tab\t ctrl\x01 del\x7f ls\u2028 ps\u2029 é 中 🎉",
                            "n": None, "t": True, "list": [1, 2.5, "x", [], {}], "nested": {"a": {"b": {"c": [0.1]}}},
                        },
                    ),
                    call_flat("list_args", [1, "two", 3.0]),
                    call_flat("null_args", None),
                    call_flat("number_args", 42),
                    call_flat("float_args", 2.5e-7),
                    call_flat("bool_args", False),
                ],
                omit_content=True,
            ),
        ],
        add_generation_prompt=False,
    )
    add(
        "tool_call_list_content_truthy",
        # A non-empty list is truthy even when it renders no text: the first call gets its newline.
        [user("x"), asst([{"type": "text"}], [call_flat("f", {"a": 1})])],
    )
    add(
        "tool_call_list_content_empty",
        [user("x"), asst([], [call_flat("f", {"a": 1})])],
    )
    add(
        "tool_call_list_content_text",
        [user("x"), asst([text("thinking...")], [call_flat("f", "{}"), call_flat("g", "{}")])],
    )
    add(
        "tool_call_function_empty_dict",
        # `{%- if tool_call.function %}` is false for {}: name and arguments are read from the call itself.
        [user("x"), asst("", [{"function": {}, "name": "outer", "arguments": {"k": "v"}}])],
    )
    add(
        "tool_calls_empty_list",
        [user("x"), asst("no calls", [])],
    )
    add(
        "tool_call_string_args_unicode",
        [user("x"), asst("", [call_wrapped("search", "{\"query\": \"天气 ☀️\", \"top_k\": 1e-05}")])],
        tools=[SEARCH_TOOL],
    )

    # Tool responses.
    add("tool_first_message", [tool("orphan response"), user("hi")])
    add("tool_last_message", [user("x"), asst("", [call_flat("f", {})]), tool("result")], add_generation_prompt=False)
    add("tool_empty_string", [user("x"), asst("", [call_flat("f", {})]), tool("")])
    add("tool_empty_list", [user("x"), asst("", [call_flat("f", {})]), tool([])])
    add(
        "tools_consecutive_three",
        [user("x"), asst("", [call_flat("f", {}), call_flat("g", {}), call_flat("h", {})]), tool("1"), tool("2"), tool("3")],
    )
    add(
        "tool_separated_by_skipped_system",
        # The neighbour test reads the raw message list, so a skipped message between tool messages splits them.
        [user("x"), asst("", [call_flat("f", {})]), tool("1"), sys_msg("hidden"), tool("2")],
    )
    add(
        "tool_image_content_vision_id",
        [
            user([IMG, text("Crop this.")]),
            asst("", [call_flat("crop", {"box": [0, 0, 10, 10]})]),
            tool([text("cropped: "), IMG_URL]),
            tool([VID, text("and a clip")]),
            user([IMG_BARE, text("now this")]),
        ],
        tools=[FLAT_TOOL],
        add_vision_id=True,
    )
    add(
        "tool_image_content_no_vision_id",
        [user("x"), asst("", [call_flat("screenshot", {})]), tool([IMG]), user([IMG_URL])],
    )
    add(
        "tool_with_name_field",
        [user("x"), asst("", [call_wrapped("get_weather", {"city": "Oslo"})]), tool("-3", name="get_weather")],
        tools=[WEATHER_TOOL],
    )

    # A long agentic conversation with everything.
    add(
        "agentic_full",
        [
            sys_msg([text("You are an agent. "), text("Think step by step.")]),
            user([text("Here are two photos: "), IMG, IMG_URL, text(" and a video "), VID]),
            asst("I will analyse them.", [call_wrapped("search", {"query": "cat breeds", "filters": {"safe": True, "site": None}})]),
            tool([text("results"), IMG_BARE]),
            asst([text("Found it.")], [call_flat("get_weather", "{\"city\": \"Paris\"}")]),
            tool("sunny, 25°C"),
            asst("Done: it's a Maine Coon; Paris is sunny."),
            user([VID_FRAMES, text("one more 🎬")]),
        ],
        tools=[WEATHER_TOOL, SEARCH_TOOL],
        add_vision_id=True,
    )
    add(
        "agentic_full_no_vision_id_no_gen",
        [
            sys_msg("sys"),
            user([IMG, text("a")]),
            asst("", [call_flat("f", {"x": 1})]),
            tool([IMG]),
            asst("ok"),
        ],
        tools=[FLAT_TOOL],
        add_generation_prompt=False,
    )
    add("vision_id_with_string_content_only", [user("no images here")], add_vision_id=True)
    add("many_images_vision_id", [user([IMG] * 11 + [text("eleven")])], add_vision_id=True)
    return c


def vision_outside_user_and_tool(messages):
    for m in messages:
        if m["role"] in ("user", "tool") or not isinstance(m.get("content"), list):
            continue
        for part in m["content"]:
            if isinstance(part, dict) and ("image" in part or "image_url" in part or "video" in part
                                           or part.get("type") in ("image", "video")):
                return True
    return False


def asst_r(content, reasoning, tool_calls=None):
    m = asst(content, tool_calls)
    m["reasoning_content"] = reasoning
    return m


def thinking_cases():
    c = [x for x in cases() if not vision_outside_user_and_tool(x[1])]

    def add(name, messages, tools=None, add_generation_prompt=True, add_vision_id=False):
        c.append((name, messages, tools, add_generation_prompt, add_vision_id))

    add("think_reasoning_field_last", [user("2+2?"), asst_r("4", "Two and two make four.")], add_generation_prompt=False)
    add("think_reasoning_field_then_query", [user("2+2?"), asst_r("4", "Two and two."), user("And 3+3?")])
    add("think_block_in_content_history", [user("q1"), asst("<think>\nfirst thought\n</think>\n\nanswer one"),
                                            user([IMG, text("q2")])])
    add("think_block_in_content_last", [user("q1"), asst("<think>\nthought\n</think>\n\nanswer")],
        add_generation_prompt=False)
    add("think_block_without_open_tag", [user("q"), asst("just thinking</think>\n\nthe answer")],
        add_generation_prompt=False)
    add("think_several_close_tags", [user("q"), asst("a<think>b\n</think>c</think>\nd")], add_generation_prompt=False)
    add("think_newlines_around", [user("q"), asst_r("\n\nans\n", "\n\nr\n\n")], add_generation_prompt=False)
    add("think_reasoning_not_a_string", [user("q"), asst_r("<think>x</think>y", None)], add_generation_prompt=False)
    add("think_empty_reasoning_after_query_not_last",
        [user("q"), asst("", [call_flat("get_weather", {"city": "Oslo"})]), tool("cold"), asst("It is cold.")],
        tools=[WEATHER_TOOL])
    add("think_tool_loop_with_reasoning",
        [sys_msg("Be brief."), user([IMG, text("Weather where this was taken?")]),
         asst_r("", "The photo shows Oslo.", [call_wrapped("get_weather", {"city": "Oslo"})]),
         tool("cold, -3°C"), asst_r("It is -3°C in Oslo.", "The tool says -3.")],
        tools=[WEATHER_TOOL], add_generation_prompt=False)
    add("think_user_message_that_is_a_tool_response",
        [user("q"), asst_r("calling", "need data"), user("<tool_response>\n42\n</tool_response>"),
         asst_r("It is 42.", "got it")], add_generation_prompt=False)
    add("think_user_parts_tool_response",
        [user("q"), asst("a"), user([text("<tool_response>"), text("x</tool_response>")]), asst_r("b", "r")])
    add("think_system_not_first", [user("hi"), sys_msg("Now answer in French."), asst_r("Bonjour", "French"),
                                   sys_msg([text("Shorter.")]), user("again")])
    add("think_no_gen_prompt_after_user", [user("hello")], add_generation_prompt=False)
    add("think_vision_ids", [user([IMG, text("a")]), asst_r("x", "y"), user([IMG, IMG_URL, text("b")])],
        add_vision_id=True)
    return c


def render_all(model_dir, case_list, out_path):
    template = json.load(open(os.path.join(model_dir, "chat_template.json"), encoding="utf-8"))["chat_template"]
    tokenizer = PreTrainedTokenizerFast(tokenizer_file=os.path.join(MODEL_DIR, "tokenizer.json"))
    out = []
    names = set()
    for name, messages, tools, add_generation_prompt, add_vision_id in case_list:
        assert name not in names, name
        names.add(name)
        # Render exactly what the C++ test will read back.
        messages = json.loads(json.dumps(messages, ensure_ascii=False))
        tools = json.loads(json.dumps(tools, ensure_ascii=False)) if tools is not None else None
        expected = tokenizer.apply_chat_template(
            messages,
            tools=tools,
            chat_template=template,
            add_generation_prompt=add_generation_prompt,
            add_vision_id=add_vision_id,
            tokenize=False,
        )
        out.append(
            {
                "name": name,
                "messages": messages,
                "tools": tools,
                "add_generation_prompt": add_generation_prompt,
                "add_vision_id": add_vision_id,
                "expected": expected,
            }
        )
    os.makedirs(os.path.dirname(out_path), exist_ok=True)
    with open(out_path, "w", encoding="utf-8", newline="\n") as f:
        json.dump(out, f, ensure_ascii=False, indent=1, sort_keys=False)
        f.write("\n")
    print(f"wrote {len(out)} cases to {out_path} (transformers {transformers.__version__})", file=sys.stderr)


def main():
    render_all(MODEL_DIR, cases(), OUT)
    render_all(THINKING_DIR, thinking_cases(), OUT_THINKING)


if __name__ == "__main__":
    main()
