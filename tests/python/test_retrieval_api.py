"""Qwen3-VL-Embedding and -Reranker served by `qvl serve --model`: the `openai` package's embeddings (a string, a
list, Matryoshka dimensions, base64 decoded, input objects with images), a batch giving each input's vector
alone, /v1/rerank and Ollama's /api/embed over plain HTTP (and the `ollama` package), and the 400s of the wrong
model kind, over-long text, token ids and bad dimensions. The vectors' values against the reference are
checked in tests/test_retrieval.cpp; here, what a client sees."""
import base64
import json
import math
import pathlib
import struct
import subprocess
import urllib.request

import ollama
import openai
import pytest

from conftest import _binary, _model_files, get_json, run_server, scaled

ROOT = pathlib.Path(__file__).resolve().parents[2]
HIDDEN = 128  # the tiny presets' hidden size: the embedding's length


def make_model(tmp_path_factory, preset: str) -> pathlib.Path:
    out = tmp_path_factory.mktemp(preset) / preset
    subprocess.run([str(_binary()), "make-test-model", "--preset", preset, "--seed", "1", "--out", str(out),
                    "--model-files", str(_model_files())], check=True, stdout=subprocess.DEVNULL, timeout=scaled(120))
    return out


@pytest.fixture(scope="module")
def embedder(tmp_path_factory):
    with run_server(model=make_model(tmp_path_factory, "tiny-embedding")) as s:
        yield s.url


@pytest.fixture(scope="module")
def reranker(tmp_path_factory):
    with run_server(model=make_model(tmp_path_factory, "tiny-reranker")) as s:
        yield s.url


@pytest.fixture(scope="module")
def client(embedder):
    return openai.OpenAI(base_url=embedder + "/v1", api_key="unused", max_retries=0, timeout=scaled(120))


def post(url: str, body) -> tuple[int, dict]:
    """(status, parsed JSON body) of a POST, errors included."""
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=scaled(120)) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"null")


def embed(embedder: str, inputs, **fields) -> list[list[float]]:
    status, body = post(embedder + "/v1/embeddings", {"input": inputs, **fields})
    assert status == 200, body
    assert [d["index"] for d in body["data"]] == list(range(len(body["data"])))
    return [d["embedding"] for d in body["data"]]


def norm(v) -> float:
    return math.sqrt(sum(x * x for x in v))


def close(a, b, tol=1e-6) -> bool:
    return len(a) == len(b) and max(abs(x - y) for x, y in zip(a, b)) <= tol


# ---------------------------------------------------------------------------------------------------------
# Embeddings through the openai package

def test_one_string(client, embedder):
    r = client.embeddings.create(model="qwen3-vl-embedding", input="A cat asleep on a sofa.")
    assert r.object == "list" and len(r.data) == 1
    assert r.data[0].object == "embedding" and r.data[0].index == 0
    v = r.data[0].embedding
    assert len(v) == HIDDEN
    assert abs(norm(v) - 1) < 1e-5
    _, health = get_json(embedder + "/health")
    assert r.model == health["model"]
    assert r.usage.prompt_tokens > 5 and r.usage.total_tokens == r.usage.prompt_tokens


def test_a_list_is_a_vector_each_in_order(client):
    texts = ["A cat asleep on a sofa.", "Quarterly revenue grew 12%.", "The train leaves at nine."]
    r = client.embeddings.create(model="qwen3-vl-embedding", input=texts)
    assert [d.index for d in r.data] == [0, 1, 2]
    vectors = [d.embedding for d in r.data]
    assert all(len(v) == HIDDEN for v in vectors)
    assert not close(vectors[0], vectors[1], 1e-3) and not close(vectors[1], vectors[2], 1e-3)
    # The usage counts every input: the list's tokens are the sum of the single inputs'.
    alone = [client.embeddings.create(model="qwen3-vl-embedding", input=t).usage.prompt_tokens for t in texts]
    assert r.usage.prompt_tokens == sum(alone)


def test_dimensions_are_the_first_values_renormalised(client):
    full = client.embeddings.create(model="qwen3-vl-embedding", input="Matryoshka").data[0].embedding
    for d in (1, 16, HIDDEN):
        v = client.embeddings.create(model="qwen3-vl-embedding", input="Matryoshka", dimensions=d).data[0].embedding
        assert len(v) == d
        assert abs(norm(v) - 1) < 1e-5
        head = full[:d]
        assert close(v, [x / norm(head) for x in head], 1e-5)


def test_base64_decodes_to_the_float_vector(client, embedder):
    status, b64 = post(embedder + "/v1/embeddings", {"input": ["one", "two"], "encoding_format": "base64"})
    assert status == 200
    floats = embed(embedder, ["one", "two"], encoding_format="float")
    for item, v in zip(b64["data"], floats):
        raw = base64.b64decode(item["embedding"])
        assert len(raw) == 4 * HIDDEN
        assert list(struct.unpack(f"<{HIDDEN}f", raw)) == v  # float32 both ways: bit for bit
    # The package asks for base64 unless told otherwise, and decodes it itself.
    by_default = client.embeddings.create(model="qwen3-vl-embedding", input=["one", "two"])
    as_float = client.embeddings.create(model="qwen3-vl-embedding", input=["one", "two"], encoding_format="float")
    assert [d.embedding for d in by_default.data] == [d.embedding for d in as_float.data] == floats


def test_input_objects_with_an_image(client, embedder, image_b64, image_data_uri):
    text_only = client.embeddings.create(model="qwen3-vl-embedding", input="a photo").data[0].embedding
    r = client.embeddings.create(model="qwen3-vl-embedding", input="replaced by extra_body",
                                 extra_body={"input": [{"text": "a photo", "image": image_data_uri}]})
    with_image = r.data[0].embedding
    assert len(with_image) == HIDDEN and abs(norm(with_image) - 1) < 1e-5
    assert not close(with_image, text_only, 1e-3)
    assert r.usage.prompt_tokens > 100  # the 640x480 photo is 300 image tokens
    # Bare base64, a list of one and OpenAI's image_url spelling are the same image.
    same = embed(embedder, [{"text": "a photo", "image": image_b64}, {"text": ["a photo"], "image": [image_data_uri]},
                            {"text": "a photo", "image_url": {"url": image_data_uri}}])
    for v in same:
        assert close(v, with_image)
    # An image alone, and an empty object (the reference's "NULL" text), are inputs too.
    image_only, empty = embed(embedder, [{"image": image_data_uri}, {}])
    assert not close(image_only, with_image, 1e-3) and len(empty) == HIDDEN


def test_instructions(embedder):
    no_own, own_default, own_dotted, own_undotted = embed(embedder, [
        "query", {"text": "query", "instruction": "Represent the user's input."},
        {"text": "query", "instruction": "Find the answer."}, {"text": "query", "instruction": "  Find the answer "}],
        instruction="Find the answer")
    # The request's instruction is that of the inputs without their own; white space is stripped and a '.'
    # appended, as the reference does.
    assert close(no_own, own_dotted) and close(own_dotted, own_undotted)
    assert not close(own_default, own_dotted, 1e-3)
    # Without any: the reference's default.
    assert close(embed(embedder, "query")[0], own_default)


def test_a_batch_gives_each_input_its_vector_alone(embedder, image_data_uri):
    inputs = ["first", {"text": "second", "image": image_data_uri}, "third " * 50, {"text": ["a", "b"]}, "first",
              {"image": image_data_uri, "instruction": "Retrieve the photo"}]
    batch = embed(embedder, inputs)
    for i, one in enumerate(inputs):
        alone = embed(embedder, one)[0]
        assert close(batch[i], alone), f"input {i}: differs alone by {max(abs(a - b) for a, b in zip(batch[i], alone))}"
    assert close(batch[0], batch[4])


# ---------------------------------------------------------------------------------------------------------
# Ollama's /api/embed

def test_ollama_embed_over_http(embedder):
    status, body = post(embedder + "/api/embed", {"model": "qwen3-vl-embedding", "input": ["one", "two"],
                                                  "truncate": True})
    assert status == 200, body
    assert body["model"] == "qwen3-vl-embedding"
    assert len(body["embeddings"]) == 2
    for got, want in zip(body["embeddings"], embed(embedder, ["one", "two"])):
        assert close(got, want)
    assert body["prompt_eval_count"] > 0 and body["total_duration"] > 0
    status, body = post(embedder + "/api/embed", {"model": "m", "input": "one", "dimensions": 8})
    assert status == 200 and len(body["embeddings"]) == 1 and len(body["embeddings"][0]) == 8


def test_ollama_package_embed(embedder):
    r = ollama.Client(host=embedder, timeout=scaled(120)).embed(model="qwen3-vl-embedding", input=["one", "two"],
                                                                 dimensions=32)
    assert len(r.embeddings) == 2 and all(len(v) == 32 for v in r.embeddings)
    assert close(list(r.embeddings[0]), embed(embedder, "one", dimensions=32)[0])
    assert r.prompt_eval_count > 0


# ---------------------------------------------------------------------------------------------------------
# Reranking over plain HTTP

DOCUMENTS = ["Paris is the capital of France.", "Berlin is the capital of Germany.", "The Eiffel Tower is in Paris.",
             "Bananas are yellow.", "France borders Spain."]


def rerank(reranker: str, **body) -> dict:
    status, r = post(reranker + "/v1/rerank", {"query": "What is the capital of France?", "documents": DOCUMENTS,
                                               **body})
    assert status == 200, r
    return r


def test_rerank_sorted_by_score(reranker):
    r = rerank(reranker)
    assert r["object"] == "list" and r["usage"]["prompt_tokens"] > 0
    results = r["results"]
    assert sorted(x["index"] for x in results) == list(range(len(DOCUMENTS)))
    scores = [x["relevance_score"] for x in results]
    assert scores == sorted(scores, reverse=True)
    assert all(0 < s < 1 for s in scores)
    assert all("document" not in x for x in results)
    # Each pair is scored on its own: a document alone scores as it does among the others.
    for x in results[:2]:
        status, one = post(reranker + "/v1/rerank", {"query": "What is the capital of France?",
                                                     "documents": [DOCUMENTS[x["index"]]]})
        assert status == 200
        assert abs(one["results"][0]["relevance_score"] - x["relevance_score"]) < 1e-6


def test_rerank_top_n_and_return_documents(reranker, image_data_uri):
    full = rerank(reranker)["results"]
    top = rerank(reranker, top_n=2, return_documents=True)["results"]
    assert [x["index"] for x in top] == [x["index"] for x in full[:2]]
    for x in top:
        assert x["document"] == {"text": DOCUMENTS[x["index"]]}
    assert len(rerank(reranker, top_n=50)["results"]) == len(DOCUMENTS)
    # Objects come back as sent; an image query and image documents are scored too.
    docs = ["a photo", {"text": "the photo", "image": image_data_uri}, {"text": "Cohere's shape"}]
    status, r = post(reranker + "/rerank", {"query": {"image": image_data_uri}, "documents": docs,
                                            "return_documents": True, "instruction": "Find the same picture."})
    assert status == 200, r
    assert sorted(x["index"] for x in r["results"]) == [0, 1, 2]
    for x in r["results"]:
        assert x["document"] == (docs[x["index"]] if isinstance(docs[x["index"]], dict) else {"text": docs[x["index"]]})


# ---------------------------------------------------------------------------------------------------------
# Refusals

def test_chat_on_the_embedding_model_is_refused(client):
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model="qwen3-vl", messages=[{"role": "user", "content": "hi"}], max_tokens=2)
    assert e.value.code == "model_not_supported"
    assert "embedding model" in e.value.message and "/v1/embeddings" in e.value.message


def test_embeddings_on_a_chat_model_are_refused(server):
    chat = openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=scaled(60))
    with pytest.raises(openai.BadRequestError) as e:
        chat.embeddings.create(model="qwen3-vl", input="hi")
    assert e.value.code == "model_not_supported"
    assert server.model in e.value.message and "chat model" in e.value.message
    status, body = post(server.url + "/api/embed", {"model": "x", "input": "hi"})
    assert status == 400 and "chat model" in body["error"]
    status, body = post(server.url + "/v1/rerank", {"query": "q", "documents": ["d"]})
    assert status == 400 and body["error"]["code"] == "model_not_supported"


def test_the_other_kind_is_refused(embedder, reranker):
    status, body = post(reranker + "/v1/embeddings", {"input": "hi"})
    assert status == 400 and body["error"]["code"] == "model_not_supported"
    assert "reranker model" in body["error"]["message"]
    status, body = post(reranker + "/api/embed", {"input": "hi"})
    assert status == 400 and "reranker model" in body["error"]
    status, body = post(embedder + "/v1/rerank", {"query": "q", "documents": ["d"]})
    assert status == 400 and body["error"]["code"] == "model_not_supported"
    status, body = post(reranker + "/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}]})
    assert status == 400 and body["error"]["code"] == "model_not_supported"


def test_over_the_context_is_refused_before_images_are_read(client, embedder, reranker):
    long = "word " * 9000  # about 9,000 tokens: over the embedding context of 8,192
    with pytest.raises(openai.BadRequestError) as e:
        client.embeddings.create(model="qwen3-vl-embedding", input=["short", long])
    assert e.value.code == "context_length_exceeded" and "input[1]" in e.value.message
    # The length is checked before any image is decoded: a broken image beside it is never read.
    status, body = post(embedder + "/v1/embeddings", {"input": [{"image": "data:image/png;base64,AAAA"}, long]})
    assert status == 400 and body["error"]["code"] == "context_length_exceeded", body
    status, body = post(embedder + "/api/embed", {"input": long, "truncate": True})
    assert status == 400 and "not truncated" in body["error"]
    status, body = post(reranker + "/v1/rerank", {"query": "q", "documents": ["d", "word " * 11000]})  # over 10,240
    assert status == 400 and body["error"]["code"] == "context_length_exceeded"
    assert "documents[1]" in body["error"]["message"]


@pytest.mark.parametrize("tokens", [[1, 2, 3], [[1, 2, 3]], [[1], [2]]])
def test_token_ids_are_refused(client, tokens):
    with pytest.raises(openai.BadRequestError) as e:
        client.embeddings.create(model="qwen3-vl-embedding", input=tokens)
    assert "token ids" in e.value.message


@pytest.mark.parametrize("dimensions", [0, -1, HIDDEN + 1, 10 ** 9])
def test_dimensions_out_of_range_are_refused(client, embedder, dimensions):
    with pytest.raises(openai.BadRequestError) as e:
        client.embeddings.create(model="qwen3-vl-embedding", input="hi", dimensions=dimensions)
    assert "dimensions" in e.value.message
    status, body = post(embedder + "/api/embed", {"input": "hi", "dimensions": dimensions})
    assert status == 400 and "dimensions" in body["error"]


@pytest.mark.parametrize("body", [
    {}, {"input": []}, {"input": 5}, {"input": ["a", None]}, {"input": {"text": 5}}, {"input": {"txt": "a"}},
    {"input": {"text": ["a"] * 65}}, {"input": ["a"] * 2049}, {"input": "a", "encoding_format": "binary"},
    {"input": "a", "dimensions": 1.5}, {"input": "a", "instruction": 5}])
def test_bad_embedding_bodies_say_which_field(embedder, body):
    status, r = post(embedder + "/v1/embeddings", body)
    assert status == 400 and r["error"]["message"], r


@pytest.mark.parametrize("body", [
    {"documents": ["a"]}, {"query": "q"}, {"query": "q", "documents": []}, {"query": "q", "documents": "a"},
    {"query": "q", "documents": ["a"], "top_n": 0}, {"query": "q", "documents": ["a"], "top_n": -1},
    {"query": "q", "documents": ["a"], "return_documents": "yes"},
    {"query": {"text": "q", "instruction": "x"}, "documents": ["a"]}, {"query": "q", "documents": ["a"] * 2049}])
def test_bad_rerank_bodies_are_refused(reranker, body):
    status, r = post(reranker + "/v1/rerank", body)
    assert status == 400 and r["error"]["message"], r


# --- qvl embed: the command line gives the server's vectors ------------------------------------------------
@pytest.fixture(scope="module")
def embedding_dir(tmp_path_factory):
    return make_model(tmp_path_factory, "tiny-embedding")


def test_qvl_embed_gives_the_servers_vectors(embedding_dir, embedder, tmp_path):
    image = ROOT / "tests" / "data" / "images" / "png_rgb8_256x256.png"
    lines = tmp_path / "inputs.jsonl"
    lines.write_text(json.dumps("a red bicycle") + "\n" +
                     json.dumps({"text": "a caption", "image": str(image), "instruction": "Find pictures"}) + "\n")
    run = subprocess.run([str(_binary()), "embed", "--model", str(embedding_dir), "--input-file", str(lines),
                          "--dimensions", "64", "--threads", "1"], capture_output=True, text=True, timeout=scaled(120))
    assert run.returncode == 0, run.stderr
    assert "embed: 2 / 2 inputs" in run.stderr
    got = [json.loads(line) for line in run.stdout.splitlines()]
    assert [g["index"] for g in got] == [0, 1]
    image_uri = "data:image/png;base64," + base64.b64encode(image.read_bytes()).decode()
    want = embed(embedder, ["a red bicycle", {"text": "a caption", "image": image_uri, "instruction": "Find pictures"}],
                 dimensions=64)
    for g, w in zip(got, want):
        assert close(g["embedding"], w, 1e-6)
    # A folder of images to a float32 .npy matrix.
    folder = tmp_path / "photos"
    folder.mkdir()
    for name in ("png_rgb8_256x256.png", "jpeg_progressive_256x256.jpg"):
        (folder / name).write_bytes((ROOT / "tests" / "data" / "images" / name).read_bytes())
    out = tmp_path / "vectors.npy"
    run = subprocess.run([str(_binary()), "embed", "--model", str(embedding_dir), "--images-dir", str(folder),
                          "--output", str(out), "--threads", "1"], capture_output=True, text=True, timeout=scaled(120))
    assert run.returncode == 0, run.stderr
    data = out.read_bytes()
    header_len = int.from_bytes(data[8:10], "little")
    header = data[10:10 + header_len].decode()
    assert "'descr': '<f4'" in header and "'shape':(2,128)" in header.replace(' ', ''), header
    matrix = struct.unpack(f"<{2 * HIDDEN}f", data[10 + header_len:])
    first = embed(embedder, [{"image": "data:image/jpeg;base64," +
                               base64.b64encode((folder / "jpeg_progressive_256x256.jpg").read_bytes()).decode()}])[0]
    assert close(list(matrix[:HIDDEN]), first, 1e-6)  # sorted by name: the JPEG first


def test_run_and_embed_refuse_the_wrong_kind(embedding_dir):
    run = subprocess.run([str(_binary()), "run", "--model", str(embedding_dir), "-p", "hi"], capture_output=True,
                         text=True, timeout=scaled(120))
    assert run.returncode != 0 and "embedding model" in run.stderr and "qvl embed" in run.stderr, run.stderr
    run = subprocess.run([str(_binary()), "embed", "--model", str(embedding_dir)], capture_output=True, text=True,
                         timeout=scaled(60))
    assert run.returncode != 0 and "nothing to embed" in run.stderr, run.stderr
    for bad in ("0", "-1", str(HIDDEN + 1)):  # 1 to the hidden size, as the API takes
        run = subprocess.run([str(_binary()), "embed", "--model", str(embedding_dir), "--dimensions", bad, "hi"],
                             capture_output=True, text=True, timeout=scaled(120))
        assert run.returncode == 2 and f"--dimensions {bad}: expected 1 to {HIDDEN}" in run.stderr, run.stderr


def test_embed_checks_images_before_the_model_loads(embedding_dir, tmp_path):
    folder = tmp_path / "imgs"
    folder.mkdir()
    (folder / "a.png").write_bytes((ROOT / "tests" / "data" / "images" / "png_rgb8_256x256.png").read_bytes())
    (folder / "b.jpg").write_text("a text file with an image's name")
    run = subprocess.run([str(_binary()), "embed", "--model", str(embedding_dir), "--images-dir", str(folder)],
                         capture_output=True, text=True, timeout=scaled(60))
    assert run.returncode == 2 and "not an image" in run.stderr and "loading" not in run.stderr, run.stderr
    assert run.stderr.count(str(folder / "b.jpg")) == 1, run.stderr  # the path once, not twice
    run = subprocess.run([str(_binary()), "embed", "--model", str(embedding_dir), "--image", str(folder / "a.png"),
                          str(folder / "b.jpg")], capture_output=True, text=True, timeout=scaled(60))
    assert run.returncode == 2 and "--image: " + str(folder / "b.jpg") + ": not an image" in run.stderr, run.stderr
