// .npy / .npz reading and .npy writing.
//
// A .npy file is a magic string, a format version, a little-endian header
// length (2 bytes in version 1.0, 4 bytes in 2.0 and 3.0) and a Python dict
// literal {'descr': ..., 'fortran_order': ..., 'shape': (...)}, padded so the
// data starts on a 64-byte boundary; the raw array bytes follow.
//
// A .npz file is a zip archive of .npy members. The archive is read through
// its central directory (the end-of-central-directory record at the end of
// the file, its zip64 variant when counts or offsets overflow 32 bits), which
// gives each member's method, sizes, CRC and local header offset; the local
// header only tells where the data starts. Members are stored or raw-deflated.
#include "ifu/npy.hpp"

#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>

#include "ifu/errors.hpp"

namespace tessera::ifu {

namespace {

[[noreturn]] void fail(const char* ctx, const std::string& path, const std::string& what) {
  fail_input(ctx, path, what);
}

std::vector<char> read_file(const char* ctx, const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec))
    fail(ctx, path, std::filesystem::exists(path, ec) ? "not a regular file" : "no such file");
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(ctx, path, "cannot open");
  const auto size = std::filesystem::file_size(path, ec);
  if (ec) fail(ctx, path, "cannot get its size");
  std::vector<char> buf(size);
  if (size > 0 && !in.read(buf.data(), static_cast<std::streamsize>(size))) fail(ctx, path, "read error");
  return buf;
}

// ---- the header's Python dict literal ----

struct Header {
  std::string descr;
  bool structured = false;  // descr was a list (a structured dtype)
  bool fortran = false;
  bool has_descr = false, has_fortran = false, has_shape = false;
  std::vector<std::int64_t> shape;
};

class HeaderParser {
 public:
  HeaderParser(const std::string& text, const char* ctx, const std::string& name) : s_(text), ctx_(ctx), name_(name) {}

  Header parse() {
    Header h;
    expect('{');
    for (;;) {
      skip();
      if (peek() == '}') break;
      const std::string key = quoted();
      skip();
      expect(':');
      skip();
      if (key == "descr") {
        h.has_descr = true;
        if (peek() == '[') {
          h.structured = true;
          skip_balanced();
        } else {
          h.descr = quoted();
        }
      } else if (key == "fortran_order") {
        h.has_fortran = true;
        h.fortran = boolean();
      } else if (key == "shape") {
        h.has_shape = true;
        h.shape = tuple();
      } else {
        bad(std::string("unexpected header key '") + key + "'");
      }
      skip();
      if (peek() == ',') ++i_;
    }
    if (!h.has_descr || !h.has_fortran || !h.has_shape) bad("header lacks descr, fortran_order or shape");
    return h;
  }

 private:
  [[noreturn]] void bad(const std::string& what) {
    std::string w = "malformed .npy header (";
    w += what;
    w += "): ";
    w += s_;
    fail(ctx_, name_, w);
  }
  char peek() const { return i_ < s_.size() ? s_[i_] : '\0'; }
  void skip() {
    while (i_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[i_]))) ++i_;
  }
  void expect(char c) {
    skip();
    if (peek() != c) bad(std::string("expected '") + c + "'");
    ++i_;
  }
  std::string quoted() {
    const char q = peek();
    if (q != '\'' && q != '"') bad("expected a quoted string");
    const std::size_t end = s_.find(q, i_ + 1);
    if (end == std::string::npos) bad("unterminated string");
    std::string out = s_.substr(i_ + 1, end - i_ - 1);
    i_ = end + 1;
    return out;
  }
  bool boolean() {
    if (s_.compare(i_, 4, "True") == 0) {
      i_ += 4;
      return true;
    }
    if (s_.compare(i_, 5, "False") == 0) {
      i_ += 5;
      return false;
    }
    bad("fortran_order must be True or False");
  }
  std::vector<std::int64_t> tuple() {
    std::vector<std::int64_t> out;
    expect('(');
    for (;;) {
      skip();
      if (peek() == ')') {
        ++i_;
        return out;
      }
      if (!std::isdigit(static_cast<unsigned char>(peek()))) bad("shape must be a tuple of non-negative integers");
      std::int64_t v = 0;
      while (std::isdigit(static_cast<unsigned char>(peek()))) {
        if (v > (std::numeric_limits<std::int64_t>::max() - 9) / 10) bad("shape entry too large");
        v = v * 10 + (s_[i_++] - '0');
      }
      if (peek() == 'L') ++i_;  // Python 2 long literal
      out.push_back(v);
      skip();
      if (peek() == ',') ++i_;
    }
  }
  void skip_balanced() {
    int depth = 0;
    do {
      if (i_ >= s_.size()) bad("unbalanced brackets");
      if (s_[i_] == '[' || s_[i_] == '(') ++depth;
      if (s_[i_] == ']' || s_[i_] == ')') --depth;
      ++i_;
    } while (depth > 0);
  }

  const std::string& s_;
  const char* ctx_;
  const std::string& name_;
  std::size_t i_ = 0;
};

// Byte size of one element of a supported descr; InputError for the rest.
std::size_t itemsize_of(const std::string& descr, const char* ctx, const std::string& name) {
  auto reject = [&](const std::string& why) {
    std::string w = "dtype '";
    w += descr;
    w += "' is not supported: ";
    w += why;
    fail(ctx, name, w);
  };
  if (descr.size() >= 2 && descr[1] == 'O')
    reject("object arrays cannot be read without Python (save a numeric array)");
  if (descr.size() < 3) reject("expected a byte order, a kind and a size, e.g. <f4");
  const char order = descr[0];
  const char kind = descr[1];
  int size = 0;
  for (std::size_t k = 2; k < descr.size(); ++k) {
    if (!std::isdigit(static_cast<unsigned char>(descr[k]))) reject("expected a byte order, a kind and a size");
    size = size * 10 + (descr[k] - '0');
    if (size > 64) reject("item size too large");
  }
  if (order != '<' && order != '>' && order != '|' && order != '=') reject("unknown byte order");
  if (kind == 'c') reject("complex values");
  if (kind == 'U' || kind == 'S' || kind == 'a') reject("strings");
  if (kind == 'M' || kind == 'm') reject("dates and time deltas");
  if (kind != 'f' && kind != 'i' && kind != 'u' && kind != 'b') reject("expected a bool, integer or float dtype");
  const bool ok = (kind == 'b' && size == 1) || (kind == 'f' && (size == 2 || size == 4 || size == 8)) ||
                  ((kind == 'i' || kind == 'u') && (size == 1 || size == 2 || size == 4 || size == 8));
  if (!ok) reject("unsupported item size");
  if (order == '>' && size > 1) reject("big-endian data (save it little-endian, e.g. a.astype('<f4'))");
  return static_cast<std::size_t>(size);
}

// Parses a whole .npy image; the returned array takes `buf`'s storage.
NpyArray parse_npy(std::vector<char> buf, const char* ctx, const std::string& name) {
  static const char magic[] = "\x93NUMPY";
  if (buf.size() < 10 || std::memcmp(buf.data(), magic, 6) != 0) fail(ctx, name, "not a .npy file (bad magic)");
  const auto major = static_cast<unsigned char>(buf[6]);
  const auto minor = static_cast<unsigned char>(buf[7]);
  std::size_t hlen = 0, hstart = 0;
  if (major == 1) {
    hlen = static_cast<unsigned char>(buf[8]) | (static_cast<std::size_t>(static_cast<unsigned char>(buf[9])) << 8);
    hstart = 10;
  } else if (major == 2 || major == 3) {
    if (buf.size() < 12) fail(ctx, name, "truncated .npy header");
    for (int k = 3; k >= 0; --k) hlen = (hlen << 8) | static_cast<unsigned char>(buf[8 + k]);
    hstart = 12;
  } else {
    std::string w = ".npy format version ";
    w += std::to_string(major);
    w += ".";
    w += std::to_string(minor);
    w += " is not supported (known: 1.0, 2.0, 3.0)";
    fail(ctx, name, w);
  }
  if (hstart + hlen > buf.size()) fail(ctx, name, "truncated .npy header");
  const std::string text(buf.data() + hstart, hlen);
  Header h = HeaderParser(text, ctx, name).parse();
  if (h.structured) fail(ctx, name, "structured dtypes are not supported (save each field as its own array)");
  if (h.fortran) fail(ctx, name, "Fortran-order arrays are not supported (save np.ascontiguousarray(a))");
  const std::size_t item = itemsize_of(h.descr, ctx, name);
  std::uint64_t count = 1;
  for (auto d : h.shape) {
    if (d != 0 && count > std::numeric_limits<std::uint64_t>::max() / static_cast<std::uint64_t>(d) / item)
      fail(ctx, name, "shape too large");
    count *= static_cast<std::uint64_t>(d);
  }
  const std::uint64_t bytes = count * item;
  const std::size_t start = hstart + hlen;
  if (buf.size() - start < bytes) {
    std::string w = "truncated data: the header promises ";
    w += std::to_string(bytes);
    w += " bytes, the file holds ";
    w += std::to_string(buf.size() - start);
    fail(ctx, name, w);
  }
  NpyArray a;
  a.shape = std::move(h.shape);
  a.dtype = h.descr;
  // Keep the allocation: shift the data to the front instead of copying it out.
  buf.erase(buf.begin(), buf.begin() + static_cast<std::ptrdiff_t>(start));
  buf.resize(bytes);
  a.data = std::move(buf);
  return a;
}

float half_to_float(std::uint16_t h) {
  const int sign = (h >> 15) & 1, exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
  float v;
  if (exp == 0)
    v = std::ldexp(static_cast<float>(mant), -24);
  else if (exp == 31)
    v = mant ? std::numeric_limits<float>::quiet_NaN() : std::numeric_limits<float>::infinity();
  else
    v = std::ldexp(static_cast<float>(mant | 0x400), exp - 25);
  return sign ? -v : v;
}

template <class Out>
std::vector<Out> convert(const NpyArray& a) {
  const std::int64_t n = a.size();
  std::vector<Out> out(static_cast<std::size_t>(n));
  const char* p = a.data.data();
  // The byte order was checked on reading: all data is little-endian (the host order here).
  const std::size_t size = itemsize_of(a.dtype, "ifu npy", "array");  // also rejects what reading would
  const char kind = a.dtype[1];
  if (a.data.size() < static_cast<std::size_t>(n) * size) {
    std::string msg = "[ifu npy] the array holds ";
    msg += std::to_string(a.data.size());
    msg += " bytes, its shape and dtype need more";
    throw InputError(msg);
  }
  auto loop = [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_same_v<T, Out>) {
      if (n > 0) std::memcpy(out.data(), p, static_cast<std::size_t>(n) * sizeof(T));
    } else {
      for (std::int64_t i = 0; i < n; ++i) {
        T v;
        std::memcpy(&v, p + static_cast<std::size_t>(i) * sizeof(T), sizeof(T));
        out[static_cast<std::size_t>(i)] = static_cast<Out>(v);
      }
    }
  };
  if (kind == 'f' && size == 2) {
    for (std::int64_t i = 0; i < n; ++i) {
      std::uint16_t v;
      std::memcpy(&v, p + 2 * static_cast<std::size_t>(i), 2);
      out[static_cast<std::size_t>(i)] = static_cast<Out>(half_to_float(v));
    }
  } else if (kind == 'f' && size == 4) {
    loop(float{});
  } else if (kind == 'f' && size == 8) {
    loop(double{});
  } else if (kind == 'i' && size == 1) {
    loop(std::int8_t{});
  } else if (kind == 'i' && size == 2) {
    loop(std::int16_t{});
  } else if (kind == 'i' && size == 4) {
    loop(std::int32_t{});
  } else if (kind == 'i' && size == 8) {
    loop(std::int64_t{});
  } else if ((kind == 'u' || kind == 'b') && size == 1) {
    loop(std::uint8_t{});
  } else if (kind == 'u' && size == 2) {
    loop(std::uint16_t{});
  } else if (kind == 'u' && size == 4) {
    loop(std::uint32_t{});
  } else if (kind == 'u' && size == 8) {
    loop(std::uint64_t{});
  } else {
    std::string msg = "[ifu npy] cannot convert dtype '";
    msg += a.dtype;
    msg += "' to numbers";
    throw InputError(msg);
  }
  return out;
}

// ---- zip ----

std::uint64_t le(const char* p, int bytes) {
  std::uint64_t v = 0;
  for (int k = bytes - 1; k >= 0; --k) v = (v << 8) | static_cast<unsigned char>(p[k]);
  return v;
}

class ZipFile {
 public:
  explicit ZipFile(const std::string& path) : path_(path) {
    std::error_code ec;
    if (!std::filesystem::is_regular_file(path, ec))
      bad(std::filesystem::exists(path, ec) ? "not a regular file" : "no such file");
    in_.open(path, std::ios::binary);
    if (!in_) bad("cannot open");
    size_ = std::filesystem::file_size(path, ec);
    if (ec) bad("cannot get its size");
  }

  [[noreturn]] void bad(const std::string& what) const { fail("ifu npz", path_, what); }

  std::vector<char> read_at(std::uint64_t offset, std::uint64_t n) {
    if (offset > size_ || n > size_ - offset) bad("truncated archive (a record points past the end of the file)");
    std::vector<char> buf(n);
    in_.seekg(static_cast<std::streamoff>(offset));
    if (n > 0 && !in_.read(buf.data(), static_cast<std::streamsize>(n))) bad("read error");
    return buf;
  }

  std::uint64_t size() const { return size_; }

 private:
  std::string path_;
  std::ifstream in_;
  std::uint64_t size_ = 0;
};

struct ZipEntry {
  std::string name;
  int method = 0;
  int flags = 0;
  std::uint32_t crc = 0;
  std::uint64_t csize = 0, usize = 0, local = 0;
};

std::vector<ZipEntry> central_directory(ZipFile& z) {
  constexpr std::uint64_t kEocd = 22;
  if (z.size() < kEocd) z.bad("not a zip archive (too short)");
  // The end record sits before a comment of at most 65535 bytes.
  const std::uint64_t tail_len = std::min<std::uint64_t>(z.size(), kEocd + 65535);
  const std::vector<char> tail = z.read_at(z.size() - tail_len, tail_len);
  std::int64_t pos = -1;
  for (std::int64_t k = static_cast<std::int64_t>(tail_len - kEocd); k >= 0; --k) {
    if (le(tail.data() + k, 4) == 0x06054b50 &&
        static_cast<std::uint64_t>(k) + kEocd + le(tail.data() + k + 20, 2) == tail_len) {
      pos = k;
      break;
    }
  }
  if (pos < 0) z.bad("not a zip archive (no end-of-central-directory record)");
  const char* e = tail.data() + pos;
  std::uint64_t entries = le(e + 10, 2);
  std::uint64_t cd_size = le(e + 12, 4);
  std::uint64_t cd_offset = le(e + 16, 4);
  if (entries == 0xFFFF || cd_size == 0xFFFFFFFF || cd_offset == 0xFFFFFFFF) {
    const std::uint64_t eocd_at = z.size() - tail_len + static_cast<std::uint64_t>(pos);
    if (eocd_at < 20) z.bad("zip64 end locator missing");
    const auto loc = z.read_at(eocd_at - 20, 20);
    if (le(loc.data(), 4) != 0x07064b50) z.bad("zip64 end locator missing");
    const auto rec = z.read_at(le(loc.data() + 8, 8), 56);
    if (le(rec.data(), 4) != 0x06064b50) z.bad("bad zip64 end record");
    entries = le(rec.data() + 32, 8);
    cd_size = le(rec.data() + 40, 8);
    cd_offset = le(rec.data() + 48, 8);
  }
  const std::vector<char> cd = z.read_at(cd_offset, cd_size);
  std::vector<ZipEntry> out;
  std::size_t p = 0;
  for (std::uint64_t k = 0; k < entries; ++k) {
    if (p + 46 > cd.size() || le(cd.data() + p, 4) != 0x02014b50) z.bad("corrupt central directory");
    const char* r = cd.data() + p;
    ZipEntry en;
    en.flags = static_cast<int>(le(r + 8, 2));
    en.method = static_cast<int>(le(r + 10, 2));
    en.crc = static_cast<std::uint32_t>(le(r + 16, 4));
    en.csize = le(r + 20, 4);
    en.usize = le(r + 24, 4);
    const std::size_t nlen = le(r + 28, 2), xlen = le(r + 30, 2), clen = le(r + 32, 2);
    en.local = le(r + 42, 4);
    if (p + 46 + nlen + xlen + clen > cd.size()) z.bad("corrupt central directory");
    en.name.assign(r + 46, nlen);
    // Zip64 extra field: 64-bit values for the fields saturated above, in this order.
    const char* x = r + 46 + nlen;
    for (std::size_t q = 0; q + 4 <= xlen;) {
      const std::uint64_t id = le(x + q, 2), len = le(x + q + 2, 2);
      if (q + 4 + len > xlen) break;
      if (id == 0x0001) {
        std::size_t f = q + 4;
        auto take = [&](std::uint64_t& v) {
          if (v != 0xFFFFFFFF) return;
          if (f + 8 > q + 4 + len) z.bad("corrupt zip64 extra field");
          v = le(x + f, 8);
          f += 8;
        };
        take(en.usize);
        take(en.csize);
        take(en.local);
      }
      q += 4 + len;
    }
    out.push_back(std::move(en));
    p += 46 + nlen + xlen + clen;
  }
  return out;
}

// Raw-deflate `in` into exactly `out.size()` bytes. zlib counts in 32-bit
// chunks, so both buffers are fed at most 1 GiB at a time.
void inflate_into(const std::vector<char>& in, std::vector<char>& out, ZipFile& z, const std::string& member) {
  z_stream zs{};
  if (inflateInit2(&zs, -MAX_WBITS) != Z_OK) z.bad("zlib inflateInit failed");
  constexpr std::size_t kChunk = std::size_t{1} << 30;
  std::size_t in_pos = 0, out_pos = 0;
  auto fail_member = [&](const std::string& why) {
    inflateEnd(&zs);
    std::string w = "member '";
    w += member;
    w += "': ";
    w += why;
    z.bad(w);
  };
  for (;;) {
    if (zs.avail_in == 0 && in_pos < in.size()) {
      const std::size_t n = std::min(kChunk, in.size() - in_pos);
      zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data() + in_pos));
      zs.avail_in = static_cast<uInt>(n);
      in_pos += n;
    }
    if (zs.avail_out == 0 && out_pos < out.size()) {
      const std::size_t n = std::min(kChunk, out.size() - out_pos);
      zs.next_out = reinterpret_cast<Bytef*>(out.data() + out_pos);
      zs.avail_out = static_cast<uInt>(n);
      out_pos += n;
    }
    const int ret = inflate(&zs, Z_NO_FLUSH);
    if (ret == Z_STREAM_END) break;
    if (ret == Z_BUF_ERROR) {
      if (zs.avail_in == 0 && in_pos == in.size()) fail_member("truncated deflate stream");
      if (zs.avail_out == 0 && out_pos == out.size()) fail_member("inflates to more bytes than its recorded size");
      fail_member("deflate stream error");
    }
    if (ret != Z_OK) fail_member(std::string("corrupt deflate data: ") + (zs.msg ? zs.msg : "zlib error"));
  }
  const auto total = zs.total_out;
  inflateEnd(&zs);
  if (total != out.size()) fail_member("inflates to fewer bytes than its recorded size");
}

}  // namespace

std::int64_t NpyArray::size() const {
  std::int64_t n = 1;
  for (auto d : shape) n *= d;
  return n;
}

std::vector<float> NpyArray::to_f32() const { return convert<float>(*this); }
std::vector<double> NpyArray::to_f64() const { return convert<double>(*this); }

NpyArray read_npy(const std::string& path) { return parse_npy(read_file("ifu npy", path), "ifu npy", path); }

std::map<std::string, NpyArray> read_npz(const std::string& path) {
  ZipFile z(path);
  std::map<std::string, NpyArray> out;
  auto member_bad = [&](const ZipEntry& en, const std::string& why) {
    std::string w = "member '";
    w += en.name;
    w += "' ";
    w += why;
    z.bad(w);
  };
  for (const ZipEntry& en : central_directory(z)) {
    if (!en.name.empty() && en.name.back() == '/') continue;  // a folder entry
    if (en.name.size() < 4 || en.name.compare(en.name.size() - 4, 4, ".npy") != 0)
      member_bad(en, "is not a .npy array");
    const std::string key = en.name.substr(0, en.name.size() - 4);
    if (en.flags & 1) member_bad(en, "is encrypted");
    if (en.method != 0 && en.method != 8)
      member_bad(en, "uses compression method " + std::to_string(en.method) + " (supported: 0 stored, 8 deflate)");
    const auto lh = z.read_at(en.local, 30);
    if (le(lh.data(), 4) != 0x04034b50) member_bad(en, "has a bad local header");
    const std::uint64_t data_at = en.local + 30 + le(lh.data() + 26, 2) + le(lh.data() + 28, 2);
    std::vector<char> raw;
    if (en.method == 0) {
      if (en.csize != en.usize) member_bad(en, "is stored but its sizes disagree");
      raw = z.read_at(data_at, en.csize);
    } else {
      const std::vector<char> packed = z.read_at(data_at, en.csize);
      // Deflate expands at most ~1032:1; a larger claim is a corrupt header,
      // not a reason to allocate it.
      if (en.usize > 1032 * en.csize + 1024) member_bad(en, "claims an uncompressed size its data cannot hold");
      raw.resize(en.usize);
      inflate_into(packed, raw, z, en.name);
    }
    const auto crc = crc32_z(0L, reinterpret_cast<const Bytef*>(raw.data()), raw.size());
    if (crc != en.crc) member_bad(en, "fails its CRC check (corrupt archive)");
    std::string label = path;
    label += ":";
    label += en.name;
    NpyArray a = parse_npy(std::move(raw), "ifu npz", label);
    if (!out.emplace(key, std::move(a)).second) member_bad(en, "appears twice");
  }
  return out;
}

void write_npy(const std::string& path, const std::vector<std::int64_t>& shape, const float* data) {
  std::int64_t n = 1;
  for (auto d : shape) {
    if (d < 0) fail("ifu npy", path, "negative dimension in shape");
    n *= d;
  }
  if (n > 0 && data == nullptr) fail("ifu npy", path, "no data given");
  std::string dict = "{'descr': '<f4', 'fortran_order': False, 'shape': (";
  for (std::size_t k = 0; k < shape.size(); ++k) {
    if (k) dict += ", ";
    dict += std::to_string(shape[k]);
  }
  if (shape.size() == 1) dict += ",";
  dict += "), }";
  // Pad with spaces and a newline so the data starts on a 64-byte boundary.
  const std::size_t total = (10 + dict.size() + 1 + 63) / 64 * 64;
  dict.append(total - 10 - dict.size() - 1, ' ');
  dict += '\n';
  if (dict.size() > 65535) fail("ifu npy", path, "shape too long for a version 1.0 header");
  std::string head = "\x93NUMPY";
  head += '\x01';
  head += '\x00';
  head += static_cast<char>(dict.size() & 0xff);
  head += static_cast<char>(dict.size() >> 8);
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) fail("ifu npy", path, std::string("cannot create: ") + std::strerror(errno));
  out.write(head.data(), static_cast<std::streamsize>(head.size()));
  out.write(dict.data(), static_cast<std::streamsize>(dict.size()));
  if (n > 0) out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(n * 4));
  out.close();
  if (!out) fail("ifu npy", path, "write error");
}

}  // namespace tessera::ifu
