// Video files to RGB frames: FFmpeg's demuxers and decoders fed from memory (with every nested open refused
// and the demuxers and decoders limited to lists of known video formats), libswscale for the RGB24
// conversion PyAV's to_ndarray(format="rgb24") does, libwebp for animated WebP.
#include "io/video.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include <webp/demux.h>

#ifdef QVL_WITH_VIDEO
extern "C" {
#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
#include <libavutil/display.h>
#include <libavutil/error.h>
#include <libswscale/swscale.h>
}
#endif

namespace qvl {

ImageRGB rotate_clockwise(const ImageRGB& src, int degrees) {
  degrees = ((degrees % 360) + 360) % 360;
  if (degrees == 0) return src;
  ImageRGB out;
  const int W = src.width, H = src.height;
  const bool swap = degrees == 90 || degrees == 270;
  out.width = swap ? H : W;
  out.height = swap ? W : H;
  out.pixels.resize(src.pixels.size());
  for (int y = 0; y < out.height; ++y)
    for (int x = 0; x < out.width; ++x) {
      int sx, sy;  // the source pixel shown at (x, y)
      if (degrees == 90) {
        sx = y;
        sy = H - 1 - x;
      } else if (degrees == 180) {
        sx = W - 1 - x;
        sy = H - 1 - y;
      } else {
        sx = W - 1 - y;
        sy = x;
      }
      std::memcpy(&out.pixels[(static_cast<size_t>(y) * out.width + x) * 3],
                  &src.pixels[(static_cast<size_t>(sy) * W + sx) * 3], 3);
    }
  return out;
}

bool looks_like_video(std::span<const uint8_t> b) {
  auto at = [&](size_t off, const char* s) {
    const size_t n = std::strlen(s);
    return b.size() >= off + n && std::memcmp(b.data() + off, s, n) == 0;
  };
  if (at(4, "ftyp")) {
    // HEIF/AVIF still images share the box; their brands are not videos.
    static const char* kStill[] = {"heic", "heix", "mif1", "avif", "avis", "msf1"};
    for (const char* brand : kStill)
      if (at(8, brand)) return false;
    return true;
  }
  if (b.size() >= 4 && b[0] == 0x1A && b[1] == 0x45 && b[2] == 0xDF && b[3] == 0xA3) return true;  // EBML
  if (at(0, "RIFF") && at(8, "AVI ")) return true;
  // MPEG-TS packets: three sync bytes 188 apart ('G', so not a GIF).
  if (b.size() >= 377 && b[0] == 0x47 && b[188] == 0x47 && b[376] == 0x47 && !at(0, "GIF8")) return true;
  // An animated WebP: VP8X with its animation flag, and two ANMF frame chunks among the first chunks.
  if (at(0, "RIFF") && at(8, "WEBPVP8X") && b.size() > 20 && (b[20] & 0x02)) {
    int frames = 0;
    size_t off = 12;
    for (int chunk = 0; chunk < 64 && off + 8 <= b.size() && frames < 2; ++chunk) {
      const uint32_t len = static_cast<uint32_t>(b[off + 4]) | (static_cast<uint32_t>(b[off + 5]) << 8) |
                           (static_cast<uint32_t>(b[off + 6]) << 16) | (static_cast<uint32_t>(b[off + 7]) << 24);
      frames += std::memcmp(b.data() + off, "ANMF", 4) == 0;
      off += 8 + static_cast<size_t>(len) + (len & 1);
    }
    return frames >= 2;
  }
  return false;
}

namespace {

Status check_info(const VideoInfo& info, const VideoDecodeLimits& limits) {
  const int64_t px = static_cast<int64_t>(info.stored_width) * info.stored_height;
  if (info.stored_width <= 0 || info.stored_height <= 0)
    return Status::Error("video has no frame size (" + std::to_string(info.stored_width) + "x" +
                         std::to_string(info.stored_height) + ")");
  if (px > limits.max_frame_pixels)
    return Status::Error("video frames are " + std::to_string(info.stored_width) + "x" +
                         std::to_string(info.stored_height) + " = " + std::to_string(px) + " pixels, over the limit of " +
                         std::to_string(limits.max_frame_pixels));
  if (info.total_frames <= 0) return Status::Error("video has no frames");
  if (info.total_frames > limits.max_total_frames)
    return Status::Error("video has " + std::to_string(info.total_frames) + " frames, over the limit of " +
                         std::to_string(limits.max_total_frames));
  if (!(info.fps > 0) || !std::isfinite(info.fps)) return Status::Error("video has no frame rate");
  if (info.duration_s > limits.max_duration_s) {
    char buf[128];
    std::snprintf(buf, sizeof buf, "video lasts %.1f s, over the limit of %.0f s", info.duration_s,
                  limits.max_duration_s);
    return Status::Error(buf);
  }
  return Status::Ok();
}

Result<std::vector<int64_t>> choose(const VideoInfo& info, const VideoDecodeLimits& limits) {
  std::vector<int64_t> idx;
  if (limits.select) {
    QVL_ASSIGN_OR_RETURN(idx, limits.select(info));
  } else {
    idx.resize(static_cast<size_t>(info.total_frames));
    for (size_t i = 0; i < idx.size(); ++i) idx[i] = static_cast<int64_t>(i);
  }
  for (size_t i = 0; i < idx.size(); ++i)
    if (idx[i] < 0 || idx[i] >= info.total_frames || (i > 0 && idx[i] < idx[i - 1]))
      return Status::Error("frame selection is not ascending within the video's " +
                           std::to_string(info.total_frames) + " frames");
  if (idx.empty()) return Status::Error("no frames selected from the video");
  // Every frame up to the last one kept is decoded.
  const int64_t frame_px = static_cast<int64_t>(info.stored_width) * info.stored_height;
  if (frame_px > 0 && idx.back() + 1 > limits.max_decoded_pixels / frame_px)
    return Status::Error("decoding the video's " + std::to_string(idx.back() + 1) + " frames of " +
                         std::to_string(info.stored_width) + "x" + std::to_string(info.stored_height) +
                         " is over the limit of " + std::to_string(limits.max_decoded_pixels) +
                         " decoded pixels; send a shorter or smaller clip");
  return idx;
}

// Hands kept frames to on_frame, or keeps them. `k` counts kept frames; duplicate indices repeat a frame.
struct Sink {
  const VideoDecodeLimits& limits;
  DecodedVideo& out;
  size_t next = 0;  // position in out.indices
  // Offers frame number i (already RGB and rotated); returns an error from on_frame.
  Status offer(int64_t i, ImageRGB&& frame) {
    Status st = Status::Ok();
    while (next < out.indices.size() && out.indices[next] == i) {
      const bool last_use = next + 1 >= out.indices.size() || out.indices[next + 1] != i;
      ImageRGB f;
      if (last_use) f = std::move(frame);
      else f = frame;
      if (limits.on_frame) {
        st = limits.on_frame(next, std::move(f));
        if (!st.ok()) return st;
      } else {
        out.frames.push_back(std::move(f));
      }
      ++next;
    }
    return st;
  }
  bool done() const { return next >= out.indices.size(); }
};

// Animated WebP through libwebp's demuxer (FFmpeg 5.1 cannot decode animation), in RGBA as Pillow reads it.
Result<DecodedVideo> decode_webp_animation(std::span<const uint8_t> bytes, const VideoDecodeLimits& limits,
                                           bool probe_only) {
  WebPData data{bytes.data(), bytes.size()};
  // The canvas size from the demuxer first: the animation decoder allocates two canvases at once.
  {
    std::unique_ptr<WebPDemuxer, void (*)(WebPDemuxer*)> demux(WebPDemux(&data), WebPDemuxDelete);
    if (!demux) return Status::Error("corrupt or truncated WebP");
    const int64_t w = WebPDemuxGetI(demux.get(), WEBP_FF_CANVAS_WIDTH), h = WebPDemuxGetI(demux.get(), WEBP_FF_CANVAS_HEIGHT);
    if (w <= 0 || h <= 0 || w * h > limits.max_frame_pixels)
      return Status::Error("animated WebP canvas is " + std::to_string(w) + "x" + std::to_string(h) +
                           ", over the limit of " + std::to_string(limits.max_frame_pixels) + " pixels");
  }
  WebPAnimDecoderOptions opt;
  if (!WebPAnimDecoderOptionsInit(&opt)) return Status::Error("libwebp: version mismatch");
  opt.color_mode = MODE_RGBA;
  opt.use_threads = 0;
  std::unique_ptr<WebPAnimDecoder, void (*)(WebPAnimDecoder*)> dec(WebPAnimDecoderNew(&data, &opt),
                                                                   WebPAnimDecoderDelete);
  if (!dec) return Status::Error("corrupt or truncated animated WebP");
  WebPAnimInfo ai;
  if (!WebPAnimDecoderGetInfo(dec.get(), &ai)) return Status::Error("corrupt animated WebP");
  DecodedVideo out;
  VideoInfo& info = out.info;
  info.container = "webp";
  info.codec = "webp";
  info.stored_width = info.width = static_cast<int>(ai.canvas_width);
  info.stored_height = info.height = static_cast<int>(ai.canvas_height);
  info.total_frames = ai.frame_count;
  // The frame rate: frames over the animation's length, from the demuxer's frame durations.
  {
    std::unique_ptr<WebPDemuxer, void (*)(WebPDemuxer*)> demux(WebPDemux(&data), WebPDemuxDelete);
    if (!demux) return Status::Error("corrupt animated WebP");
    WebPIterator it;
    int64_t total_ms = 0;
    if (WebPDemuxGetFrame(demux.get(), 1, &it)) {
      do total_ms += std::max(it.duration, 0);
      while (WebPDemuxNextFrame(&it));
      WebPDemuxReleaseIterator(&it);
    }
    info.duration_s = static_cast<double>(total_ms) / 1000.0;
    info.fps = total_ms > 0 ? static_cast<double>(info.total_frames) / info.duration_s : 0.0;
  }
  QVL_RETURN_IF_ERROR(check_info(info, limits));
  if (probe_only) return out;
  QVL_ASSIGN_OR_RETURN(out.indices, choose(info, limits));
  Sink sink{limits, out};
  for (int64_t i = 0; !sink.done(); ++i) {
    if (limits.keep_going && !limits.keep_going()) return Status::Error("video decoding stopped (deadline or client gone)");
    uint8_t* rgba = nullptr;
    int ts = 0;
    if (!WebPAnimDecoderHasMoreFrames(dec.get()) || !WebPAnimDecoderGetNext(dec.get(), &rgba, &ts))
      return Status::Error("corrupt or truncated animated WebP: frame " + std::to_string(i) + " of " +
                           std::to_string(info.total_frames) + " cannot be decoded");
    const bool wanted = std::binary_search(out.indices.begin() + static_cast<std::ptrdiff_t>(sink.next),
                                           out.indices.end(), i);
    if (!wanted) continue;
    ImageRGB f;
    f.width = info.width;
    f.height = info.height;
    const size_t n = static_cast<size_t>(f.width) * f.height;
    f.pixels.resize(n * 3);
    for (size_t p = 0; p < n; ++p) std::memcpy(&f.pixels[p * 3], rgba + p * 4, 3);
    QVL_RETURN_IF_ERROR(sink.offer(i, std::move(f)));
  }
  return out;
}

#ifdef QVL_WITH_VIDEO

std::string av_error(int err) {
  char buf[AV_ERROR_MAX_STRING_SIZE] = {0};
  av_strerror(err, buf, sizeof buf);
  return buf;
}

// The demuxers and decoders a request may reach: the video formats people send, nothing that opens other
// files (playlists, concat lists, image sequences) or reads devices.
constexpr const char* kFormats = "mov,mp4,m4a,3gp,3g2,mj2,matroska,webm,avi,mpegts,gif,ogg,flv";
constexpr const char* kDecoders =
    "h264,hevc,vp8,vp9,av1,libdav1d,mpeg4,mpeg2video,mpeg1video,mjpeg,gif,theora,h263,msmpeg4v3,png,prores,"
    "libvpx,libvpx-vp9";

struct MemoryInput {
  std::span<const uint8_t> bytes;
  int64_t pos = 0;
  static int read(void* opaque, uint8_t* buf, int size) {
    auto* m = static_cast<MemoryInput*>(opaque);
    const int64_t left = static_cast<int64_t>(m->bytes.size()) - m->pos;
    if (left <= 0) return AVERROR_EOF;
    const int n = static_cast<int>(std::min<int64_t>(left, size));
    std::memcpy(buf, m->bytes.data() + m->pos, static_cast<size_t>(n));
    m->pos += n;
    return n;
  }
  static int64_t seek(void* opaque, int64_t offset, int whence) {
    auto* m = static_cast<MemoryInput*>(opaque);
    const int64_t size = static_cast<int64_t>(m->bytes.size());
    if (whence & AVSEEK_SIZE) return size;
    whence &= ~AVSEEK_FORCE;
    int64_t p;
    if (whence == SEEK_SET) p = offset;
    else if (whence == SEEK_CUR) p = m->pos + offset;
    else if (whence == SEEK_END) p = size + offset;
    else return AVERROR(EINVAL);
    if (p < 0 || p > size) return AVERROR(EINVAL);
    m->pos = p;
    return p;
  }
};

int refuse_nested_open(AVFormatContext*, AVIOContext**, const char*, int, AVDictionary**) { return AVERROR(EPERM); }

// One opened input: the demuxer over the bytes and the first video stream.
class Demuxer {
 public:
  ~Demuxer() {
    avformat_close_input(&fmt_);  // does not free a custom pb
    if (avio_) av_freep(&avio_->buffer);
    avio_context_free(&avio_);
  }
  Status open(std::span<const uint8_t> bytes, int64_t max_pixels) {
    input_.bytes = bytes;
    max_pixels_ = max_pixels;
    constexpr int kBuf = 1 << 16;
    auto* buf = static_cast<uint8_t*>(av_malloc(kBuf));
    if (!buf) return Status::Error("out of memory");
    avio_ = avio_alloc_context(buf, kBuf, 0, &input_, &MemoryInput::read, nullptr, &MemoryInput::seek);
    if (!avio_) {
      av_free(buf);
      return Status::Error("out of memory");
    }
    fmt_ = avformat_alloc_context();
    if (!fmt_) return Status::Error("out of memory");
    fmt_->pb = avio_;
    fmt_->flags |= AVFMT_FLAG_CUSTOM_IO;
    fmt_->io_open = &refuse_nested_open;
    AVDictionary* opts = nullptr;
    av_dict_set(&opts, "format_whitelist", kFormats, 0);
    av_dict_set(&opts, "protocol_whitelist", "none", 0);
    // avformat_find_stream_info opens decoders for every stream: the same list of video decoders there.
    av_dict_set(&opts, "codec_whitelist", kDecoders, 0);
    int err = avformat_open_input(&fmt_, "", nullptr, &opts);
    av_dict_free(&opts);
    if (err < 0) {
      fmt_ = nullptr;  // freed by avformat_open_input on failure
      return Status::Error("not a video file qvl reads (MP4/MOV, Matroska/WebM, AVI, MPEG-TS, GIF): " + av_error(err));
    }
    // Its probing decoders get the frame-size bound too.
    std::vector<AVDictionary*> stream_opts(fmt_->nb_streams, nullptr);
    for (AVDictionary*& d : stream_opts) {
      av_dict_set(&d, "codec_whitelist", kDecoders, 0);
      av_dict_set_int(&d, "max_pixels", max_pixels_, 0);
    }
    err = avformat_find_stream_info(fmt_, stream_opts.empty() ? nullptr : stream_opts.data());
    for (AVDictionary*& d : stream_opts) av_dict_free(&d);
    if (err < 0) return Status::Error("corrupt video: " + av_error(err));
    for (unsigned i = 0; i < fmt_->nb_streams; ++i) {
      const AVStream* s = fmt_->streams[i];
      if (s->codecpar->codec_type == AVMEDIA_TYPE_VIDEO && !(s->disposition & AV_DISPOSITION_ATTACHED_PIC)) {
        stream_ = static_cast<int>(i);
        break;
      }
    }
    if (stream_ < 0) return Status::Error("the file has no video stream");
    return Status::Ok();
  }
  AVFormatContext* fmt() const { return fmt_; }
  AVStream* stream() const { return fmt_->streams[stream_]; }
  int index() const { return stream_; }

 private:
  MemoryInput input_;
  int64_t max_pixels_ = 0;
  AVIOContext* avio_ = nullptr;
  AVFormatContext* fmt_ = nullptr;
  int stream_ = -1;
};

// libswscale's coefficient set for a frame's colour matrix.
int sws_colorspace(AVColorSpace c) {
  switch (c) {
    case AVCOL_SPC_BT709: return SWS_CS_ITU709;
    case AVCOL_SPC_FCC: return SWS_CS_FCC;
    case AVCOL_SPC_SMPTE240M: return SWS_CS_SMPTE240M;
    case AVCOL_SPC_BT2020_NCL:
    case AVCOL_SPC_BT2020_CL: return SWS_CS_BT2020;
    default: return SWS_CS_DEFAULT;  // BT.601 (SMPTE 170M, BT.470BG, unspecified)
  }
}

int rotation_of(const AVStream* st) {
  const uint8_t* m = av_stream_get_side_data(st, AV_PKT_DATA_DISPLAYMATRIX, nullptr);
  if (!m) return 0;
  const double ccw = av_display_rotation_get(reinterpret_cast<const int32_t*>(m));
  if (std::isnan(ccw)) return 0;
  // av_display_rotation_get is counter-clockwise; the picture is shown turned clockwise by its negation.
  int cw = static_cast<int>(std::lround(-ccw)) % 360;
  if (cw < 0) cw += 360;
  return (cw + 45) / 90 * 90 % 360;
}

// Packets of the stream (and their durations) by reading the whole file: for containers without a count.
Result<std::pair<int64_t, int64_t>> count_packets(std::span<const uint8_t> bytes, const VideoDecodeLimits& limits) {
  Demuxer d;
  QVL_RETURN_IF_ERROR(d.open(bytes, limits.max_frame_pixels));
  std::unique_ptr<AVPacket, void (*)(AVPacket*)> pkt(av_packet_alloc(), [](AVPacket* p) { av_packet_free(&p); });
  if (!pkt) return Status::Error("out of memory");
  int64_t n = 0, all = 0, duration = 0;
  // Every packet counts against the bound (a file of other streams' packets is read no further).
  while (av_read_frame(d.fmt(), pkt.get()) >= 0) {
    if (pkt->stream_index == d.index()) {
      ++n;
      duration = std::min<int64_t>(duration + std::clamp<int64_t>(pkt->duration, 0, INT32_MAX), INT64_MAX / 2);
    }
    av_packet_unref(pkt.get());
    if (n > limits.max_total_frames || ++all > 4 * limits.max_total_frames + 100'000) break;
    if (limits.keep_going && !limits.keep_going()) return Status::Error("video decoding stopped (deadline or client gone)");
  }
  return std::pair<int64_t, int64_t>{n, duration};
}

Result<DecodedVideo> decode_with_ffmpeg(std::span<const uint8_t> bytes, const VideoDecodeLimits& limits,
                                        bool probe_only) {
  static std::once_flag quiet;
  std::call_once(quiet, [] { av_log_set_level(AV_LOG_QUIET); });
  Demuxer d;
  QVL_RETURN_IF_ERROR(d.open(bytes, limits.max_frame_pixels));
  AVStream* st = d.stream();
  DecodedVideo out;
  VideoInfo& info = out.info;
  info.container = d.fmt()->iformat->name;
  const AVCodec* codec = avcodec_find_decoder(st->codecpar->codec_id);
  info.codec = codec ? codec->name : avcodec_get_name(st->codecpar->codec_id);
  info.stored_width = st->codecpar->width;
  info.stored_height = st->codecpar->height;
  info.rotation = rotation_of(st);
  const bool swap = info.rotation == 90 || info.rotation == 270;
  info.width = swap ? info.stored_height : info.stored_width;
  info.height = swap ? info.stored_width : info.stored_height;
  // PyAV's stream.frames and average_rate; GIF's frame delays vary, so its rate is frames over its length.
  const bool gif = info.container == "gif";
  info.total_frames = st->nb_frames;
  info.fps = st->avg_frame_rate.den > 0 ? av_q2d(st->avg_frame_rate) : 0.0;
  if (info.total_frames <= 0 || gif) {
    QVL_ASSIGN_OR_RETURN(auto counted, count_packets(bytes, limits));
    info.total_frames = counted.first;
    if (gif && counted.second > 0) info.fps = static_cast<double>(counted.first) / (counted.second * av_q2d(st->time_base));
  }
  if (!(info.fps > 0) && st->r_frame_rate.den > 0) info.fps = av_q2d(st->r_frame_rate);
  if (!(info.fps > 0) || !std::isfinite(info.fps)) info.fps = 24.0;  // the reference's default without a rate
  info.duration_s = static_cast<double>(info.total_frames) / info.fps;
  QVL_RETURN_IF_ERROR(check_info(info, limits));
  if (!codec) return Status::Error("video codec " + std::string(avcodec_get_name(st->codecpar->codec_id)) + " cannot be decoded");
  if (probe_only) return out;
  QVL_ASSIGN_OR_RETURN(out.indices, choose(info, limits));

  std::unique_ptr<AVCodecContext, void (*)(AVCodecContext*)> ctx(avcodec_alloc_context3(codec), [](AVCodecContext* c) {
    avcodec_free_context(&c);
  });
  if (!ctx || avcodec_parameters_to_context(ctx.get(), st->codecpar) < 0) return Status::Error("out of memory");
  ctx->thread_count = 1;
  ctx->max_pixels = limits.max_frame_pixels;  // an in-band size change beyond the bound is refused by the decoder
  AVDictionary* copts = nullptr;
  av_dict_set(&copts, "codec_whitelist", kDecoders, 0);
  int err = avcodec_open2(ctx.get(), codec, &copts);
  av_dict_free(&copts);
  if (err < 0) return Status::Error("video codec " + info.codec + " cannot be opened: " + av_error(err));

  std::unique_ptr<AVPacket, void (*)(AVPacket*)> pkt(av_packet_alloc(), [](AVPacket* p) { av_packet_free(&p); });
  std::unique_ptr<AVFrame, void (*)(AVFrame*)> frame(av_frame_alloc(), [](AVFrame* f) { av_frame_free(&f); });
  if (!pkt || !frame) return Status::Error("out of memory");
  SwsContext* sws = nullptr;
  struct SwsFree {
    SwsContext*& s;
    ~SwsFree() { sws_freeContext(s); }
  } sws_free{sws};
  Sink sink{limits, out};
  std::vector<uint8_t> rgb_scratch;  // [height + 2, stride]: libswscale's output rows
  int64_t i = 0;  // frames output by the decoder so far
  // Takes every frame the decoder has ready; false when done.
  auto drain = [&]() -> Result<bool> {
    for (;;) {
      const int r = avcodec_receive_frame(ctx.get(), frame.get());
      if (r == AVERROR(EAGAIN) || r == AVERROR_EOF) return true;
      if (r < 0) return Status::Error("corrupt video: frame " + std::to_string(i) + ": " + av_error(r));
      const int64_t n = i++;
      if (n >= info.total_frames + 1024)
        return Status::Error("video yields more frames than the " + std::to_string(info.total_frames) + " it declares");
      if (frame->width != info.stored_width || frame->height != info.stored_height)
        return Status::Error("video frame " + std::to_string(n) + " is " + std::to_string(frame->width) + "x" +
                             std::to_string(frame->height) + ", the stream declares " +
                             std::to_string(info.stored_width) + "x" + std::to_string(info.stored_height));
      if (sink.next < out.indices.size() && out.indices[sink.next] == n) {
        sws = sws_getCachedContext(sws, frame->width, frame->height, static_cast<AVPixelFormat>(frame->format),
                                   frame->width, frame->height, AV_PIX_FMT_RGB24, SWS_BILINEAR, nullptr, nullptr,
                                   nullptr);
        if (!sws) return Status::Error("video pixel format cannot be converted to RGB");
        // The frame's own matrix and range, as PyAV's reformat passes them (BT.601 limited when untagged).
        const AVPixelFormat pf = static_cast<AVPixelFormat>(frame->format);
        const bool full = frame->color_range == AVCOL_RANGE_JPEG || pf == AV_PIX_FMT_YUVJ420P ||
                          pf == AV_PIX_FMT_YUVJ422P || pf == AV_PIX_FMT_YUVJ444P || pf == AV_PIX_FMT_YUVJ440P;
        sws_setColorspaceDetails(sws, sws_getCoefficients(sws_colorspace(frame->colorspace)), full ? 1 : 0,
                                 sws_getCoefficients(SWS_CS_DEFAULT), 1, 0, 1 << 16, 1 << 16);
        ImageRGB rgb;
        rgb.width = frame->width;
        rgb.height = frame->height;
        // libswscale's SIMD converters write whole blocks of pixels: rows padded to 32 pixels, two rows of
        // slack. (Into a tight buffer, a width like 70 gets wrong right-edge pixels and the last row's
        // block runs past the end.)
        const int stride = (rgb.width + 31) / 32 * 32 * 3;
        rgb_scratch.resize(static_cast<size_t>(stride) * (rgb.height + 2));
        uint8_t* dst[4] = {rgb_scratch.data(), nullptr, nullptr, nullptr};
        int dst_stride[4] = {stride, 0, 0, 0};
        sws_scale(sws, frame->data, frame->linesize, 0, frame->height, dst, dst_stride);
        rgb.pixels.resize(static_cast<size_t>(rgb.width) * rgb.height * 3);
        for (int y = 0; y < rgb.height; ++y)
          std::memcpy(&rgb.pixels[static_cast<size_t>(y) * rgb.width * 3], &rgb_scratch[static_cast<size_t>(y) * stride],
                      static_cast<size_t>(rgb.width) * 3);
        if (info.rotation != 0) rgb = rotate_clockwise(rgb, info.rotation);
        QVL_RETURN_IF_ERROR(sink.offer(n, std::move(rgb)));
      }
      av_frame_unref(frame.get());
      if (sink.done()) return false;
    }
  };
  bool more = true;
  int64_t packets = 0;
  while (more) {
    if (limits.keep_going && !limits.keep_going()) return Status::Error("video decoding stopped (deadline or client gone)");
    if (++packets > 4 * limits.max_total_frames + 100'000)
      return Status::Error("video has more packets than " + std::to_string(4 * limits.max_total_frames + 100'000));
    err = av_read_frame(d.fmt(), pkt.get());
    if (err < 0) break;  // end of file (or a read error: the frames so far are what the file holds)
    if (pkt->stream_index == d.index()) {
      const int s = avcodec_send_packet(ctx.get(), pkt.get());
      av_packet_unref(pkt.get());
      if (s < 0 && s != AVERROR(EAGAIN))
        return Status::Error("corrupt video: packet after frame " + std::to_string(i) + ": " + av_error(s));
      QVL_ASSIGN_OR_RETURN(more, drain());
    } else {
      av_packet_unref(pkt.get());
    }
  }
  if (more) {
    avcodec_send_packet(ctx.get(), nullptr);  // flush the frames the decoder holds back
    QVL_ASSIGN_OR_RETURN(more, drain());
  }
  if (!sink.done())
    return Status::Error("truncated or corrupt video: it yields " + std::to_string(i) + " frames, its header declares " +
                         std::to_string(info.total_frames) + " (frame " + std::to_string(out.indices[sink.next]) +
                         " was wanted)");
  return out;
}

#endif  // QVL_WITH_VIDEO

Result<DecodedVideo> decode_any(std::span<const uint8_t> bytes, const VideoDecodeLimits& limits, bool probe_only) {
  if (bytes.empty()) return Status::Error("empty video file");
  if (detect_image_format(bytes) == ImageFormat::kWebp) return decode_webp_animation(bytes, limits, probe_only);
#ifdef QVL_WITH_VIDEO
  return decode_with_ffmpeg(bytes, limits, probe_only);
#else
  return Status::Error("this qvl was built without video support (FFmpeg's libraries were not found)");
#endif
}

}  // namespace

bool video_supported() {
#ifdef QVL_WITH_VIDEO
  return true;
#else
  return false;
#endif
}

Result<DecodedVideo> decode_video(std::span<const uint8_t> bytes, const VideoDecodeLimits& limits) {
  return decode_any(bytes, limits, false);
}

Result<VideoInfo> probe_video(std::span<const uint8_t> bytes, const VideoDecodeLimits& limits) {
  QVL_ASSIGN_OR_RETURN(DecodedVideo v, decode_any(bytes, limits, true));
  return v.info;
}

}  // namespace qvl
