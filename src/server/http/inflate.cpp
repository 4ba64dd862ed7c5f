// Undoes a request body's Content-Encoding (gzip or deflate) without ever holding more than a limit.
#include "server/http/inflate.h"

#include <zlib.h>

namespace qvl::server::http {

InflateResult inflate_body(std::string_view in, size_t limit, std::string& out) {
  out.clear();
  z_stream z{};
  // 15 + 32: a 32 KiB window, with the gzip or zlib header detected automatically.
  if (inflateInit2(&z, 15 + 32) != Z_OK) return InflateResult::kCorrupt;
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data()));
  z.avail_in = static_cast<uInt>(in.size());
  char buf[64 * 1024];
  InflateResult result = InflateResult::kCorrupt;
  for (;;) {
    z.next_out = reinterpret_cast<Bytef*>(buf);
    z.avail_out = sizeof buf;
    const int rc = inflate(&z, Z_NO_FLUSH);
    const size_t n = sizeof buf - z.avail_out;
    if (out.size() + n > limit) {
      result = InflateResult::kTooLarge;
      break;
    }
    out.append(buf, n);
    if (rc == Z_STREAM_END) {
      result = z.avail_in == 0 ? InflateResult::kOk : InflateResult::kCorrupt;  // trailing bytes: not one stream
      break;
    }
    if (rc != Z_OK || (n == 0 && z.avail_in == 0)) break;  // an error, or a truncated stream
  }
  inflateEnd(&z);
  if (result != InflateResult::kOk) out.clear();
  return result;
}

}  // namespace qvl::server::http
