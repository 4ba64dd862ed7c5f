"""PDF documents on the page, in headless Chromium: a PDF (known by its bytes) attaches as a chip with the
server's page pictures (POST /v1/documents/pages), the pictures choose the pages sent, the question goes as an
OpenAI `file` part naming them, Regenerate sends it again as it was, a reload still shows it; a damaged or
too large PDF is a notice and nothing attached."""
import base64
import sys

from selenium.webdriver.common.by import By

from conftest import ROOT
from test_browser import driver, last_answer, open_page, set_value, state_of, wait  # noqa: F401
from test_browser_conversations import CAPTURE, saved

sys.path.insert(0, str(ROOT / "tests" / "pdf"))
import pdfgen  # noqa: E402  (tests/pdf/pdfgen.py: the PDF writer of the document tests)

FILE = ("const b = Uint8Array.from(atob(arguments[0]), c => c.charCodeAt(0));"
        "const dt = new DataTransfer(); dt.items.add(new File([b], arguments[1], {type: arguments[2]}));")
DROP = FILE + "document.body.dispatchEvent(new DragEvent('drop', {dataTransfer: dt, bubbles: true, cancelable: true}));"
PASTE = FILE + ("document.getElementById('prompt').dispatchEvent("
                "new ClipboardEvent('paste', {clipboardData: dt, bubbles: true, cancelable: true}));")


def pages(d):
    return d.find_elements(By.CSS_SELECTOR, "#attachments .document .page")


def pressed(d):
    return [p.get_attribute("aria-pressed") for p in pages(d)]


def banner(d):
    return d.find_element(By.ID, "banner").text


def file_part(body):
    return [m for m in body["messages"] if m["role"] == "user"][-1]["content"][0]


def test_attach_choose_pages_send_regenerate_and_reload(driver, server, tmp_path):
    pdf = pdfgen.document([pdfgen.text_page(["Page one"]), pdfgen.text_page(["Page two"]),
                           pdfgen.text_page(["Page three"])])
    path = tmp_path / "three.pdf"
    path.write_bytes(pdf)
    open_page(driver, server.url)
    set_value(driver, "max-tokens", 8)
    driver.find_element(By.ID, "settings-toggle").click()

    # The file button: a chip that reads the pages, then one picture per page, every page chosen.
    driver.find_element(By.ID, "file-input").send_keys(str(path))
    wait(driver, lambda: len(pages(driver)) == 3, timeout=60, message="the page pictures never showed")
    chip = driver.find_element(By.CSS_SELECTOR, "#attachments .document")
    assert chip.get_attribute("data-state") == "ready"
    assert chip.find_element(By.CSS_SELECTOR, ".doc-name").text == "three.pdf"
    assert chip.find_element(By.CSS_SELECTOR, ".doc-count").text == "3 of 3 pages"
    assert pressed(driver) == ["true", "true", "true"]
    wait(driver, lambda: all(driver.execute_script("return arguments[0].naturalWidth", img) > 0
                             for img in chip.find_elements(By.CSS_SELECTOR, ".page img")),
         message="a page picture does not decode")

    # None: sending is refused with a notice, nothing leaves the tray. All, then page 2 left out.
    chip.find_element(By.CSS_SELECTOR, ".doc-none").click()
    assert pressed(driver) == ["false", "false", "false"]
    driver.find_element(By.ID, "send").click()
    wait(driver, lambda: "No page of three.pdf" in banner(driver))
    assert driver.find_elements(By.CSS_SELECTOR, ".msg.user") == [] and len(pages(driver)) == 3
    chip.find_element(By.CSS_SELECTOR, ".doc-all").click()
    pages(driver)[1].click()
    assert pressed(driver) == ["true", "false", "true"]
    assert chip.find_element(By.CSS_SELECTOR, ".doc-count").text == "2 of 3 pages"

    # Sent: a file part with the chosen pages and the PDF's own bytes; the answer arrives.
    driver.execute_script(CAPTURE)
    driver.find_element(By.ID, "prompt").send_keys("What do these pages say?")
    driver.find_element(By.ID, "send").click()
    wait(driver, lambda: driver.find_elements(By.CSS_SELECTOR, ".msg.assistant"))
    wait(driver, lambda: state_of(last_answer(driver)) in ("done", "error"), timeout=60, message="no answer")
    error = last_answer(driver).find_element(By.CSS_SELECTOR, ".error")
    assert state_of(last_answer(driver)) == "done", error.text
    assert last_answer(driver).find_element(By.CSS_SELECTOR, ".content").text.strip()
    assert not driver.find_element(By.ID, "attachments").is_displayed()
    body = driver.execute_script("return window.__bodies[0]")
    part = file_part(body)
    assert part["type"] == "file" and part["file"]["filename"] == "three.pdf" and part["file"]["pages"] == [1, 3]
    assert part["file"]["file_data"].startswith("data:application/pdf;base64,")
    assert base64.b64decode(part["file"]["file_data"].split(",", 1)[1]) == pdf
    assert part["max_pixels"] == 1048576  # the image resolution setting (Medium) bounds each page too
    assert [m for m in body["messages"] if m["role"] == "user"][-1]["content"][1] == {
        "type": "text", "text": "What do these pages say?"}
    # The question shows the document: its name, the pages sent and their pictures.
    shown = driver.find_element(By.CSS_SELECTOR, ".msg.user figure.document")
    assert shown.find_element(By.CSS_SELECTOR, ".doc-name").text == "three.pdf"
    assert shown.find_element(By.CSS_SELECTOR, ".doc-which").text == "pages 1, 3"
    assert [i.get_attribute("alt") for i in shown.find_elements(By.CSS_SELECTOR, "img")] == ["Page 1", "Page 3"]

    # Regenerate sends the document part again as it was sent.
    last_answer(driver).find_element(By.CSS_SELECTOR, ".regenerate").click()
    wait(driver, lambda: driver.execute_script("return window.__bodies.length") == 2)
    wait(driver, lambda: state_of(last_answer(driver)) == "done", timeout=60, message="the regenerated answer never finished")
    assert file_part(driver.execute_script("return window.__bodies[1]")) == part

    # After a reload the question still shows the document, and a follow-up carries it in the history.
    wait(driver, lambda: saved(driver) == 1)
    driver.refresh()
    open_page(driver, server.url, keep_conversations=True)
    wait(driver, lambda: driver.find_elements(By.CSS_SELECTOR, ".msg.user figure.document .doc-name"))
    shown = driver.find_element(By.CSS_SELECTOR, ".msg.user figure.document")
    assert shown.find_element(By.CSS_SELECTOR, ".doc-name").text == "three.pdf"
    assert shown.find_element(By.CSS_SELECTOR, ".doc-which").text == "pages 1, 3"
    assert driver.execute_script("return qvl.state.history[0].content[0]") == part
    chats = driver.execute_script("return qvl.Conversations.list().map(qvl.Conversations.titleOf)")
    assert chats == ["What do these pages say?"], chats


def test_damaged_or_too_large_pdf_is_refused(driver, server):
    open_page(driver, server.url)
    # The bytes say PDF, the server cannot read it: its words in a notice, nothing attached.
    driver.execute_script(DROP, base64.b64encode(b"%PDF-1.4\n garbage").decode(), "broken.pdf", "application/pdf")
    wait(driver, lambda: "broken.pdf was not attached" in banner(driver), timeout=60,
         message="no notice for a damaged PDF")
    assert driver.find_elements(By.CSS_SELECTOR, "#attachments .thumb") == []
    assert not driver.find_element(By.ID, "attachments").is_displayed()
    # Over 14 MiB: refused in the browser before anything is sent.
    driver.execute_script("const big = new Uint8Array(15 << 20); big.set([37, 80, 68, 70, 45], 0);"
                          "const dt = new DataTransfer(); dt.items.add(new File([big], 'huge.pdf', {type: 'application/pdf'}));"
                          "document.body.dispatchEvent(new DragEvent('drop', {dataTransfer: dt, bubbles: true, cancelable: true}));")
    wait(driver, lambda: "PDF documents up to 14 MB" in banner(driver))
    assert driver.find_elements(By.CSS_SELECTOR, "#attachments .thumb") == []
    # Pasted, and named and typed as a picture: still a PDF (its bytes decide), so a document chip.
    pdf = pdfgen.document([pdfgen.text_page(["Only page"])])
    driver.execute_script(PASTE, base64.b64encode(pdf).decode(), "scan.png", "image/png")
    wait(driver, lambda: len(pages(driver)) == 1, timeout=60, message="a PDF named .png did not attach as a document")
    driver.find_element(By.CSS_SELECTOR, "#attachments .document .remove").click()
    assert driver.find_elements(By.CSS_SELECTOR, "#attachments .thumb") == []
