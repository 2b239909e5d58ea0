// FITS cubes through cfitsio. Files are opened and created with the
// *_diskfile calls, which take the path literally (no cfitsio extended file
// name syntax: a '[' or '!' in a path is just a character).
//
// The cube is [iy][ix][wave] in memory and (wave, y, x) in the file (x
// fastest), so it is transposed in blocks of whole wavelength planes: each
// block costs one contiguous run of nwave values per spaxel read and one
// cfitsio call, and the buffer stays bounded for large cubes.
#include "ifu/fits.hpp"

#include <fitsio.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <filesystem>
#include <optional>
#include <set>

#include "ifu/errors.hpp"

namespace tessera::ifu {

namespace {

[[noreturn]] void fail(const std::string& path, const std::string& what) { fail_input("ifu fits", path, what); }

// cfitsio's status text and its message stack, then clears the stack.
[[noreturn]] void cfitsio_fail(const std::string& path, const char* doing, int status) {
  char text[FLEN_STATUS] = {0};
  fits_get_errstatus(status, text);
  std::string w = doing;
  w += ": cfitsio error ";
  w += std::to_string(status);
  w += " (";
  w += text;
  w += ")";
  char line[FLEN_ERRMSG] = {0};
  std::string stack;
  while (fits_read_errmsg(line)) {
    if (!stack.empty()) stack += "; ";
    stack += line;
  }
  fits_clear_errmsg();
  if (!stack.empty()) {
    w += ": ";
    w += stack;
  }
  fail(path, w);
}

// Closes the file on every exit; the writer closes explicitly to see errors.
struct FitsCloser {
  fitsfile* f = nullptr;
  ~FitsCloser() {
    if (f) {
      int status = 0;
      fits_close_file(f, &status);
    }
  }
};

// Rows of block planes per cfitsio call: about 64 MiB of float32.
std::int64_t planes_per_block(std::int64_t plane, std::int64_t nwave) {
  const std::int64_t budget = (std::int64_t{64} << 20) / 4;
  return std::max<std::int64_t>(1, std::min<std::int64_t>(nwave, budget / std::max<std::int64_t>(plane, 1)));
}

std::optional<long long> as_integer(const std::string& s) {
  long long v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || ec != std::errc() || p != s.data() + s.size()) return std::nullopt;
  return v;
}

std::optional<double> as_double(std::string s) {
  // FITS allows a D exponent (Fortran style).
  for (char& c : s)
    if (c == 'D' || c == 'd') c = 'E';
  std::size_t start = (!s.empty() && s[0] == '+') ? 1 : 0;
  double v = 0;
  auto [p, ec] = std::from_chars(s.data() + start, s.data() + s.size(), v);
  if (s.size() == start || ec != std::errc() || p != s.data() + s.size() || !std::isfinite(v)) return std::nullopt;
  // from_chars takes "inf"/"nan" spellings; finiteness excludes them.
  return v;
}

std::string trim(const std::string& s) {
  std::size_t a = 0, b = s.size();
  while (a < b && std::isspace(static_cast<unsigned char>(s[a]))) ++a;
  while (b > a && std::isspace(static_cast<unsigned char>(s[b - 1]))) --b;
  return s.substr(a, b - a);
}

}  // namespace

void write_cube_fits(const std::string& path, const float* cube, std::int64_t ny, std::int64_t nx, std::int64_t nwave,
                     const CubeWcs& wcs) {
  if (nx <= 0 || ny <= 0 || nwave <= 0) {
    std::string w = "the cube must have positive sizes, got ny=";
    w += std::to_string(ny);
    w += ", nx=";
    w += std::to_string(nx);
    w += ", nwave=";
    w += std::to_string(nwave);
    fail(path, w);
  }
  if (cube == nullptr) fail(path, "no cube data given");
  if (!(wcs.spaxel_arcsec > 0) || !std::isfinite(wcs.spaxel_arcsec) || !std::isfinite(wcs.wave0) || !(wcs.dwave > 0) ||
      !std::isfinite(wcs.dwave))
    fail(path, "the WCS needs spaxel_arcsec > 0, a finite wave0 and dwave > 0");
  // Check the extra cards before touching the file.
  static const std::set<std::string> reserved = {
      "SIMPLE", "BITPIX", "NAXIS",  "NAXIS1", "NAXIS2", "NAXIS3",   "EXTEND",   "WCSAXES", "CTYPE1", "CTYPE2", "CTYPE3",
      "CUNIT1", "CUNIT2", "CUNIT3", "CRPIX1", "CRPIX2", "CRPIX3",   "CRVAL1",   "CRVAL2",  "CRVAL3", "CDELT1", "CDELT2",
      "CDELT3", "BUNIT",  "BSCALE", "BZERO",  "END",    "CONTINUE", "XTENSION", "PCOUNT",  "GCOUNT"};
  std::vector<std::string> keys;
  for (const auto& card : wcs.cards) {
    std::string key = std::get<0>(card);
    for (char& c : key) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    const bool ok = !key.empty() && key.size() <= 8 && std::all_of(key.begin(), key.end(), [](char c) {
      return (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
    });
    if (!ok) fail(path, "header key '" + std::get<0>(card) + "' must be 1 to 8 characters of A-Z, 0-9, _ or -");
    if (reserved.count(key)) fail(path, "header key '" + key + "' is set by the cube writer itself");
    if (std::find(keys.begin(), keys.end(), key) != keys.end()) fail(path, "header key '" + key + "' given twice");
    keys.push_back(key);
  }

  std::error_code ec;
  std::filesystem::remove(path, ec);  // overwrite: cfitsio refuses existing files
  FitsCloser fc;
  int status = 0;
  if (fits_create_diskfile(&fc.f, path.c_str(), &status)) cfitsio_fail(path, "cannot create the file", status);
  LONGLONG naxes[3] = {nx, ny, nwave};
  fits_create_imgll(fc.f, FLOAT_IMG, 3, naxes, &status);

  auto key_str = [&](const char* key, const std::string& value, const char* comment) {
    fits_write_key_str(fc.f, key, value.c_str(), comment, &status);
  };
  auto key_dbl = [&](const char* key, double value, const char* comment) {
    fits_write_key_dbl(fc.f, key, value, -15, comment, &status);
  };
  int wcsaxes = 3;
  fits_write_key(fc.f, TINT, "WCSAXES", &wcsaxes, "number of WCS axes", &status);
  key_str("CTYPE1", "XOFFSET", "x offset from the cube centre");
  key_str("CTYPE2", "YOFFSET", "y offset from the cube centre");
  key_str("CTYPE3", "WAVE", "observed-frame wavelength");
  key_str("CUNIT1", "arcsec", "");
  key_str("CUNIT2", "arcsec", "");
  key_str("CUNIT3", "Angstrom", "");
  key_dbl("CRPIX1", (static_cast<double>(nx) + 1) / 2, "reference pixel: the cube centre");
  key_dbl("CRPIX2", (static_cast<double>(ny) + 1) / 2, "reference pixel: the cube centre");
  key_dbl("CRPIX3", 1, "reference pixel: the first plane");
  key_dbl("CRVAL1", 0, "");
  key_dbl("CRVAL2", 0, "");
  key_dbl("CRVAL3", wcs.wave0, "wavelength of the first plane");
  key_dbl("CDELT1", wcs.spaxel_arcsec, "spaxel size");
  key_dbl("CDELT2", wcs.spaxel_arcsec, "spaxel size");
  key_dbl("CDELT3", wcs.dwave, "wavelength step");
  key_str("BUNIT", wcs.bunit, "per spaxel");
  for (std::size_t k = 0; k < wcs.cards.size(); ++k) {
    const std::string& value = std::get<1>(wcs.cards[k]);
    const std::string& comment = std::get<2>(wcs.cards[k]);
    const char* key = keys[k].c_str();
    if (auto i = as_integer(value)) {
      LONGLONG v = *i;
      fits_write_key(fc.f, TLONGLONG, key, &v, comment.c_str(), &status);
    } else if (auto d = as_double(value)) {
      key_dbl(key, *d, comment.c_str());
    } else {
      // Long strings continue over CONTINUE cards.
      fits_write_key_longstr(fc.f, key, value.c_str(), comment.c_str(), &status);
    }
  }
  if (status) cfitsio_fail(path, "cannot write the header", status);

  const std::int64_t plane = nx * ny;
  const std::int64_t block = planes_per_block(plane, nwave);
  std::vector<float> buf(static_cast<std::size_t>(block * plane));
  for (std::int64_t w0 = 0; w0 < nwave; w0 += block) {
    const std::int64_t b = std::min(block, nwave - w0);
    for (std::int64_t p = 0; p < plane; ++p) {  // p = iy * nx + ix
      const float* src = cube + p * nwave + w0;
      for (std::int64_t k = 0; k < b; ++k) buf[static_cast<std::size_t>(k * plane + p)] = src[k];
    }
    if (fits_write_img(fc.f, TFLOAT, static_cast<LONGLONG>(w0 * plane + 1), static_cast<LONGLONG>(b * plane),
                       buf.data(), &status))
      cfitsio_fail(path, "cannot write the data", status);
  }
  fitsfile* f = fc.f;
  fc.f = nullptr;
  if (fits_close_file(f, &status)) cfitsio_fail(path, "cannot finish the file", status);
}

FitsCube read_cube_fits(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec))
    fail(path, std::filesystem::exists(path, ec) ? "not a regular file" : "no such file");
  FitsCloser fc;
  int status = 0;
  if (fits_open_diskfile(&fc.f, path.c_str(), READONLY, &status)) cfitsio_fail(path, "cannot open", status);
  int naxis = 0;
  fits_get_img_dim(fc.f, &naxis, &status);
  if (status) cfitsio_fail(path, "cannot read the image size", status);
  if (naxis != 3)
    fail(path, "the primary image must be 3-d (x, y, wavelength), it has NAXIS = " + std::to_string(naxis));
  LONGLONG naxes[3] = {0, 0, 0};
  if (fits_get_img_sizell(fc.f, 3, naxes, &status)) cfitsio_fail(path, "cannot read the image size", status);
  FitsCube out;
  out.nx = naxes[0];
  out.ny = naxes[1];
  out.nwave = naxes[2];

  int nkeys = 0;
  fits_get_hdrspace(fc.f, &nkeys, nullptr, &status);
  for (int i = 1; i <= nkeys && !status; ++i) {
    char key[FLEN_KEYWORD] = {0}, value[FLEN_VALUE] = {0}, comment[FLEN_COMMENT] = {0};
    if (fits_read_keyn(fc.f, i, key, value, comment, &status)) break;
    const std::string k = key;
    if (k.empty() || k == "CONTINUE") continue;
    if (k == "COMMENT" || k == "HISTORY") {
      std::string& acc = out.header[k];
      if (!acc.empty()) acc += "\n";
      acc += comment;
      continue;
    }
    if (value[0] == '\'') {
      char* longstr = nullptr;
      char c2[FLEN_COMMENT] = {0};
      if (fits_read_key_longstr(fc.f, key, &longstr, c2, &status)) break;
      out.header[k] = longstr ? longstr : "";
      if (longstr) fits_free_memory(longstr, &status);
    } else {
      out.header[k] = trim(value);
    }
  }
  if (status) cfitsio_fail(path, "cannot read the header", status);

  const std::int64_t plane = out.nx * out.ny;
  out.data.resize(static_cast<std::size_t>(plane * out.nwave));
  const std::int64_t block = planes_per_block(plane, out.nwave);
  std::vector<float> buf(static_cast<std::size_t>(block * plane));
  for (std::int64_t w0 = 0; w0 < out.nwave; w0 += block) {
    const std::int64_t b = std::min(block, out.nwave - w0);
    float nulval = 0;
    int anynul = 0;
    if (fits_read_img(fc.f, TFLOAT, static_cast<LONGLONG>(w0 * plane + 1), static_cast<LONGLONG>(b * plane), &nulval,
                      buf.data(), &anynul, &status))
      cfitsio_fail(path, "cannot read the data", status);
    for (std::int64_t p = 0; p < plane; ++p) {
      float* dst = out.data.data() + p * out.nwave + w0;
      for (std::int64_t k = 0; k < b; ++k) dst[k] = buf[static_cast<std::size_t>(k * plane + p)];
    }
  }
  return out;
}

double FitsCube::number(const std::string& key) const {
  const std::string t = text(key);
  auto v = as_double(t);
  if (!v) {
    std::string msg = "[ifu fits] header key '";
    msg += key;
    msg += "' is not a number: '";
    msg += t;
    msg += "'";
    throw InputError(msg);
  }
  return *v;
}

std::string FitsCube::text(const std::string& key) const {
  auto it = header.find(key);
  if (it == header.end()) {
    std::string msg = "[ifu fits] the header has no key '";
    msg += key;
    msg += "'";
    throw InputError(msg);
  }
  return it->second;
}

}  // namespace tessera::ifu
