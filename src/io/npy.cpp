// Reading and writing NumPy .npy files (version 1.0, little-endian float32 / int32 / uint8, C order).
#include "io/npy.h"

#include <cstring>

#include "util/file.h"

namespace qvl {

namespace {
size_t dtype_size(const std::string& dtype) {
  if (dtype == "<f4" || dtype == "<i4") return 4;
  if (dtype == "<i8" || dtype == "<f8") return 8;
  if (dtype == "|u1" || dtype == "|i1") return 1;
  return 0;
}
}  // namespace

Status write_npy(const std::string& path, const std::string& dtype, const std::vector<int64_t>& shape,
                 const void* data, size_t bytes) {
  QVL_CHECK(dtype_size(dtype) != 0);
  std::string shape_str = "(";
  for (size_t i = 0; i < shape.size(); ++i) shape_str += std::to_string(shape[i]) + (shape.size() == 1 || i + 1 < shape.size() ? "," : "");
  shape_str += ")";
  std::string header = "{'descr': '" + dtype + "', 'fortran_order': False, 'shape': " + shape_str + ", }";
  // Magic (6) + version (2) + header length (2) + header, padded with spaces to a multiple of 64, ending in \n.
  size_t total = 10 + header.size() + 1;
  header += std::string((64 - total % 64) % 64, ' ') + "\n";
  std::string out = std::string("\x93NUMPY\x01\x00", 8);
  out.push_back(static_cast<char>(header.size() & 0xFF));
  out.push_back(static_cast<char>(header.size() >> 8));
  out += header;
  out.append(static_cast<const char*>(data), bytes);
  return write_file_bytes(path, out.data(), out.size());
}

Result<NpyArray> read_npy(const std::string& path) {
  QVL_ASSIGN_OR_RETURN(std::string raw, read_file_text(path));
  auto bad = [&](const std::string& why) { return Status::Error(path + ": not a supported .npy file: " + why); };
  if (raw.size() < 10 || raw.compare(0, 6, "\x93NUMPY") != 0) return bad("missing magic");
  if (raw[6] != 1) return bad("version " + std::to_string(raw[6]) + ", expected 1");
  const size_t hlen = static_cast<uint8_t>(raw[8]) | (static_cast<size_t>(static_cast<uint8_t>(raw[9])) << 8);
  if (10 + hlen > raw.size()) return bad("truncated header");
  const std::string header = raw.substr(10, hlen);
  NpyArray a;
  auto field = [&](const std::string& key) -> std::string {
    size_t k = header.find("'" + key + "'");
    if (k == std::string::npos) return {};
    size_t colon = header.find(':', k);
    return colon == std::string::npos ? std::string() : header.substr(colon + 1);
  };
  std::string descr = field("descr");
  size_t q1 = descr.find('\''), q2 = descr.find('\'', q1 + 1);
  if (q1 == std::string::npos || q2 == std::string::npos) return bad("no descr");
  a.dtype = descr.substr(q1 + 1, q2 - q1 - 1);
  if (dtype_size(a.dtype) == 0) return bad("dtype " + a.dtype);
  if (field("fortran_order").find("False") != 0 && field("fortran_order").find(" False") != 0) return bad("Fortran order");
  std::string shape = field("shape");
  size_t p1 = shape.find('('), p2 = shape.find(')');
  if (p1 == std::string::npos || p2 == std::string::npos) return bad("no shape");
  std::string dims = shape.substr(p1 + 1, p2 - p1 - 1);
  for (size_t i = 0; i < dims.size();) {
    while (i < dims.size() && (dims[i] == ' ' || dims[i] == ',')) ++i;
    if (i >= dims.size()) break;
    size_t j = i;
    while (j < dims.size() && dims[j] >= '0' && dims[j] <= '9') ++j;
    if (j == i) return bad("shape " + shape);
    a.shape.push_back(std::stoll(dims.substr(i, j - i)));
    i = j;
  }
  const size_t want = static_cast<size_t>(a.numel()) * dtype_size(a.dtype);
  if (raw.size() - 10 - hlen != want)
    return bad("data is " + std::to_string(raw.size() - 10 - hlen) + " bytes, shape needs " + std::to_string(want));
  a.data.assign(raw.begin() + 10 + static_cast<std::ptrdiff_t>(hlen), raw.end());
  return a;
}

}  // namespace qvl
