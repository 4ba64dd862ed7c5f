"""The page keeps conversations, in headless Chromium: a reload shows the conversation again, the list switches,
renames and deletes them, regenerate and edit-and-resend replace answers, copy, the system prompt and the
sampling settings reach the request, the favicon is served, and attachments are checked in the browser
(type by their bytes, size) before they show."""
import json
import urllib.request

from selenium.common.exceptions import StaleElementReferenceException
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys

from conftest import get_json
from test_browser import (attachment_count, driver, last_answer, open_page, png_b64, set_value,  # noqa: F401
                          show_settings, state_of, wait)

CAPTURE = """
window.__bodies = [];
const real = window.fetch;
window.fetch = (url, init) => {
  if (String(url).endsWith('/v1/chat/completions')) window.__bodies.push(JSON.parse(init.body));
  return real(url, init);
};
"""


def ask(d, text):
    before = len(d.find_elements(By.CSS_SELECTOR, ".msg.assistant"))
    d.find_element(By.ID, "prompt").send_keys(text)
    d.find_element(By.ID, "send").click()
    wait(d, lambda: len(d.find_elements(By.CSS_SELECTOR, ".msg.assistant")) == before + 1)
    wait(d, lambda: state_of(last_answer(d)) == "done", timeout=60, message="the answer never finished")
    return answer_texts(d)[-1]


def answer_texts(d):
    return [m.find_element(By.CSS_SELECTOR, ".content").text for m in d.find_elements(By.CSS_SELECTOR, ".msg.assistant")]


def user_texts(d):
    return [m.find_element(By.CSS_SELECTOR, ".content").text for m in d.find_elements(By.CSS_SELECTOR, ".msg.user")]


def chat_titles(d):
    if not d.find_element(By.ID, "chats").is_displayed():
        d.find_element(By.ID, "chats-toggle").click()
    return [e.text for e in d.find_elements(By.CSS_SELECTOR, "#chat-list .chat-title")]


def saved(d):
    """Waits until the conversations are written to IndexedDB (a save is asynchronous)."""
    return d.execute_async_script("""
      const done = arguments[arguments.length - 1];
      const req = indexedDB.open('qvl');
      req.onupgradeneeded = () => req.transaction.abort();  // not there yet: never create it from here
      req.onsuccess = () => {
        try {
          const t = req.result.transaction('conversations').objectStore('conversations').getAll();
          t.onsuccess = () => { req.result.close(); done(t.result.length); };
          t.onerror = () => { req.result.close(); done(-1); };
        } catch (e) { req.result.close(); done(-1); }
      };
      req.onerror = () => done(0);
      req.onblocked = () => done(-2);""")


def test_reload_keeps_the_conversation_and_the_list_switches(driver, server):
    open_page(driver, server.url)
    set_value(driver, "max-tokens", 6)
    first = ask(driver, "Describe a red square.")
    second = ask(driver, "And a blue one?")
    wait(driver, lambda: saved(driver) == 1)
    driver.refresh()
    open_page(driver, server.url, keep_conversations=True)
    wait(driver, lambda: user_texts(driver) == ["Describe a red square.", "And a blue one?"])
    assert answer_texts(driver) == [first, second]
    assert driver.execute_script("return qvl.state.history.length") == 4

    # A second conversation; the list shows both; switching shows each one's turns.
    driver.find_element(By.ID, "new-chat").click()
    assert user_texts(driver) == []
    ask(driver, "A different question.")
    wait(driver, lambda: saved(driver) == 2)
    titles = chat_titles(driver)
    assert titles == ["A different question.", "Describe a red square."], titles
    driver.find_elements(By.CSS_SELECTOR, "#chat-list .chat-title")[1].click()
    wait(driver, lambda: user_texts(driver) == ["Describe a red square.", "And a blue one?"])
    # A follow-up there carries that conversation's turns.
    driver.execute_script(CAPTURE)
    ask(driver, "Which was first?")
    body = driver.execute_script("return window.__bodies[0]")
    assert [m["content"] for m in body["messages"] if m["role"] == "user"] == [
        "Describe a red square.", "And a blue one?", "Which was first?"]

    # Rename (in place) and delete (asked twice).
    entry = driver.find_elements(By.CSS_SELECTOR, "#chat-list .chat-entry")[0]
    entry.find_element(By.CSS_SELECTOR, ".chat-rename").click()
    name = driver.find_element(By.CSS_SELECTOR, "#chat-list .chat-name")
    try:  # the old name is selected when the box opens: typing replaces it; Enter saves and redraws the list
        name.send_keys("Squares" + Keys.ENTER)
    except StaleElementReferenceException:
        pass
    wait(driver, lambda: chat_titles(driver)[0] == "Squares")
    delete = lambda: driver.find_elements(By.CSS_SELECTOR, "#chat-list .chat-entry .chat-delete")[1]  # noqa: E731
    delete().click()
    assert len(chat_titles(driver)) == 2 and delete().text == "Delete?"  # the first click only asks
    delete().click()
    wait(driver, lambda: chat_titles(driver) == ["Squares"])
    wait(driver, lambda: saved(driver) == 1)
    driver.refresh()
    open_page(driver, server.url, keep_conversations=True)
    wait(driver, lambda: chat_titles(driver) == ["Squares"])


def test_regenerate_edit_and_copy(driver, server):
    open_page(driver, server.url)
    set_value(driver, "max-tokens", 8)
    set_value(driver, "temperature", "")
    driver.execute_script("const t = document.getElementById('temperature'); t.value = 1.5; t.dispatchEvent(new Event('input'))")
    ask(driver, "Tell me something.")
    ask(driver, "Tell me more.")
    before = answer_texts(driver)
    # Regenerate: only on the last answer; it is replaced, the turn count stays.
    assert len(driver.find_elements(By.CSS_SELECTOR, ".msg.assistant .regenerate")) == 1
    answers = set()
    for _ in range(3):  # sampled at temperature 1.5: another answer (three tries against a coincidence)
        last_answer(driver).find_element(By.CSS_SELECTOR, ".regenerate").click()
        wait(driver, lambda: state_of(last_answer(driver)) == "done" and len(answer_texts(driver)) == 2, timeout=60)
        answers.add(answer_texts(driver)[-1])
    assert answers - {before[-1]}, "regenerate gave the same answer three times"
    assert answer_texts(driver)[0] == before[0] and user_texts(driver) == ["Tell me something.", "Tell me more."]
    assert driver.execute_script("return qvl.state.history.length") == 4

    # Edit the first message: the turns after it go, the edited one is answered.
    driver.find_elements(By.CSS_SELECTOR, ".msg.user .edit")[0].click()
    box = driver.find_element(By.CSS_SELECTOR, ".msg.user .editing textarea")
    box.clear()
    box.send_keys("Tell me something else.")
    driver.find_element(By.CSS_SELECTOR, ".msg.user .editing .primary").click()
    wait(driver, lambda: user_texts(driver) == ["Tell me something else."])
    wait(driver, lambda: state_of(last_answer(driver)) == "done", timeout=60)
    assert len(answer_texts(driver)) == 1
    assert driver.execute_script("return qvl.state.history[0].content") == "Tell me something else."

    # Copy: the answer's text (its Markdown source) goes to the clipboard.
    copy = last_answer(driver).find_element(By.CSS_SELECTOR, ".copy")
    copy.click()
    wait(driver, lambda: copy.text == "Copied")


def test_system_prompt_and_sampling_settings_are_sent(driver, server):
    open_page(driver, server.url)
    set_value(driver, "system", "Answer in one word.")
    set_value(driver, "top-p", "0.5")
    set_value(driver, "top-k", "7")
    set_value(driver, "seed", "42")
    set_value(driver, "max-tokens", 4)
    driver.execute_script(CAPTURE)
    ask(driver, "Hello?")
    body = driver.execute_script("return window.__bodies[0]")
    assert body["messages"][0] == {"role": "system", "content": "Answer in one word."}
    assert body["top_p"] == 0.5 and body["top_k"] == 7 and body["seed"] == 42
    # Kept across a reload (settings in localStorage).
    driver.refresh()
    open_page(driver, server.url, keep_conversations=True)
    show_settings(driver)
    assert driver.find_element(By.ID, "system").get_attribute("value") == "Answer in one word."
    assert driver.find_element(By.ID, "seed").get_attribute("value") == "42"
    for element_id in ("system", "top-p", "top-k", "seed"):
        set_value(driver, element_id, "")


def test_favicon_and_attachments_checked_before_they_show(driver, server):
    with urllib.request.urlopen(server.url + "/favicon.svg") as r:
        assert r.status == 200 and r.headers["Content-Type"] == "image/svg+xml" and b"<svg" in r.read()
    open_page(driver, server.url)
    assert driver.find_element(By.CSS_SELECTOR, "link[rel=icon]").get_attribute("href").endswith("/favicon.svg")
    drop = ("const dt = new DataTransfer(); dt.items.add(new File([arguments[0]], arguments[1], {type: arguments[2]}));"
            "document.body.dispatchEvent(new DragEvent('drop', {dataTransfer: dt, bubbles: true, cancelable: true}));")
    # A text file named as a picture: refused by its bytes, never shown.
    driver.execute_script(drop, "just some notes", "photo.png", "image/png")
    wait(driver, lambda: "not an image or a video" in driver.find_element(By.ID, "banner").text)
    # A PNG's signature with nothing after it: the browser cannot read it, so it is not attached.
    driver.execute_script("const b = Uint8Array.from([0x89, 0x50, 0x4e, 0x47, 13, 10, 26, 10, 32, 98, 97, 100]);"
                          "const dt = new DataTransfer(); dt.items.add(new File([b], 'broken.png', {type: 'image/png'}));"
                          "document.body.dispatchEvent(new DragEvent('drop', {dataTransfer: dt, bubbles: true, cancelable: true}));")
    wait(driver, lambda: "cannot be read as a picture" in driver.find_element(By.ID, "banner").text)
    # A clip over the size that can be sent.
    driver.execute_script("const big = new Uint8Array(15 << 20); big.set([0, 0, 0, 24, 102, 116, 121, 112], 0);"
                          "const dt = new DataTransfer(); dt.items.add(new File([big], 'long.mp4', {type: 'video/mp4'}));"
                          "document.body.dispatchEvent(new DragEvent('drop', {dataTransfer: dt, bubbles: true, cancelable: true}));")
    wait(driver, lambda: "clips up to" in driver.find_element(By.ID, "banner").text)
    assert attachment_count(driver) == 0
    # A real picture still attaches.
    driver.execute_script("const b = Uint8Array.from(atob(arguments[0]), c => c.charCodeAt(0));"
                          "const dt = new DataTransfer(); dt.items.add(new File([b], 'ok.png', {type: 'image/png'}));"
                          "document.body.dispatchEvent(new DragEvent('drop', {dataTransfer: dt, bubbles: true, cancelable: true}));",
                          png_b64())
    wait(driver, lambda: attachment_count(driver) == 1)
    assert get_json(server.url + "/health")[0] == 200
