"""The web page in headless Chromium (Debian's chromium and chromium-driver, driven by Selenium): load, wait
for ready, attach images (file input, drag and drop, paste), ask, watch the answer stream in, stop it, check
the screenshot; the Markdown renderer never lets model output become markup; errors and a phone-sized screen."""
import base64
import io
import os
import shutil
import threading
import time

import openai
import pytest
from PIL import Image, ImageChops
from selenium import webdriver
from selenium.common.exceptions import StaleElementReferenceException, TimeoutException
from selenium.webdriver.chrome.options import Options
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import Select, WebDriverWait

from conftest import IMAGES, get_json, run_server, scaled

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMEDRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"


def _need_browser():
    missing = [p for p in (CHROMIUM, CHROMEDRIVER) if not os.path.exists(p)]
    if missing:
        message = f"no {', '.join(missing)}: install Debian's chromium and chromium-driver (scripts/setup does)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)


@pytest.fixture(scope="module")
def driver():
    _need_browser()
    os.environ.setdefault("SE_OFFLINE", "true")  # Selenium Manager must never try to download a browser or driver
    opts = Options()
    opts.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu", "--window-size=1000,800",
                "--force-device-scale-factor=1", "--hide-scrollbars", "--no-first-run", "--disable-extensions",
                "--force-prefers-reduced-motion", "--lang=en-US"):
        opts.add_argument(arg)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    d = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=opts)
    d.set_script_timeout(scaled(30))
    yield d
    d.quit()


def wait(d, what, timeout=30, message=""):
    """Polls `what` until it is truthy, for `timeout` seconds at Release speed (scaled here). An element the page
    redrew between finding it and reading it (stale) is asked again at the next poll."""
    return WebDriverWait(d, scaled(timeout), poll_frequency=0.05,
                         ignored_exceptions=(StaleElementReferenceException,)).until(lambda _: what(), message)


def open_page(d, url, keep_conversations=False):
    """Opens the page and waits for the model; without keep_conversations, the conversations an earlier test
    left in this browser are deleted first (the page shows the latest one again on load)."""
    d.get(url)
    if not keep_conversations:
        d.set_script_timeout(scaled(30))
        left = d.execute_async_script("""
          const done = arguments[arguments.length - 1];
          qvl.conversationsLoaded.then(async () => {
            for (const c of qvl.Conversations.list()) await qvl.Conversations.remove(c.id);
            done(qvl.Conversations.list().length);
          });""")
        assert left == 0
        d.get(url)
    wait(d, lambda: "ready" in d.find_element(By.ID, "status").get_attribute("class"), message="status never ready")
    wait(d, lambda: d.execute_script("return qvl.state !== undefined"))
    wait(d, lambda: d.find_element(By.ID, "send").is_enabled(), message="Send never enabled")


def show_settings(d):
    if not d.find_element(By.ID, "settings").is_displayed():
        d.find_element(By.ID, "settings-toggle").click()


def set_value(d, element_id, value):
    show_settings(d)
    el = d.find_element(By.ID, element_id)
    el.clear()
    el.send_keys(str(value))


def last_answer(d):
    return d.find_elements(By.CSS_SELECTOR, ".msg.assistant")[-1]


def state_of(msg):
    return msg.get_attribute("data-state")


def answer_in(d, state):
    """The last answer if it is in `state`, else None (for waits)."""
    answers = d.find_elements(By.CSS_SELECTOR, ".msg.assistant")
    return answers[-1] if answers and state_of(answers[-1]) == state else None


def attachment_count(d):
    return len(d.find_elements(By.CSS_SELECTOR, "#attachments .thumb"))


def png_b64(color=(200, 40, 40), size=(48, 32)) -> str:
    buf = io.BytesIO()
    Image.new("RGB", size, color).save(buf, "PNG")
    return base64.b64encode(buf.getvalue()).decode()


def severe_console_errors(d):
    return [e for e in d.get_log("browser") if e["level"] == "SEVERE" and "favicon" not in e["message"]]


# ---------------------------------------------------------------------------------------------------------------

def test_page_loads_and_becomes_ready(driver, server):
    open_page(driver, server.url)
    assert server.model in driver.find_element(By.ID, "status").text
    assert driver.find_element(By.ID, "banner").is_displayed() is False
    assert driver.execute_script("return typeof window.qvl.renderMarkdown") == "function"
    assert severe_console_errors(driver) == []  # the page's own CSP lets its scripts and styles load


def test_attach_ask_stream_and_stop(driver, server, output_dir):
    open_page(driver, server.url)
    show_settings(driver)
    Select(driver.find_element(By.ID, "resolution")).select_by_value("262144")  # low: 1024x768 gets scaled down
    set_value(driver, "max-tokens", 3000)  # long enough to still be streaming when Stop is pressed
    driver.find_element(By.ID, "file-input").send_keys(str(IMAGES / "jpeg_1024x768.jpg"))
    wait(driver, lambda: attachment_count(driver) == 1)
    wait(driver, lambda: driver.execute_script("return qvl.state.attachments[0].width") == 1024,
         message="the attachment's size never known")
    thumb = driver.find_element(By.CSS_SELECTOR, "#attachments .thumb img")
    assert driver.execute_script("return arguments[0].naturalWidth", thumb) == 1024
    driver.find_element(By.ID, "prompt").send_keys("What is in this picture? Describe it in detail.")
    driver.find_element(By.ID, "send").click()

    answer = wait(driver, lambda: answer_in(driver, "streaming"),
                  message="the answer never started streaming")
    content = answer.find_element(By.CSS_SELECTOR, ".content")
    # Streamed: the visible text grows over several observations while the request runs.
    seen = []
    deadline = time.monotonic() + scaled(60)
    while len(seen) < 3 and time.monotonic() < deadline and state_of(answer) == "streaming":
        text = content.text
        if text and "Waiting" not in text and "Reading" not in text and (not seen or len(text) > len(seen[-1])):
            seen.append(text)
        time.sleep(0.05)
    assert len(seen) >= 3, f"the answer did not grow while streaming: {seen}, state {state_of(answer)}"
    assert state_of(answer) == "streaming", "the answer finished before Stop could be pressed"
    assert driver.find_element(By.ID, "stop").is_displayed()
    driver.find_element(By.ID, "stop").click()
    wait(driver, lambda: state_of(answer) == "stopped", message="Stop did not stop the answer")
    assert driver.find_element(By.ID, "send").is_displayed()
    stats = answer.find_element(By.CSS_SELECTOR, ".stats").text
    assert "stopped" in stats and "first token" in stats and "tokens/s" in stats, stats
    # The server cancelled the generation: its slot is free again.
    wait(driver, lambda: get_json(server.url + "/health")[1]["slots"]["busy"] == 0, timeout=10,
         message="the stopped request still holds the server's slot")
    # The image went up scaled to the low setting (at most 262144 pixels), as a JPEG data: URI.
    sent = driver.execute_script("return qvl.state.history[0].content")
    assert sent[0]["type"] == "image_url" and sent[0]["image_url"]["url"].startswith("data:image/jpeg;base64,")
    shrunk = Image.open(io.BytesIO(base64.b64decode(sent[0]["image_url"]["url"].split(",", 1)[1])))
    assert shrunk.width * shrunk.height <= 262144 and shrunk.width == 591, shrunk.size
    assert sent[1] == {"type": "text", "text": "What is in this picture? Describe it in detail."}
    assert driver.execute_script("return qvl.state.history[1].role") == "assistant"

    # A second turn: multi-turn history goes with it; the stats come from the server's timings.
    set_value(driver, "max-tokens", 12)
    driver.find_element(By.ID, "prompt").send_keys("And what colours are there?")
    driver.find_element(By.ID, "prompt").send_keys("\n")  # Enter sends
    wait(driver, lambda: len(driver.find_elements(By.CSS_SELECTOR, ".msg.assistant")) == 2)
    second = last_answer(driver)
    wait(driver, lambda: state_of(second) == "done", timeout=60, message="the second answer never finished")
    stats = second.find_element(By.CSS_SELECTOR, ".stats")
    assert "first token" in stats.text and "tokens/s" in stats.text and "12 tokens" in stats.text, stats.text
    assert float(stats.get_attribute("data-ttft-ms")) > 0
    assert float(stats.get_attribute("data-tokens-per-second")) > 0
    assert driver.execute_script("return qvl.state.history.length") == 4

    # The screenshot: the answer is there as pixels, not only in the DOM.
    driver.find_element(By.ID, "settings-toggle").click()
    assert not driver.find_element(By.ID, "settings").is_displayed()
    driver.execute_script("document.getElementById('messages').scrollTop = 0")
    path = output_dir / "chat.png"
    driver.save_screenshot(str(path))
    shot = Image.open(path).convert("RGB")
    assert answer.text.strip()
    rect = driver.execute_script(
        "const r = arguments[0].querySelector('.content').getBoundingClientRect();"
        "return [r.left, r.top, r.right, r.bottom, window.devicePixelRatio]", answer)
    left, top, right, bottom, dpr = rect
    box = shot.crop((int(left * dpr), int(top * dpr), int(right * dpr), int(bottom * dpr)))
    assert box.width > 50 and box.height > 10, rect
    background = shot.getpixel((shot.width - 5, shot.height // 2))
    difference = ImageChops.difference(box, Image.new("RGB", box.size, background)).convert("L")
    ink = sum(difference.histogram()[40:])  # pixels clearly unlike the page's background
    assert ink > 0.01 * box.width * box.height, f"the answer area looks empty ({ink} pixels of ink)"


def test_drag_and_drop_and_paste_attach_images(driver, server):
    open_page(driver, server.url)
    driver.execute_script("document.getElementById('new-chat').click()")
    before = attachment_count(driver)
    make_file = ("const bytes = Uint8Array.from(atob(arguments[0]), c => c.charCodeAt(0));"
                 "const dt = new DataTransfer(); dt.items.add(new File([bytes], arguments[1], {type: 'image/png'}));")
    driver.execute_script(make_file + "document.getElementById('messages').dispatchEvent("
                          "new DragEvent('drop', {dataTransfer: dt, bubbles: true, cancelable: true}));",
                          png_b64(), "dropped.png")
    wait(driver, lambda: attachment_count(driver) == before + 1, message="a dropped image was not attached")
    driver.execute_script(make_file + "document.getElementById('prompt').dispatchEvent("
                          "new ClipboardEvent('paste', {clipboardData: dt, bubbles: true, cancelable: true}));",
                          png_b64((30, 90, 200)), "pasted.png")
    wait(driver, lambda: attachment_count(driver) == before + 2, message="a pasted image was not attached")
    names = driver.execute_script("return qvl.state.attachments.map(a => a.name)")
    assert names[-2:] == ["dropped.png", "pasted.png"]
    # A non-image file is refused with a notice, not attached.
    driver.execute_script("const dt = new DataTransfer(); dt.items.add(new File(['hello'], 'notes.txt', {type: 'text/plain'}));"
                          "document.body.dispatchEvent(new DragEvent('drop', {dataTransfer: dt, bubbles: true, cancelable: true}));")
    wait(driver, lambda: "not an image" in driver.find_element(By.ID, "banner").text)
    assert attachment_count(driver) == before + 2
    # Thumbnails can be removed.
    while attachment_count(driver):
        driver.find_element(By.CSS_SELECTOR, "#attachments .thumb .remove").click()
    assert not driver.find_element(By.ID, "attachments").is_displayed()


def test_attach_a_video_shows_its_poster_and_sends_a_video_url(driver, server):
    open_page(driver, server.url)
    driver.execute_script("document.getElementById('new-chat').click()")
    show_settings(driver)
    set_value(driver, "max-tokens", 6)
    clip = IMAGES.parent / "videos" / "vp9_25fps_70x50.webm"
    driver.find_element(By.ID, "file-input").send_keys(str(clip))
    wait(driver, lambda: attachment_count(driver) == 1)
    # The poster frame, drawn by the browser's own decoder, is the thumbnail.
    wait(driver, lambda: driver.execute_script("return qvl.state.attachments[0].poster !== null"),
         message="no poster frame for the video")
    assert driver.execute_script("return qvl.state.attachments[0].kind") == "video"
    thumb = driver.find_element(By.CSS_SELECTOR, "#attachments .thumb.video img")
    wait(driver, lambda: driver.execute_script("return arguments[0].naturalWidth", thumb) == 70)
    driver.find_element(By.ID, "prompt").send_keys("What happens in this clip?\n")
    wait(driver, lambda: len(driver.find_elements(By.CSS_SELECTOR, ".msg.assistant")) >= 1)
    answer = last_answer(driver)
    wait(driver, lambda: state_of(answer) == "done", timeout=60, message="the answer about the video never finished")
    stats = answer.find_element(By.CSS_SELECTOR, ".stats").text
    assert "video tokens" in stats and "video frames" in stats, stats
    sent = driver.execute_script("return qvl.state.history[0].content")
    assert sent[0]["type"] == "video_url" and sent[0]["video_url"]["url"].startswith("data:video/webm;base64,")
    assert base64.b64decode(sent[0]["video_url"]["url"].split(",", 1)[1]) == clip.read_bytes()
    # The question shows the clip itself, playable, with its poster.
    video = driver.find_element(By.CSS_SELECTOR, ".msg.user .images video")
    assert video.get_attribute("poster").startswith("data:image/jpeg")
    assert severe_console_errors(driver) == []  # media-src lets the page play the blob


RENDER_INTO_DOM = """
const div = document.createElement('div');
div.innerHTML = qvl.renderMarkdown(arguments[0]);
document.body.append(div);
const bad = div.querySelectorAll('script, img, iframe, object, embed, svg, math, style, link, form, input');
const handlers = [...div.querySelectorAll('*')].flatMap(e => [...e.attributes].map(a => a.name))
    .filter(n => n.startsWith('on') || n === 'style' || n === 'src');
const links = [...div.querySelectorAll('a')].map(a => a.getAttribute('href'));
const out = {html: div.innerHTML, text: div.textContent, bad: bad.length, handlers, links,
             tags: [...div.querySelectorAll('*')].map(e => e.tagName.toLowerCase())};
div.remove();
return out;
"""


@pytest.mark.parametrize("payload, literal", [
    ("<script>window.__pwned = 1</script>", "<script>window.__pwned = 1</script>"),
    ('<img src=x onerror="window.__pwned = 1">', '<img src=x onerror="window.__pwned = 1">'),
    ("**<svg onload=window.__pwned=1>**", "<svg onload=window.__pwned=1>"),
    ("```html\n<script>window.__pwned = 1</script>\n```", "<script>window.__pwned = 1</script>"),
    ("| a | b |\n|---|---|\n| <iframe src=javascript:1> | `<b>` |", "<iframe src=javascript:1>"),
    ('[click](javascript:window.__pwned=1)', "[click](javascript:window.__pwned=1)"),
    ('[x](https://e.com/"onmouseover="window.__pwned=1)', "x"),
    ("- item <style>body{display:none}</style>\n- `</code><script>1</script>`", "<style>body{display:none}</style>"),
])
def test_model_output_cannot_inject_markup(driver, server, payload, literal):
    if not driver.current_url.startswith(server.url):
        open_page(driver, server.url)
    r = driver.execute_script(RENDER_INTO_DOM, payload)
    assert r["bad"] == 0 and r["handlers"] == [], r
    assert all(h.startswith(("https://", "http://", "mailto:")) for h in r["links"]), r
    assert literal in r["text"], r
    time.sleep(scaled(0.05))
    assert driver.execute_script("return window.__pwned") is None


def test_markdown_formatting(driver, server):
    if not driver.current_url.startswith(server.url):
        open_page(driver, server.url)
    source = ("# Title\n\nSome **bold**, *italic*, `code` and [a link](https://example.com).\n\n"
              "- one\n- two\n  - nested\n\n1. first\n2. second\n\n"
              "| left | right |\n|:-----|------:|\n| a | 1 |\n| b | 2 |\n\n"
              "```python\nprint('<hi>')\n```\n\n> quoted\n")
    r = driver.execute_script(RENDER_INTO_DOM, source)
    tags = r["tags"]
    for tag in ("h1", "strong", "em", "code", "a", "ul", "ol", "li", "table", "th", "td", "pre", "blockquote"):
        assert tag in tags, (tag, r["html"])
    assert tags.count("ul") == 2  # the nested list
    assert tags.count("tr") == 3
    assert "print('<hi>')" in r["text"]
    assert r["links"] == ["https://example.com"]
    assert 'class="al-r"' in r["html"]
    # An answer still streaming, its code block not yet closed, renders as a code block already.
    r = driver.execute_script(RENDER_INTO_DOM, "Here:\n```\nx = 1")
    assert "pre" in r["tags"] and "x = 1" in r["text"]


GROUNDED_ANSWER = ('Here they are:\n```json\n[\n  {"bbox_2d": [100, 200, 500, 600], "label": "cat <img src=x onerror=window.__pwned=1>"},\n'
                   '  {"bbox_2d": [900, 950, 700, 800], "label": "ball"},\n  {"point_2d": [750, 250], "label": "eye"}\n]\n```')


def test_grounding_boxes_are_drawn_on_the_image_and_toggle(driver, server):
    # A canned answer with Qwen3-VL boxes (0-1000 coordinates) and a point, drawn over a 400x200 image.
    if not driver.current_url.startswith(server.url):
        open_page(driver, server.url)
    buf = io.BytesIO()
    Image.new("RGB", (400, 200), "white").save(buf, "PNG")
    url = "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()
    r = driver.execute_async_script("""
        const [text, url, done] = arguments;
        const items = window.qvl.parseGrounding(text);
        const msg = document.createElement('div');
        msg.className = 'msg assistant';
        const stats = document.createElement('div');
        stats.className = 'stats';
        msg.append(stats);
        document.getElementById('messages').append(msg);
        const fig = window.qvl.renderGrounding(msg, items, url);
        const img = fig.querySelector('img');
        const measure = () => {
          const ir = img.getBoundingClientRect();
          const marks = [...fig.querySelectorAll('.mark')].map((m) => {
            const r = m.getBoundingClientRect();
            return {cls: m.className, x: (r.left - ir.left) / ir.width, y: (r.top - ir.top) / ir.height,
                    w: r.width / ir.width, h: r.height / ir.height, label: m.textContent,
                    shown: getComputedStyle(m).display !== 'none'};
          });
          return {items, marks, width: ir.width, height: ir.height, html: fig.innerHTML};
        };
        const finish = () => {
          const before = measure();
          fig.querySelector('.toggle-marks').click();
          const hidden = measure();
          fig.querySelector('.toggle-marks').click();
          done({before, hidden, again: measure(), button: fig.querySelector('.toggle-marks').textContent});
        };
        if (img.complete) finish(); else img.onload = finish;
    """, GROUNDED_ANSWER, url)
    items, marks = r["before"]["items"], r["before"]["marks"]
    assert [i["kind"] for i in items] == ["box", "box", "point"]
    assert items[1] == {"kind": "box", "x1": 700, "y1": 800, "x2": 900, "y2": 950, "label": "ball"}  # corners sorted
    assert r["before"]["width"] > 100 and abs(r["before"]["width"] / r["before"]["height"] - 2) < 0.02
    box = marks[0]
    assert "box" in box["cls"] and box["shown"]
    for got, want in ((box["x"], 0.1), (box["y"], 0.2), (box["w"], 0.4), (box["h"], 0.4)):
        assert abs(got - want) < 0.02, (box, want)
    point = marks[2]
    assert "point" in point["cls"] and abs(point["x"] + point["w"] / 2 - 0.75) < 0.02 and abs(point["y"] + point["h"] / 2 - 0.25) < 0.03
    assert [m["label"] for m in marks] == ["cat <img src=x onerror=window.__pwned=1>", "ball", "eye"]
    assert "<img src=x" not in r["before"]["html"]  # the label is text, escaped
    assert not any(m["shown"] for m in r["hidden"]["marks"]) and all(m["shown"] for m in r["again"]["marks"])
    assert r["button"] == "Hide boxes"
    assert driver.execute_script("return window.__pwned") is None
    assert driver.execute_script("return window.qvl.parseGrounding('no boxes here, [1, 2]').length") == 0


def test_draw_boxes_tool_marks_a_copy_of_the_image(tmp_path):
    import subprocess
    import sys
    src = tmp_path / "in.png"
    Image.new("RGB", (200, 100), "white").save(src)
    answer = tmp_path / "answer.txt"
    answer.write_text(GROUNDED_ANSWER)
    out = tmp_path / "out.png"
    tool = os.path.join(os.path.dirname(__file__), "..", "..", "tools", "draw_boxes.py")
    p = subprocess.run([sys.executable, tool, str(src), str(answer), str(out)], capture_output=True, text=True, check=True)
    assert "3 mark(s)" in p.stdout
    img = Image.open(out).convert("RGB")
    assert img.size == (200, 100)
    assert img.getpixel((20, 45)) != (255, 255, 255)  # the first box's left edge: x = 100/1000 * 200
    assert img.getpixel((60, 45)) == (255, 255, 255)  # inside it
    assert img.getpixel((99, 45)) != (255, 255, 255)  # its right edge: x = 500/1000 * 200
    assert img.getpixel((150, 25)) != (255, 255, 255)  # the point at (750, 250)
    assert Image.open(src).convert("RGB").getpixel((20, 45)) == (255, 255, 255)  # the original is untouched


def test_error_messages_for_missing_key_bad_image_and_busy(driver):
    with run_server("--queue", "0", "--parallel", "1", api_key="page-key") as s:
        open_page(driver, s.url)
        driver.execute_script("localStorage.clear(); sessionStorage.clear()")
        # No API key: 401, said plainly; the question goes back into the composer to retry.
        set_value(driver, "max-tokens", 8)
        driver.find_element(By.ID, "prompt").send_keys("Hello?")
        driver.find_element(By.ID, "send").click()
        answer = wait(driver, lambda: answer_in(driver, "error"))
        assert "API key" in answer.find_element(By.CSS_SELECTOR, ".error").text
        assert driver.find_element(By.ID, "prompt").get_attribute("value") == "Hello?"
        assert driver.execute_script("return qvl.state.history.length") == 0

        # With the key (Settings), a file the browser cannot decode but the server might (a TIFF's signature) goes
        # to the server, which refuses it: 400.
        set_value(driver, "api-key", "page-key")
        driver.execute_script("const dt = new DataTransfer(); dt.items.add(new File(['II*\\u0000 not an image'], 'fake.tif', {type: 'image/tiff'}));"
                              "document.body.dispatchEvent(new DragEvent('drop', {dataTransfer: dt, bubbles: true, cancelable: true}));")
        wait(driver, lambda: attachment_count(driver) == 1)
        wait(driver, lambda: driver.execute_script("return qvl.state.attachments[0].undecodable === true"))
        driver.find_element(By.ID, "send").click()
        wait(driver, lambda: len(driver.find_elements(By.CSS_SELECTOR, ".msg.assistant")) == 2)
        answer = wait(driver, lambda: answer_in(driver, "error"))
        assert "refused" in answer.find_element(By.CSS_SELECTOR, ".error").text
        assert attachment_count(driver) == 1  # given back to retry
        driver.find_element(By.CSS_SELECTOR, "#attachments .thumb .remove").click()

        # Busy: another client holds the only slot and the queue has no places: 503, said plainly.
        client = openai.OpenAI(base_url=s.url + "/v1", api_key="page-key", max_retries=0, timeout=scaled(60))
        stream = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "go on"}],
                                                max_tokens=3000, stream=True)
        first = threading.Event()
        holder = threading.Thread(target=lambda: (next(iter(stream)), first.set()), daemon=True)
        holder.start()
        assert first.wait(scaled(30))
        try:
            driver.find_element(By.ID, "send").click()
            wait(driver, lambda: len(driver.find_elements(By.CSS_SELECTOR, ".msg.assistant")) == 3)
            answer = wait(driver, lambda: answer_in(driver, "error"))
            assert "busy" in answer.find_element(By.CSS_SELECTOR, ".error").text
        finally:
            stream.close()
        # Once the other client is gone, the same question goes through.
        wait(driver, lambda: get_json(s.url + "/health")[1]["slots"]["busy"] == 0, timeout=10)
        driver.find_element(By.ID, "send").click()
        wait(driver, lambda: len(driver.find_elements(By.CSS_SELECTOR, ".msg.assistant")) == 4)
        wait(driver, lambda: state_of(last_answer(driver)) == "done", timeout=60)
        driver.execute_script("sessionStorage.clear()")


MOCK_FETCH = """
window.__realFetch = window.__realFetch || window.fetch;
window.__mock = arguments[0];
window.fetch = async (url, init) => {
  for (const [suffix, [status, body]] of Object.entries(window.__mock)) {
    if (String(url).endsWith(suffix)) {
      return new Response(JSON.stringify(body), {status, headers: {'Content-Type': 'application/json'}});
    }
  }
  return window.__realFetch(url, init);
};
return qvl.pollHealth();
"""


def test_loading_and_failed_model_are_shown(driver, server):
    """A real model takes a while to load (the tiny one is ready at once): /health is mocked in the page."""
    open_page(driver, server.url)
    try:
        driver.execute_script(MOCK_FETCH, {"/health": [503, {"status": "loading"}]})
        assert "loading" in driver.find_element(By.ID, "status").get_attribute("class")
        assert "model is loading" in driver.find_element(By.ID, "banner").text
        assert not driver.find_element(By.ID, "send").is_enabled()
        driver.execute_script(MOCK_FETCH, {"/health": [500, {"status": "error", "error": "no weights"}]})
        assert "failed to load: no weights" in driver.find_element(By.ID, "banner").text
        # The health check said ready, but the chat request still finds the model loading.
        driver.execute_script(MOCK_FETCH, {
            "/health": [200, {"status": "ok", "model": "m", "slots": {"total": 1, "busy": 0}, "queue": 0}],
            "/v1/chat/completions": [503, {"error": {"message": "the model is loading", "type": "server_error",
                                                     "code": "loading"}}]})
        assert driver.find_element(By.ID, "send").is_enabled() and not driver.find_element(By.ID, "banner").is_displayed()
        driver.find_element(By.ID, "prompt").send_keys("Hello?\n")
        answer = wait(driver, lambda: answer_in(driver, "error"))
        assert "still loading" in answer.find_element(By.CSS_SELECTOR, ".error").text
    finally:
        driver.execute_script("if (window.__realFetch) window.fetch = window.__realFetch; return qvl.pollHealth();")
    wait(driver, lambda: "ready" in driver.find_element(By.ID, "status").get_attribute("class"))


def test_server_going_away_is_reported(driver):
    with run_server() as s:
        open_page(driver, s.url)
    # The server stopped: the status and the banner say so (at the next health check; now, not in 5 s).
    driver.execute_script("return qvl.pollHealth()")
    wait(driver, lambda: "offline" in driver.find_element(By.ID, "status").get_attribute("class"), timeout=15)
    assert "Cannot reach the server" in driver.find_element(By.ID, "banner").text
    assert not driver.find_element(By.ID, "send").is_enabled()


def test_phone_sized_screen(driver, server, output_dir):
    driver.set_window_size(390, 844)
    try:
        open_page(driver, server.url)
        driver.execute_script("document.getElementById('new-chat').click()")
        set_value(driver, "max-tokens", 24)
        driver.find_element(By.ID, "prompt").send_keys("Hello from a phone")
        driver.find_element(By.ID, "send").click()
        wait(driver, lambda: state_of(last_answer(driver)) == "done", timeout=60)
        driver.find_element(By.ID, "settings-toggle").click()  # closed again
        width = driver.execute_script("return [document.documentElement.scrollWidth, window.innerWidth]")
        assert width[0] <= width[1], f"the page scrolls sideways on a phone: {width}"
        for element_id in ("send", "prompt", "new-chat", "settings-toggle"):
            r = driver.execute_script("const r = document.getElementById(arguments[0]).getBoundingClientRect();"
                                      "return [r.left, r.top, r.right, r.bottom, innerWidth, innerHeight]", element_id)
            assert r[0] >= 0 and r[1] >= 0 and r[2] <= r[4] and r[3] <= r[5], (element_id, r)
        driver.save_screenshot(str(output_dir / "phone.png"))
    finally:
        driver.set_window_size(1000, 800)
