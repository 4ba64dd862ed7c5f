// PDF documents through the server's entry points: OpenAI chat `file` parts, Responses `input_file`, Ollama
// images that are PDFs and the page preview endpoint (`qvl run --file` and `qvl chat /file`:
// test_cli_documents.cpp); the prompt each makes
// against the reference's (tests/data/document_golden.json), the page cache on a follow-up, and the refusals:
// bad selections, the context (before any page is rendered), damaged, encrypted and hostile files (422, the
// server carries on).
#include <fstream>

#include "test_server_fixture.h"

namespace qvl {
namespace {

using test::Reply;
using test::ServerTest;
using json = nlohmann::ordered_json;
using ServerDocuments = ServerTest;

std::string pdf_data_uri(const std::string& name) {
  auto bytes = read_file_bytes(test::data_dir() + "/pdf/" + name);
  EXPECT_TRUE(bytes.ok()) << name;
  return "data:application/pdf;base64," + (bytes.ok() ? server::base64_encode(bytes->data(), bytes->size()) : "");
}

nlohmann::json doc_golden_case(const std::string& file) {
  std::ifstream f(test::data_dir() + "/document_golden.json");
  const nlohmann::json g = nlohmann::json::parse(f);
  for (const auto& c : g["cases"])
    if (c["file"] == file) return c;
  ADD_FAILURE() << "no golden case for " << file;
  return {};
}

json doc_file_part(const std::string& name, json pages = nullptr, json extra = json::object()) {
  json file{{"filename", name}, {"file_data", pdf_data_uri(name)}};
  if (!pages.is_null()) file["pages"] = pages;
  json part{{"type", "file"}, {"file", file}};
  for (auto it = extra.begin(); it != extra.end(); ++it) part[it.key()] = it.value();
  return part;
}

json doc_chat_body(json parts) {
  return json{{"messages", json::array({json{{"role", "user"}, {"content", parts}}})}, {"max_tokens", 2}, {"temperature", 0}};
}

// The golden case three_a4.pdf pages 1 and 3 at max_pixels 200,704: the same prompt as the reference's, through
// the chat API; the follow-up renders and encodes nothing again.
TEST_F(ServerDocuments, ChatFilePartMakesTheReferencePrompt) {
  start(test::test_options());
  const nlohmann::json golden = doc_golden_case("three_a4.pdf");
  const json body = doc_chat_body(json::array({doc_file_part("three_a4.pdf", json::array({1, 3}), json{{"max_pixels", 200704}}),
                                           json{{"type", "text"}, {"text", golden["question"]}}}));
  const Reply r = post("/v1/chat/completions", body);
  ASSERT_EQ(r.status, 200) << r.body;
  const json j = r.json_body();
  EXPECT_EQ(j["usage"]["prompt_tokens"].get<size_t>(), golden["input_ids"].size());
  EXPECT_EQ(j["timings"]["image_tokens"].get<int>(),
            2 * golden["image_grid_thw"][0][1].get<int>() * golden["image_grid_thw"][0][2].get<int>() / 4);
  const Reply before = get("/metrics");
  EXPECT_EQ(test::metric(before.body, "qvl_document_pages_rendered_total"), 2);
  // The same document again: its pages from the page cache, their encodings from the image cache.
  const Reply again = post("/v1/chat/completions", body);
  ASSERT_EQ(again.status, 200) << again.body;
  const Reply after = get("/metrics");
  EXPECT_EQ(test::metric(after.body, "qvl_document_pages_rendered_total"), 2);
  EXPECT_EQ(test::metric(after.body, "qvl_page_cache_hits_total"), 2);
  EXPECT_EQ(test::metric(after.body, "qvl_images_encoded_total"), test::metric(before.body, "qvl_images_encoded_total"));
  // A selection string and bare base64 are the same request.
  json text_pages = body;
  text_pages["messages"][0]["content"][0]["file"]["pages"] = "1,3";
  std::string b64 = text_pages["messages"][0]["content"][0]["file"]["file_data"];
  text_pages["messages"][0]["content"][0]["file"]["file_data"] = b64.substr(b64.find(',') + 1);
  const Reply same = post("/v1/chat/completions", text_pages);
  ASSERT_EQ(same.status, 200) << same.body;
  EXPECT_EQ(same.json_body()["usage"]["prompt_tokens"], j["usage"]["prompt_tokens"]);
}

TEST_F(ServerDocuments, ResponsesInputFileAndOllamaImagesThatArePdfs) {
  server::ServerOptions o = test::test_options();
  o.max_pixels = 200704;  // server-wide: the pages of an Ollama request (which has no per-image bounds) fit
  start(o);
  const nlohmann::json golden = doc_golden_case("three_a4.pdf");
  const json input = json::array({json{{"role", "user"}, {"content", json::array({
      json{{"type", "input_file"}, {"filename", "three_a4.pdf"}, {"file_data", pdf_data_uri("three_a4.pdf")}, {"pages", "1,3"}},
      json{{"type", "input_text"}, {"text", golden["question"]}}})}}});
  const Reply r = post("/v1/responses", json{{"input", input}, {"max_output_tokens", 2}, {"temperature", 0}});
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.json_body()["usage"]["input_tokens"].get<size_t>(), golden["input_ids"].size());
  // Ollama: a PDF among the images is every page of it.
  auto bytes = read_file_bytes(test::data_dir() + "/pdf/three_a4.pdf");
  ASSERT_TRUE(bytes.ok());
  const json msg{{"role", "user"}, {"content", "Summarise."}, {"images", json::array({server::base64_encode(bytes->data(), bytes->size())})}};
  const Reply ol = post("/api/chat", json{{"model", "tiny"}, {"messages", json::array({msg})}, {"stream", false},
                                          {"options", json{{"num_predict", 2}, {"temperature", 0}}}});
  ASSERT_EQ(ol.status, 200) << ol.body;
  EXPECT_EQ(test::metric(get("/metrics").body, "qvl_document_pages_rendered_total"), 2 + 1);  // page 2 was new
  // Responses' file_id and a URL the server does not fetch are refused.
  const json by_id = json::array({json{{"role", "user"}, {"content", json::array({json{{"type", "input_file"}, {"file_id", "file-1"}}})}}});
  const Reply id = post("/v1/responses", json{{"input", by_id}});
  EXPECT_EQ(id.status, 400);
  EXPECT_NE(id.body.find("file_id"), std::string::npos) << id.body;
}

TEST_F(ServerDocuments, RefusalsAreJsonAndNameThePart) {
  start(test::test_options());
  auto ask = [&](json part) { return post("/v1/chat/completions", doc_chat_body(json::array({part, json{{"type", "text"}, {"text", "?"}}}))); };
  const std::string where = "messages[0].content[0]";
  // A page outside the document, a bad selection.
  const Reply past = ask(doc_file_part("three_a4.pdf", "9"));
  EXPECT_EQ(past.status, 400);
  EXPECT_NE(past.body.find("the document has 3 pages"), std::string::npos) << past.body;
  EXPECT_NE(past.body.find(where), std::string::npos) << past.body;
  EXPECT_EQ(ask(doc_file_part("three_a4.pdf", json::array({0}))).status, 400);
  EXPECT_EQ(ask(doc_file_part("three_a4.pdf", "2-1")).status, 400);
  // Over the context (1,024 tokens here; an A4 page at 150 DPI takes about 2,100): refused before any page is
  // rendered, saying how many fit.
  const double rendered = test::metric(get("/metrics").body, "qvl_document_pages_rendered_total");
  const Reply big = ask(doc_file_part("pages100.pdf", "1-20", json{{"max_pixels", 200704}}));
  EXPECT_EQ(big.status, 400);
  EXPECT_NE(big.body.find("5 pages fit"), std::string::npos) << big.body;  // 5 x 176 <= 1,024 < 6 x 176
  EXPECT_EQ(test::metric(get("/metrics").body, "qvl_document_pages_rendered_total"), rendered);
  // Not a PDF; no file data; a file_id.
  json png = doc_file_part("text.pdf");
  png["file"]["file_data"] = test::data_uri("png_rgb8_1x1.png");
  const Reply not_pdf = ask(png);
  EXPECT_EQ(not_pdf.status, 400);
  EXPECT_NE(not_pdf.body.find("not a PDF"), std::string::npos) << not_pdf.body;
  EXPECT_EQ(ask(json{{"type", "file"}, {"file", json::object()}}).status, 400);
  EXPECT_EQ(ask(json{{"type", "file"}, {"file", json{{"file_id", "file-abc"}}}}).status, 400);
  // More than 16 documents; more pages than --pdf-max-pages across documents (the limit named as it is).
  json many = json::array();
  for (int k = 0; k < 17; ++k) many.push_back(doc_file_part("text.pdf"));
  const Reply seventeen = post("/v1/chat/completions", doc_chat_body(many));
  EXPECT_EQ(seventeen.status, 400);
  EXPECT_NE(seventeen.body.find("at most 16"), std::string::npos) << seventeen.body;
  json two_docs = json::array({doc_file_part("pages100.pdf", "1-10", json{{"detail", "low"}}),
                               doc_file_part("pages100.pdf", "11-70", json{{"detail", "low"}})});
  const Reply too_many_pages = post("/v1/chat/completions", doc_chat_body(two_docs));
  EXPECT_EQ(too_many_pages.status, 400);
  EXPECT_NE(too_many_pages.body.find("select 70 pages, over the limit of 64"), std::string::npos) << too_many_pages.body;
  // /apply-template cannot show a document's pages without reading it: refused, saying what a chat request does.
  const Reply tmpl = post("/apply-template", doc_chat_body(json::array({doc_file_part("text.pdf")})));
  EXPECT_EQ(tmpl.status, 400);
  EXPECT_NE(tmpl.body.find("Page n: "), std::string::npos) << tmpl.body;
  // The Responses API names its own fields.
  const json input = json::array({json{{"role", "user"}, {"content", json::array({json{{"type", "input_file"},
      {"file_data", pdf_data_uri("text.pdf")}, {"pages", "9"}}})}}});
  const Reply resp = post("/v1/responses", json{{"input", input}});
  EXPECT_EQ(resp.status, 400);
  EXPECT_NE(resp.body.find("input[0].content[0]"), std::string::npos) << resp.body;
  EXPECT_EQ(resp.body.find("messages["), std::string::npos) << resp.body;
  // A filename is a file under --media-dir: none is set here.
  const Reply path = ask(json{{"type", "file"}, {"file", json{{"filename", "/etc/passwd"}}}});
  EXPECT_EQ(path.status, 400) << path.body;
  EXPECT_NE(path.body.find("--media-dir"), std::string::npos) << path.body;
}

TEST_F(ServerDocuments, HostileDocumentsAre422AndTheServerCarriesOn) {
  server::ServerOptions o = test::test_options();
  o.documents.pdf.render_timeout_s = 2;
  start(o);
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / ("qvl-hostile-" + std::to_string(getpid()));
  const std::string cmd = "python3 '" + test::data_dir() + "/../pdf/pdfgen.py' --hostile '" + dir.string() + "'";
  ASSERT_EQ(std::system(cmd.c_str()), 0);
  auto part = [&](const char* name) {
    auto b = read_file_bytes((dir / name).string());
    EXPECT_TRUE(b.ok());
    return json{{"type", "file"}, {"file", json{{"filename", name}, {"file_data", "data:application/pdf;base64," +
                                                                        server::base64_encode(b->data(), b->size())}}},
                {"max_pixels", 200704}};
  };
  for (const char* name : {"encrypted_empty_password.pdf", "encrypted_password.pdf", "form_bomb.pdf", "decompression_bomb.pdf", "damaged.pdf",
                           "truncated.pdf", "garbage.pdf", "recursive.pdf"}) {
    SCOPED_TRACE(name);
    const Reply r = post("/v1/chat/completions", doc_chat_body(json::array({part(name), json{{"type", "text"}, {"text", "?"}}})));
    if (std::string(name).rfind("encrypted", 0) == 0) {
      EXPECT_EQ(r.status, 422) << r.body;
      EXPECT_NE(r.body.find("encrypted"), std::string::npos) << r.body;
    } else if (std::string(name).find("bomb") != std::string::npos) {
      EXPECT_EQ(r.status, 422) << r.body;
      EXPECT_NE(r.body.find("page 1"), std::string::npos) << r.body;
    } else {
      // Poppler may rebuild what is left of a damaged file: an answer then, else a 4xx; never a crash.
      EXPECT_TRUE(r.status == 200 || r.status == 400 || r.status == 422) << r.status << " " << r.body;
    }
    if (r.status != 200) {
      EXPECT_TRUE(r.json_body()["error"].is_object()) << r.body;
    }
    EXPECT_EQ(get("/health").status, 200);
  }
  std::filesystem::remove_all(dir);
  // Still answering.
  const Reply ok = post("/v1/chat/completions", doc_chat_body(json::array({doc_file_part("text.pdf", nullptr, json{{"max_pixels", 100000}}),
                                                                        json{{"type", "text"}, {"text", "?"}}})));
  EXPECT_EQ(ok.status, 200) << ok.body;
}

TEST_F(ServerDocuments, PagePreviews) {
  start(test::test_options());
  const Reply r = post("/v1/documents/pages", json{{"file_data", pdf_data_uri("mixed.pdf")}, {"thumbnail_size", 64}});
  ASSERT_EQ(r.status, 200) << r.body;
  const json j = r.json_body();
  EXPECT_EQ(j["pages"], 5);
  EXPECT_EQ(j["thumbnails_truncated"], false);
  ASSERT_EQ(j["thumbnails"].size(), 5u);
  for (const json& t : j["thumbnails"]) {
    const std::string url = t["url"];
    ASSERT_EQ(url.rfind("data:image/jpeg;base64,", 0), 0u);
    server::ImagePolicy policy;
    auto img = server::load_request_image(url, policy, "thumbnail");
    ASSERT_TRUE(img.ok()) << img.status().message();
    EXPECT_EQ(img->width, t["width"].get<int>());
    EXPECT_EQ(std::max(img->width, img->height), 64);
  }
  const Reply many = post("/v1/documents/pages", json{{"file_data", pdf_data_uri("pages100.pdf")}, {"thumbnail_size", 32}});
  ASSERT_EQ(many.status, 200);
  EXPECT_EQ(many.json_body()["thumbnails"].size(), 100u);
  EXPECT_EQ(post("/v1/documents/pages", json{{"file_data", "data:application/pdf;base64,JVBERi0xLjQKZ2FyYmFnZQ=="}}).status, 422);
  EXPECT_EQ(post("/v1/documents/pages", json{{"thumbnail_size", 64}}).status, 400);
  EXPECT_EQ(post("/v1/documents/pages", json{{"file_data", pdf_data_uri("text.pdf")}, {"thumbnail_size", 257}}).status, 400);
}

}  // namespace
}  // namespace qvl
