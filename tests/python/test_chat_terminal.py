"""`qvl chat` in a pseudo-terminal, as a person types at it: line editing (arrow keys recall and edit earlier
messages, never printed as ^[[A), the history file, a message of several lines between \"\"\" marks (answered
as `qvl run` answers the same text), text typed while an answer streams kept out of the answer and given to
the next prompt, Ctrl-C at the prompt and during an answer, the model and context named at start."""
import os
import pty
import re
import select
import subprocess
import time

import pytest

from conftest import _binary, scaled

ANSI = re.compile(rb"\x1b\[[0-9;?]*[A-Za-z]|\r")


class Terminal:
    def __init__(self, args, env):
        self.pid, self.fd = pty.fork()
        if self.pid == 0:  # the child: qvl chat on the terminal's other side
            os.execve(str(_binary()), [str(_binary()), *args], env)
        self.out = b""

    def send(self, data: bytes):
        os.write(self.fd, data)

    def read_until(self, pattern: bytes, timeout: float, start: int = 0) -> int:
        """Reads until `pattern` appears at or after `start`; returns its offset."""
        deadline = time.monotonic() + scaled(timeout)
        while True:
            at = self.out.find(pattern, start)
            if at >= 0:
                return at
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"no {pattern!r} within {timeout} s; the terminal shows:\n"
                                     f"{self.out.decode(errors='replace')}")
            r, _, _ = select.select([self.fd], [], [], min(left, 0.2))
            if r:
                try:
                    chunk = os.read(self.fd, 65536)
                except OSError:
                    chunk = b""
                if not chunk:
                    raise AssertionError(f"the program ended before {pattern!r}:\n{self.out.decode(errors='replace')}")
                self.out += chunk

    def exited_within(self, timeout: float) -> bool:
        """Whether the process ends within timeout (scaled), its output read meanwhile; it is not killed."""
        deadline = time.monotonic() + scaled(timeout)
        while time.monotonic() < deadline:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self.status = status
                return True
            try:
                r, _, _ = select.select([self.fd], [], [], 0.1)
                if r:
                    self.out += os.read(self.fd, 65536)
            except OSError:
                pass
        return False

    def finish(self, timeout: float) -> int:
        """The exit code once the process ends within timeout (scaled); killed and an error otherwise."""
        if getattr(self, "status", None) is None and not self.exited_within(timeout):
            os.kill(self.pid, 9)
            raise AssertionError("qvl chat did not exit")
        return os.waitstatus_to_exitcode(self.status)


def run_answer(model, text: str) -> str:
    out = subprocess.run([str(_binary()), "run", "--model", str(model), "-p", text, "-n", "8", "--temp", "0",
                          "--threads", "1"], capture_output=True, timeout=scaled(120), check=True)
    return out.stdout.decode().strip()


def answer_since(screen: bytes, start: int, echo: str = "") -> str:
    """The answer on the screen after offset `start` (taken just before the Enter that sent the message, once
    its echo was on the screen): from the line after it up to the timing line. Lines that only show the typed
    message again (libedit may redraw its line as Enter lands, on a loaded machine) are not the answer."""
    seg = ANSI.sub(b"", screen[start:]).decode(errors="replace")
    stats = re.search(r"\n\(\d+ tokens, [\d.]+ tok/s;", seg)
    assert stats, seg
    lines = seg[seg.index("\n") + 1:stats.start()].split("\n")
    while echo and len(lines) > 1 and lines[0].strip().replace("\r", "").endswith(echo):
        lines.pop(0)
    return "\n".join(lines).strip()


@pytest.fixture
def env(tmp_path):
    return {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(tmp_path), "TERM": "xterm",
            "QVL_HISTORY": str(tmp_path / "history")}


def test_chat_edits_recalls_and_holds_input(tiny_model, env, tmp_path):
    t = Terminal(["chat", "--model", str(tiny_model), "-n", "8", "--temp", "0", "--threads", "1"], env)
    banner = t.read_until(b">>> ", 60)
    head = t.out[:banner].decode(errors="replace")
    assert "Qwen3-VL" in head and "context 4096 tokens" in head and "instruct" in head, head

    def ask(keys: bytes, echo: bytes) -> str:
        """Types `keys`, waits until the screen shows `echo` (so everything before it has arrived), then Enter."""
        before = len(t.out)
        t.send(keys)
        t.read_until(echo, 10, before)
        start = len(t.out)
        t.send(b"\r")
        mark = t.read_until(b" tok/s;", 60, start)
        t.read_until(b">>> ", 30, mark)
        answer = answer_since(t.out, start, echo.decode())
        t.send(b"/clear\r")  # each question alone, as `qvl run` asks it
        t.read_until(b"(conversation cleared)", 10, mark)
        t.read_until(b">>> ", 10, mark + 1)
        return answer

    # A message, answered as `qvl run` answers it.
    assert ask(b"hello", b"hello") == run_answer(tiny_model, "hello")
    # Up, Up (past /clear) recalls it; Left, Backspace and typing edit it: "hello" -> "helo!".
    start = len(t.out)
    t.send(b"\x1b[A\x1b[A")
    t.read_until(b"hello", 10, start)
    assert ask(b"\x1b[D\x1b[D\x7f\x1b[F!", b"!") == run_answer(tiny_model, "helo!")
    assert b"^[[" not in t.out
    # A message of several lines.
    start = len(t.out)
    t.send(b'"""\r')
    t.read_until(b"... ", 10, start)
    at = t.read_until(b"... ", 10, start)
    t.send(b"first line\r")
    t.read_until(b"... ", 10, at + 4)  # the next line's prompt: what follows is the last line's
    assert ask(b'second line"""', b'line"""') == run_answer(tiny_model, "first line\nsecond line")
    t.send(b"\x04")
    assert t.finish(20) == 0
    history = (tmp_path / "history").read_text(errors="replace")
    assert "hello" in history and "helo!" in history

    # Typed while an answer streams: not in the answer, waiting at the next prompt.
    long = Terminal(["chat", "--model", str(tiny_model), "-n", "3000", "--ctx", "8192", "--temp", "0", "--threads", "1"], env)
    long.read_until(b">>> ", 60)
    start = len(long.out)
    long.send(b"Tell me a long story.\r")
    long.read_until(b"Tell me a long story.", 10, start)
    time.sleep(0.3)
    long.send(b"QQQZZZ")
    mark = long.read_until(b" tok/s;", 120, start)
    prompt = long.read_until(b">>> ", 30, mark)
    long.read_until(b"QQQZZZ", 10, prompt)  # shown at the next prompt, ready to send
    assert b"QQQZZZ" not in ANSI.sub(b"", long.out[start:mark]), "typed text leaked into the answer"
    # Ctrl-C at the prompt: a fresh prompt, not an exit; then Ctrl-D ends it.
    for attempt in range(3):  # a Ctrl-C that lands while the prompt is being set up is not seen: press again
        time.sleep(0.3)
        long.send(b"\x03")
        try:
            long.read_until(b"Ctrl-D quits", 3, prompt)
            break
        except AssertionError:
            if attempt == 2:
                raise
    # Ctrl-U first: a line the prompt still holds (the typed-ahead text, put back) would make Ctrl-D an edit.
    # Like Ctrl-C above, a key that lands while the fresh prompt is being set up is not seen: press again.
    for attempt in range(3):
        long.send(b"\x15")
        time.sleep(0.2)
        long.send(b"\x04")
        if attempt == 2 or long.exited_within(5):
            break
    assert long.finish(20) == 0
