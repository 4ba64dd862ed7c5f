// GIF (giflib), first frame only, as GifImagePlugin lays it out (io/image.cpp describes the details).
#include "io/image_codec.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include <gif_lib.h>

namespace qvl {
namespace codec {

namespace {

struct GifReader {
  const uint8_t* data;
  size_t size;
  size_t pos;
  bool in_pixels = false;  // reading the first frame's LZW sub-blocks
  bool hit_eof = false;
  int synthetic = 0;  // block terminators served past the end of the file
};

// PIL's GIF decoder is done as soon as the frame's last pixel is stored; giflib then still reads up to
// the block terminator. So that a file cut right after the last complete sub-block decodes as in PIL,
// a read that starts exactly at the end of the file, inside the pixel data, gets a zero byte (an empty
// sub-block, the terminator). If pixels were still missing, giflib reports the image as defective.
int gif_on_read(GifFileType* gif, GifByteType* out, int n) {
  auto* r = static_cast<GifReader*>(gif->UserData);
  const size_t want = n > 0 ? static_cast<size_t>(n) : 0;
  if (r->pos == r->size && want > 0) {
    r->hit_eof = true;
    if (r->in_pixels && r->synthetic < 4) {
      ++r->synthetic;
      std::memset(out, 0, want);
      return static_cast<int>(want);
    }
    return 0;
  }
  const size_t got = want < r->size - r->pos ? want : r->size - r->pos;
  std::memcpy(out, r->data + r->pos, got);
  r->pos += got;
  if (got < want) r->hit_eof = true;
  return static_cast<int>(got);
}

Status gif_error(const GifReader& r, const std::string& what, int code) {
  const char* msg = GifErrorString(code);
  const std::string detail = msg ? msg : ("giflib error " + std::to_string(code));
  if (r.hit_eof)
    return Status::Error("GIF: truncated data: the file ends " + what + " (" + detail +
                         ") (hint: the file may be cut short, e.g. by an interrupted download)");
  return Status::Error("GIF: corrupt data " + what + ": " + detail);
}

// PIL's GifImageFile._is_palette_needed: false for the identity grey ramp.
bool gif_palette_needed(const ColorMapObject* map) {
  for (int i = 0; i < map->ColorCount; ++i) {
    const GifColorType& c = map->Colors[i];
    if (!(c.Red == i && c.Green == i && c.Blue == i)) return true;
  }
  return false;
}

}  // namespace

Result<Decoded> decode_gif(std::span<const uint8_t> bytes, const ImageDecodeLimits& limits) {
  Decoded out;
  GifReader reader{bytes.data(), bytes.size(), 0};
  int err = 0;
  GifFileType* gif = DGifOpen(&reader, gif_on_read, &err);
  if (!gif) return gif_error(reader, "in the header", err);
  struct Close {
    GifFileType* g;
    ~Close() {
      int e = 0;
      DGifCloseFile(g, &e);
    }
  } close{gif};

  int transparency = -1;  // from the last graphic control extension before the image
  for (;;) {
    GifRecordType type;
    if (DGifGetRecordType(gif, &type) == GIF_ERROR) return gif_error(reader, "before the first frame", gif->Error);
    if (type == TERMINATE_RECORD_TYPE) return Status::Error("GIF: the file has no image (no frame before the end)");
    if (type == EXTENSION_RECORD_TYPE) {
      int code = 0;
      GifByteType* ext = nullptr;
      if (DGifGetExtension(gif, &code, &ext) == GIF_ERROR) return gif_error(reader, "in an extension block", gif->Error);
      if (code == GRAPHICS_EXT_FUNC_CODE && ext && ext[0] >= 4 && (ext[1] & 1)) transparency = ext[4];
      while (ext) {
        if (DGifGetExtensionNext(gif, &ext) == GIF_ERROR) return gif_error(reader, "in an extension block", gif->Error);
      }
      continue;
    }
    if (type != IMAGE_DESC_RECORD_TYPE) continue;
    if (DGifGetImageDesc(gif) == GIF_ERROR) return gif_error(reader, "in the image descriptor", gif->Error);
    break;
  }

  const GifImageDesc& desc = gif->Image;
  const uint64_t x0 = static_cast<uint16_t>(desc.Left), y0 = static_cast<uint16_t>(desc.Top);
  const uint64_t fw = static_cast<uint16_t>(desc.Width), fh = static_cast<uint16_t>(desc.Height);
  // PIL grows the image when the first frame extends past the logical screen.
  const uint64_t cw = std::max<uint64_t>(static_cast<uint16_t>(gif->SWidth), x0 + fw);
  const uint64_t ch = std::max<uint64_t>(static_cast<uint16_t>(gif->SHeight), y0 + fh);
  QVL_RETURN_IF_ERROR(check_size("GIF", cw, ch, limits).status());
  if (fw == 0 || fh == 0)
    return Status::Error("GIF: first frame is " + dims(fw, fh) + ", expected a width and height of at least 1");

  // The frame palette: the local one if present, else the global one. An identity grey ramp, or no
  // palette at all, makes PIL open the frame as "L", where the index is the grey level.
  const ColorMapObject* map = desc.ColorMap ? desc.ColorMap : gif->SColorMap;
  const bool grey = !map || !gif_palette_needed(map);
  uint8_t rgb[256][3] = {};  // PIL: entries past the palette are black
  for (int i = 0; i < 256; ++i) {
    if (grey) {
      rgb[i][0] = rgb[i][1] = rgb[i][2] = static_cast<uint8_t>(i);
    } else if (i < map->ColorCount) {
      rgb[i][0] = map->Colors[i].Red;
      rgb[i][1] = map->Colors[i].Green;
      rgb[i][2] = map->Colors[i].Blue;
    }
  }

  const int w = static_cast<int>(cw), h = static_cast<int>(ch);
  // Outside the frame: the transparency index if there is one, else index 0.
  std::vector<uint8_t> index(static_cast<size_t>(w) * h, static_cast<uint8_t>(transparency >= 0 ? transparency : 0));
  std::vector<GifPixelType> line(fw);
  reader.in_pixels = true;
  const int passes_start[4] = {0, 4, 2, 1}, passes_step[4] = {8, 8, 4, 2};
  const int npasses = desc.Interlace ? 4 : 1;
  for (int p = 0; p < npasses; ++p) {
    const int start = desc.Interlace ? passes_start[p] : 0, step = desc.Interlace ? passes_step[p] : 1;
    for (uint64_t y = start; y < fh; y += step) {
      if (DGifGetLine(gif, line.data(), static_cast<int>(fw)) == GIF_ERROR)
        return gif_error(reader, "in the pixel data of row " + std::to_string(y), gif->Error);
      std::memcpy(&index[(y0 + y) * w + x0], line.data(), fw);
    }
  }
  out.image = new_image(w, h);
  uint8_t* o = out.image.pixels.data();
  for (size_t i = 0; i < index.size(); ++i) {
    o[3 * i] = rgb[index[i]][0];
    o[3 * i + 1] = rgb[index[i]][1];
    o[3 * i + 2] = rgb[index[i]][2];
  }
  return out;
}

}  // namespace codec
}  // namespace qvl
