"""Image and video URLs, opt-in with --allow-media-urls, against HTTP servers on 127.0.0.1 that the test runs:
an allowed host (fetched, decoded, revalidated by ETag), a host that is not allowed, a redirect to one, an
internal address under '*', a slow drip, an oversized body (declared and not), a page that is not an image,
a redirect loop; and refused with the old clear message when the option is off."""
import contextlib
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import openai
import pytest

from conftest import IMAGES, ROOT, run_server, scaled

JPEG = (IMAGES / "jpeg_baseline_420_640x480.jpg").read_bytes()
VIDEO = (ROOT / "tests" / "data" / "videos" / "h264_30fps_64x48.mp4").read_bytes()


class Media(BaseHTTPRequestHandler):
    seen = []  # (path, If-None-Match)

    def log_message(self, *args):
        pass

    def send_body(self, body: bytes, ctype: str, etag: str | None = None):
        self.send_response(200)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        if etag:
            self.send_header("ETag", etag)
        self.end_headers()
        self.wfile.write(body)

    def redirect(self, to: str):
        self.send_response(302)
        self.send_header("Location", to)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def do_GET(self):
        inm = self.headers.get("If-None-Match")
        Media.seen.append((self.path, inm))
        port = self.server.server_address[1]
        if self.path == "/cat.jpg":
            if inm == '"v1"':
                self.send_response(304)
                self.send_header("ETag", '"v1"')
                self.end_headers()
                return
            return self.send_body(JPEG, "image/jpeg", '"v1"')
        if self.path == "/clip.mp4":
            return self.send_body(VIDEO, "video/mp4")
        if self.path == "/same-host":
            return self.redirect("/cat.jpg")
        if self.path == "/other-host":
            return self.redirect(f"http://localhost:{port}/cat.jpg")
        if self.path == "/to-internal":  # to this server by its address, which only a named host may reach
            return self.redirect(f"http://127.0.0.1:{port}/cat.jpg")
        if self.path == "/loop":
            return self.redirect("/loop")
        if self.path == "/page.html":
            return self.send_body(b"<html><body>not a picture</body></html>" * 20, "text/html")
        if self.path == "/huge":
            self.send_response(200)
            self.send_header("Content-Length", str(200 << 20))
            self.end_headers()
            return
        if self.path == "/endless":  # no length: cut off at the limit
            self.send_response(200)
            self.end_headers()
            try:
                head = JPEG[:1024]
                self.wfile.write(head)
                for _ in range(200):
                    self.wfile.write(b"\0" * (1 << 20))
            except OSError:
                pass
            return
        if self.path == "/drip":
            self.send_response(200)
            self.send_header("Content-Length", str(len(JPEG)))
            self.end_headers()
            try:
                for i in range(0, 200):
                    self.wfile.write(JPEG[i:i + 1])
                    self.wfile.flush()
                    time.sleep(0.2)
            except OSError:
                pass
            return
        self.send_response(404)
        self.end_headers()


@contextlib.contextmanager
def media_server():
    srv = ThreadingHTTPServer(("127.0.0.1", 0), Media)
    srv.daemon_threads = True
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{srv.server_address[1]}"
    finally:
        srv.shutdown()


def ask(client, url: str, kind: str = "image_url"):
    return client.chat.completions.create(model="x", max_tokens=2, messages=[{"role": "user", "content": [
        {"type": kind, kind: {"url": url}}, {"type": "text", "text": "What is this?"}]}])


def test_urls_are_refused_unless_allowed(server):
    client = openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=scaled(60))
    with media_server() as base:
        Media.seen.clear()
        with pytest.raises(openai.BadRequestError) as e:
            ask(client, base + "/cat.jpg")
        assert "not fetched" in e.value.message and "--allow-media-urls" in e.value.message
        assert Media.seen == []  # never contacted


def test_allowed_host_fetches_and_the_checks_hold():
    with media_server() as base, run_server("--allow-media-urls", "127.0.0.1", "--media-url-timeout", "3") as s:
        client = openai.OpenAI(base_url=s.url + "/v1", api_key="unused", max_retries=0, timeout=scaled(60))
        Media.seen.clear()
        r = ask(client, base + "/cat.jpg")
        assert r.timings["image_tokens"] > 0
        # Again: revalidated with the ETag (304), the cached bytes used.
        ask(client, base + "/cat.jpg")
        assert ("/cat.jpg", '"v1"') in Media.seen
        # A redirect on the allowed host is followed; the Responses API takes URLs too.
        assert ask(client, base + "/same-host").timings["image_tokens"] > 0
        resp = client.responses.create(model="x", max_output_tokens=2, input=[{"role": "user", "content": [
            {"type": "input_image", "image_url": base + "/cat.jpg"}, {"type": "input_text", "text": "?"}]}])
        assert resp.timings["image_tokens"] > 0
        # A video URL.
        v = ask(client, base + "/clip.mp4", "video_url")
        assert v.timings["video_tokens"] > 0
        refusals = [("/other-host", "not one --allow-media-urls allows"), ("/loop", "redirects"),
                    ("/page.html", "not an image"), ("/huge", "over the limit"), ("/endless", "over the limit"),
                    ("/drip", "too slow"), ("/missing", "HTTP 404")]
        for path, words in refusals:
            t0 = time.monotonic()
            with pytest.raises(openai.BadRequestError) as e:
                ask(client, base + path)
            assert words in e.value.message, (path, e.value.message)
            assert time.monotonic() - t0 < scaled(10), path
        with pytest.raises(openai.BadRequestError) as e:
            ask(client, "ftp://127.0.0.1/x.jpg")
        with pytest.raises(openai.BadRequestError) as e:
            ask(client, "http://example.invalid/cat.jpg")
        assert "not one --allow-media-urls allows" in e.value.message
        with pytest.raises(openai.BadRequestError) as e:  # curl would look up the punycode name, not the one checked
            ask(client, "http://bücher.127.0.0.1.nip.example/cat.jpg".replace("127.0.0.1.nip.example", "localhost"))
        assert "not plain ASCII" in e.value.message or "not one --allow-media-urls allows" in e.value.message
        with pytest.raises(openai.BadRequestError) as e:  # a fetch each: a request names a few at most
            client.chat.completions.create(model="x", max_tokens=2, messages=[{"role": "user", "content": [
                {"type": "image_url", "image_url": {"url": base + f"/cat.jpg?{i}"}} for i in range(9)]}])
        assert "at most 8" in e.value.message
        assert s.url  # the server is fine after all of it
        assert ask(client, base + "/cat.jpg").timings["image_tokens"] > 0


def test_any_host_still_refuses_internal_addresses():
    with media_server() as base, run_server("--allow-media-urls", "*") as s:
        client = openai.OpenAI(base_url=s.url + "/v1", api_key="unused", max_retries=0, timeout=scaled(60))
        Media.seen.clear()
        for url in [base + "/cat.jpg", base.replace("127.0.0.1", "localhost") + "/cat.jpg"]:
            with pytest.raises(openai.BadRequestError) as e:
                ask(client, url)
            assert "internal address" in e.value.message, e.value.message
        assert Media.seen == []


def test_a_redirect_to_an_internal_address_is_refused():
    # localhost is named (so reached, though internal); '*' admits any other host, but not at an internal
    # address: the redirect to 127.0.0.1 stops there.
    with media_server() as base, run_server("--allow-media-urls", "localhost,*") as s:
        client = openai.OpenAI(base_url=s.url + "/v1", api_key="unused", max_retries=0, timeout=scaled(60))
        named = base.replace("127.0.0.1", "localhost")
        assert ask(client, named + "/cat.jpg").timings["image_tokens"] > 0
        Media.seen.clear()
        with pytest.raises(openai.BadRequestError) as e:
            ask(client, named + "/to-internal")
        assert "internal address" in e.value.message, e.value.message
        assert [p for p, _ in Media.seen] == ["/to-internal"]  # the redirect's target was never asked
