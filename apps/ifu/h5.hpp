// HDF5 plumbing shared by the galaxy readers: owned identifiers, an open
// file whose failures become InputErrors naming it, and quiet error printing.
#pragma once

#include <hdf5.h>

#include <cctype>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "ifu/errors.hpp"

namespace tessera::ifu::h5 {

inline std::string quoted(const std::string& s) {
  std::string q = "'";
  q += s;
  q += "'";
  return q;
}

// Silences HDF5's automatic error printing while alive (failures become
// InputErrors with the library's innermost message instead) and restores it.
class QuietHdf5 {
 public:
  QuietHdf5() {
    H5Eget_auto2(H5E_DEFAULT, &func_, &data_);
    H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  }
  ~QuietHdf5() { H5Eset_auto2(H5E_DEFAULT, func_, data_); }
  QuietHdf5(const QuietHdf5&) = delete;
  QuietHdf5& operator=(const QuietHdf5&) = delete;

 private:
  H5E_auto2_t func_ = nullptr;
  void* data_ = nullptr;
};

// The innermost description on HDF5's error stack (the root cause), or "".
inline std::string hdf5_message() {
  std::string out;
  H5Ewalk2(
      H5E_DEFAULT, H5E_WALK_DOWNWARD,
      [](unsigned, const H5E_error2_t* e, void* data) -> herr_t {
        if (e->desc && *e->desc) *static_cast<std::string*>(data) = e->desc;
        return 0;
      },
      &out);
  H5Eclear2(H5E_DEFAULT);
  return out;
}

// An owned HDF5 identifier, closed with the matching H5?close.
class Id {
 public:
  using Closer = herr_t (*)(hid_t);
  Id() = default;
  Id(hid_t id, Closer close) : id_(id), close_(close) {}
  Id(Id&& o) noexcept : id_(o.id_), close_(o.close_) { o.id_ = H5I_INVALID_HID; }
  Id& operator=(Id&& o) noexcept {
    if (this != &o) {
      reset();
      id_ = o.id_;
      close_ = o.close_;
      o.id_ = H5I_INVALID_HID;
    }
    return *this;
  }
  Id(const Id&) = delete;
  Id& operator=(const Id&) = delete;
  ~Id() { reset(); }
  hid_t get() const { return id_; }
  bool ok() const { return id_ >= 0; }

 private:
  void reset() {
    if (id_ >= 0 && close_) close_(id_);
    id_ = H5I_INVALID_HID;
  }
  hid_t id_ = H5I_INVALID_HID;
  Closer close_ = nullptr;
};

// An open HDF5 file and the context for its messages.
class H5File {
 public:
  H5File(const std::string& path, const char* ctx, bool create) : path_(path), ctx_(ctx) {
    if (create) {
      file_ = Id(H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT), H5Fclose);
      if (!file_.ok()) bad("cannot create the HDF5 file", true);
      return;
    }
    std::error_code ec;
    if (!std::filesystem::is_regular_file(path, ec))
      bad(std::filesystem::exists(path, ec) ? "not a regular file" : "no such file");
    file_ = Id(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), H5Fclose);
    if (!file_.ok()) bad("cannot open as HDF5", true);
  }

  [[noreturn]] void bad(const std::string& what, bool with_hdf5 = false) const {
    std::string w = what;
    if (with_hdf5) {
      const std::string h = hdf5_message();
      if (!h.empty()) {
        w += " (HDF5: ";
        w += h;
        w += ")";
      }
    }
    fail_input(ctx_, path_, w);
  }

  // Whether every component of `name` ("a/b/c") exists as a link.
  bool exists(const std::string& name) const {
    std::size_t pos = 0;
    for (;;) {
      pos = name.find('/', pos + 1);
      const std::string part = name.substr(0, pos);
      if (H5Lexists(file_.get(), part.c_str(), H5P_DEFAULT) <= 0) return false;
      if (pos == std::string::npos) return true;
    }
  }

  Id open_dataset(const std::string& name) const {
    if (!exists(name)) bad("missing dataset " + quoted("/" + name));
    Id d(H5Dopen2(file_.get(), name.c_str(), H5P_DEFAULT), H5Dclose);
    if (!d.ok()) bad(quoted("/" + name) + " is not a dataset", true);
    return d;
  }

  // The dataset's shape; its element type must be an integer or a float.
  std::vector<std::int64_t> numeric_shape(const Id& d, const std::string& name) const {
    Id type(H5Dget_type(d.get()), H5Tclose);
    const H5T_class_t cls = H5Tget_class(type.get());
    if (cls != H5T_INTEGER && cls != H5T_FLOAT) {
      std::string w = quoted("/" + name);
      w += " must hold numbers, it holds ";
      w += cls == H5T_STRING     ? "strings"
           : cls == H5T_COMPOUND ? "compound records"
           : cls == H5T_ENUM     ? "enum values"
                                 : "non-numeric values";
      bad(w);
    }
    Id space(H5Dget_space(d.get()), H5Sclose);
    const int rank = H5Sget_simple_extent_ndims(space.get());
    if (rank < 0) bad(quoted("/" + name) + ": unreadable dataspace", true);
    std::vector<hsize_t> dims(static_cast<std::size_t>(rank));
    H5Sget_simple_extent_dims(space.get(), dims.data(), nullptr);
    return {dims.begin(), dims.end()};
  }

  // The whole dataset converted by HDF5 to T (float or double), one H5Dread.
  template <class T>
  std::vector<T> read(const Id& d, const std::string& name, std::int64_t count) const {
    std::vector<T> out(static_cast<std::size_t>(count));
    const hid_t mem = std::is_same_v<T, float> ? H5T_NATIVE_FLOAT : H5T_NATIVE_DOUBLE;
    if (count > 0 && H5Dread(d.get(), mem, H5S_ALL, H5S_ALL, H5P_DEFAULT, out.data()) < 0)
      bad("cannot read " + quoted("/" + name), true);
    return out;
  }

  // The whole numeric dataset as T, with its shape.
  template <class T>
  std::vector<T> read_all(const Id& d, const std::string& name, std::vector<std::int64_t>& shape) const {
    shape = numeric_shape(d, name);
    std::int64_t count = 1;
    for (auto s : shape) count *= s;
    return read<T>(d, name, count);
  }

  // The string attribute `unit` of a dataset, if it has one.
  std::optional<std::string> unit(const Id& d, const std::string& name) const {
    if (H5Aexists(d.get(), "unit") <= 0) return std::nullopt;
    Id attr(H5Aopen(d.get(), "unit", H5P_DEFAULT), H5Aclose);
    Id type(H5Aget_type(attr.get()), H5Tclose);
    Id space(H5Aget_space(attr.get()), H5Sclose);
    if (H5Tget_class(type.get()) != H5T_STRING || H5Sget_simple_extent_npoints(space.get()) != 1)
      bad("the 'unit' attribute of " + quoted("/" + name) + " must be a single string");
    Id mem(H5Tcopy(H5T_C_S1), H5Tclose);
    H5Tset_cset(mem.get(), H5Tget_cset(type.get()));  // HDF5 does not convert between ASCII and UTF-8
    std::string text;
    if (H5Tis_variable_str(type.get()) > 0) {
      H5Tset_size(mem.get(), H5T_VARIABLE);
      char* s = nullptr;
      if (H5Aread(attr.get(), mem.get(), &s) < 0) bad("cannot read the unit of " + quoted("/" + name), true);
      if (s) text = s;
      H5free_memory(s);
    } else {
      const std::size_t size = H5Tget_size(type.get());
      H5Tset_size(mem.get(), size);
      H5Tset_strpad(mem.get(), H5T_STR_NULLPAD);
      std::vector<char> buf(size + 1, '\0');
      if (H5Aread(attr.get(), mem.get(), buf.data()) < 0) bad("cannot read the unit of " + quoted("/" + name), true);
      text.assign(buf.data(), strnlen(buf.data(), size));
    }
    while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back()))) text.pop_back();
    return text;
  }

  // Whether `name` exists and is a group.
  bool is_group(const std::string& name) const {
    if (!exists(name)) return false;
    Id g(H5Gopen2(file_.get(), name.c_str(), H5P_DEFAULT), H5Gclose);
    H5Eclear2(H5E_DEFAULT);
    return g.ok();
  }

  Id open_group(const std::string& name) const {
    if (!exists(name)) bad("missing group " + quoted("/" + name));
    Id g(H5Gopen2(file_.get(), name.c_str(), H5P_DEFAULT), H5Gclose);
    if (!g.ok()) bad(quoted("/" + name) + " is not a group", true);
    return g;
  }

  // The numeric attribute `attr` of the object `obj` (`where` names it in
  // messages), which must hold one number; nullopt when it is absent.
  std::optional<double> number_attr(hid_t obj, const char* attr, const std::string& where) const {
    if (H5Aexists(obj, attr) <= 0) return std::nullopt;
    Id a(H5Aopen(obj, attr, H5P_DEFAULT), H5Aclose);
    Id type(H5Aget_type(a.get()), H5Tclose);
    Id space(H5Aget_space(a.get()), H5Sclose);
    const H5T_class_t cls = H5Tget_class(type.get());
    std::string what = "the attribute ";
    what += quoted(attr);
    what += " of ";
    what += quoted(where);
    if ((cls != H5T_INTEGER && cls != H5T_FLOAT) || H5Sget_simple_extent_npoints(space.get()) != 1)
      bad(what + " must be a single number");
    double v = 0;
    if (H5Aread(a.get(), H5T_NATIVE_DOUBLE, &v) < 0) bad("cannot read " + what, true);
    return v;
  }

  hid_t id() const { return file_.get(); }
  const std::string& path() const { return path_; }
  const char* ctx() const { return ctx_; }

 private:
  std::string path_;
  const char* ctx_;
  Id file_;
};

// ---- writing (the files this app writes: galaxies, gradients)

// A variable-length UTF-8 string attribute (what h5py writes).
inline void write_attr_string(const H5File& f, hid_t obj, const char* name, const std::string& value) {
  Id type(H5Tcopy(H5T_C_S1), H5Tclose);
  H5Tset_size(type.get(), H5T_VARIABLE);
  H5Tset_cset(type.get(), H5T_CSET_UTF8);
  Id space(H5Screate(H5S_SCALAR), H5Sclose);
  Id attr(H5Acreate2(obj, name, type.get(), space.get(), H5P_DEFAULT, H5P_DEFAULT), H5Aclose);
  const char* s = value.c_str();
  if (!attr.ok() || H5Awrite(attr.get(), type.get(), &s) < 0)
    f.bad(std::string("cannot write attribute ") + name, true);
}

template <class T>
void write_dataset(const H5File& f, const std::string& name, const std::vector<hsize_t>& dims, const T* data,
                   const char* unit) {
  const hid_t type = std::is_same_v<T, float> ? H5T_IEEE_F32LE : H5T_IEEE_F64LE;
  const hid_t mem = std::is_same_v<T, float> ? H5T_NATIVE_FLOAT : H5T_NATIVE_DOUBLE;
  Id space(dims.empty() ? H5Screate(H5S_SCALAR) : H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr),
           H5Sclose);
  Id d(H5Dcreate2(f.id(), name.c_str(), type, space.get(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), H5Dclose);
  if (!d.ok()) f.bad("cannot create dataset " + quoted("/" + name), true);
  hsize_t count = 1;
  for (auto x : dims) count *= x;
  if (count > 0 && H5Dwrite(d.get(), mem, H5S_ALL, H5S_ALL, H5P_DEFAULT, data) < 0)
    f.bad("cannot write dataset " + quoted("/" + name), true);
  if (unit) write_attr_string(f, d.get(), "unit", unit);
}

inline Id make_group(const H5File& f, const char* name) {
  Id g(H5Gcreate2(f.id(), name, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), H5Gclose);
  if (!g.ok()) f.bad(std::string("cannot create group ") + name, true);
  return g;
}

}  // namespace tessera::ifu::h5
