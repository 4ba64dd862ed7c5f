// WebP (libwebp's animation decoder, as Pillow's _webp.WebPAnimDecoder), as io/image.cpp describes.
#include "io/image_codec.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include <webp/decode.h>
#include <webp/demux.h>

namespace qvl {
namespace codec {

Result<Decoded> decode_webp(std::span<const uint8_t> bytes, const ImageDecodeLimits& limits) {
  Decoded out;
  WebPBitstreamFeatures features;
  const VP8StatusCode st = WebPGetFeatures(bytes.data(), bytes.size(), &features);
  if (st == VP8_STATUS_NOT_ENOUGH_DATA)
    return Status::Error("WebP: truncated data: the file ends inside the header");
  if (st != VP8_STATUS_OK)
    return Status::Error("WebP: corrupt or unsupported header (libwebp status " + std::to_string(st) + ")");
  // The bitstream's size is checked here, the canvas's (which admit() sees, once) below.
  ImageDecodeLimits header_limits = limits;
  header_limits.admit = nullptr;
  QVL_RETURN_IF_ERROR(check_size("WebP", static_cast<uint32_t>(features.width),
                                 static_cast<uint32_t>(features.height), header_limits).status());

  WebPData data{bytes.data(), bytes.size()};
  // EXIF and XMP chunks as Pillow reads them.
  auto read_metadata = [&out](const WebPDemuxer* demux) {
    WebPChunkIterator it;
    if (WebPDemuxGetChunk(demux, "EXIF", 1, &it)) {
      if (it.chunk.size) {
        out.meta.has_exif = true;
        out.meta.exif.assign(it.chunk.bytes, it.chunk.bytes + it.chunk.size);
      }
      WebPDemuxReleaseChunkIterator(&it);
    }
    if (WebPDemuxGetChunk(demux, "XMP ", 1, &it)) {
      if (it.chunk.size) {
        out.meta.has_xmp = true;
        out.meta.xmp.assign(reinterpret_cast<const char*>(it.chunk.bytes), it.chunk.size);
      }
      WebPDemuxReleaseChunkIterator(&it);
    }
  };
  const char* kUnparsable = "WebP: corrupt or truncated data: libwebp could not parse the file (hint: the file may be cut "
                            "short or damaged)";
  const char* kUndecodable = "WebP: corrupt or truncated data: the first frame could not be decoded";

  // A still image: the animation decoder would decode it onto a zeroed RGBA canvas of its own size and
  // copy nothing else there (one key frame, no blending), so its RGB is what WebPDecodeRGB writes; that
  // goes straight into the image, without the 4-byte-a-pixel canvas.
  if (!features.has_animation) {
    WebPDemuxer* demux = WebPDemux(&data);
    if (!demux) return Status::Error(kUnparsable);
    struct DemuxDelete {
      WebPDemuxer* d;
      ~DemuxDelete() { WebPDemuxDelete(d); }
    } demux_delete{demux};
    const uint32_t cw = WebPDemuxGetI(demux, WEBP_FF_CANVAS_WIDTH), ch = WebPDemuxGetI(demux, WEBP_FF_CANVAS_HEIGHT);
    if (cw != static_cast<uint32_t>(features.width) || ch != static_cast<uint32_t>(features.height))
      return Status::Error("WebP: corrupt data: canvas " + dims(cw, ch) + " for an image of " +
                           dims(static_cast<uint32_t>(features.width), static_cast<uint32_t>(features.height)));
    QVL_RETURN_IF_ERROR(check_size("WebP", cw, ch, limits).status());
    read_metadata(demux);
    const int w = features.width, h = features.height;
    out.image = new_image(w, h);
    if (!WebPDecodeRGBInto(bytes.data(), bytes.size(), out.image.pixels.data(), out.image.pixels.size(), 3 * w))
      return Status::Error(kUndecodable);
    return out;
  }

  WebPAnimDecoderOptions opts;
  if (!WebPAnimDecoderOptionsInit(&opts)) return Status::Error("WebP: libwebp version mismatch");
  opts.color_mode = MODE_RGBA;
  opts.use_threads = 0;
  WebPAnimDecoder* dec = WebPAnimDecoderNew(&data, &opts);
  if (!dec) return Status::Error(kUnparsable);
  struct Destroy {
    WebPAnimDecoder* d;
    ~Destroy() { WebPAnimDecoderDelete(d); }
  } destroy{dec};
  WebPAnimInfo info;
  if (!WebPAnimDecoderGetInfo(dec, &info)) return Status::Error("WebP: corrupt data: no image information");
  QVL_RETURN_IF_ERROR(check_size("WebP", info.canvas_width, info.canvas_height, limits).status());
  read_metadata(WebPAnimDecoderGetDemuxer(dec));

  uint8_t* rgba = nullptr;
  int timestamp = 0;
  if (!WebPAnimDecoderGetNext(dec, &rgba, &timestamp) || !rgba) return Status::Error(kUndecodable);
  const int w = static_cast<int>(info.canvas_width), h = static_cast<int>(info.canvas_height);
  out.image = new_image(w, h);
  const size_t n = static_cast<size_t>(w) * h;
  uint8_t* o = out.image.pixels.data();
  for (size_t i = 0; i < n; ++i) {
    o[3 * i] = rgba[4 * i];
    o[3 * i + 1] = rgba[4 * i + 1];
    o[3 * i + 2] = rgba[4 * i + 2];
  }
  return out;
}

}  // namespace codec
}  // namespace qvl
