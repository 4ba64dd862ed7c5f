// Decoding video files (MP4/MOV, Matroska/WebM, AVI, MPEG-TS, animated GIF and WebP) to 8-bit RGB frames as
// transformers' read_video_pyav does: every frame the stream's decoder outputs, in order, numbered from 0,
// converted to RGB24 by libswscale; the frames to keep are chosen from the container's metadata before any
// pixel is decoded. FFmpeg's libraries (Debian's) in process, fed from memory: no demuxer may open another
// file or URL. Animated WebP goes through libwebp's animation decoder (as Pillow reads it).
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "io/image.h"
#include "util/status.h"

namespace qvl {

// False when this build has no video support (configured without FFmpeg's libraries).
bool video_supported();

// Sniffs a video container from the first bytes: an ISO-BMFF "ftyp" (not HEIF/AVIF stills), EBML
// (Matroska/WebM), RIFF AVI, MPEG-TS sync bytes at 0, 188 and 376, or an animated WebP with at least two
// frames. A GIF is an image here (its first frame, as the reference reads it), unless sent as a video.
bool looks_like_video(std::span<const uint8_t> bytes);

struct VideoInfo {
  std::string container;  // the demuxer ("mov,mp4,m4a,3gp,3g2,mj2", "matroska,webm", "gif", "webp", ...)
  std::string codec;      // the decoder ("h264", "vp9", ...)
  int stored_width = 0, stored_height = 0;  // as coded, before rotation
  int width = 0, height = 0;                // as displayed: after rotation
  int rotation = 0;  // clockwise degrees the picture is turned for display: 0, 90, 180 or 270
  int64_t total_frames = 0;  // the stream's frame count, else the packets counted
  double fps = 0;            // the stream's average frame rate (PyAV's average_rate)
  double duration_s = 0;     // total_frames / fps
};

struct VideoDecodeLimits {
  int64_t max_frame_pixels = 16'777'216;  // stored width * height
  double max_duration_s = 3600;           // total_frames / fps
  int64_t max_total_frames = 216'000;     // frames in the stream (an hour at 60 fps)
  // The decoding work: frames decoded (every frame up to the last one kept) times their pixels. A small file
  // can declare hours of large frames that compress to nothing; it is refused before decoding. 2^34: about
  // 12 minutes of 1080p at 30 fps, a minute or so of one core.
  int64_t max_decoded_pixels = int64_t{1} << 34;
  // Asked between packets while decoding (a deadline, a client gone): false stops with an error.
  std::function<bool()> keep_going;
  // Called once the metadata is read, before any frame is decoded: the indices of the frames to keep,
  // ascending, each below info.total_frames (an error refuses the video).
  std::function<Result<std::vector<int64_t>>(const VideoInfo& info)> select;
  // Called for each kept frame, in order, as soon as it is converted (k: its position in the selection);
  // the frame may be moved from. An error stops decoding.
  std::function<Status(size_t k, ImageRGB&& frame)> on_frame;
};

// Decodes an in-memory file. Without `select` every frame is kept; without `on_frame` the kept frames are
// returned in `frames`. Errors say what is wrong ("truncated or corrupt video: ...", "video is 8192x8192 ...").
struct DecodedVideo {
  VideoInfo info;
  std::vector<int64_t> indices;  // the frames kept
  std::vector<ImageRGB> frames;  // when no on_frame was given
};
Result<DecodedVideo> decode_video(std::span<const uint8_t> bytes, const VideoDecodeLimits& limits = {});

// The metadata alone (no frame decoded).
Result<VideoInfo> probe_video(std::span<const uint8_t> bytes, const VideoDecodeLimits& limits = {});

// Turns a frame clockwise by 0, 90, 180 or 270 degrees.
ImageRGB rotate_clockwise(const ImageRGB& src, int degrees);

}  // namespace qvl
