// NumPy .npy and .npz files (the format NumPy documents in numpy.lib.format).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace tessera::ifu {

/// One array as stored: its shape, its NumPy dtype descriptor and its raw
/// little-endian C-order bytes.
struct NpyArray {
  std::vector<std::int64_t> shape;
  std::string dtype;  // numpy descr, e.g. "<f4", "<i8", "|u1", "|b1"
  std::vector<char> data;

  /// The values converted to float / double (any bool, int, uint or float
  /// dtype; others are an InputError).
  std::vector<float> to_f32() const;
  std::vector<double> to_f64() const;
  /// Number of elements (product of shape; 1 for a 0-d array).
  std::int64_t size() const;
};

/// Reads a .npy file (format versions 1.0, 2.0, 3.0). Fortran-order arrays,
/// big-endian, structured, object, string and complex dtypes are an InputError.
NpyArray read_npy(const std::string& path);

/// Reads every array of a .npz archive (np.savez: stored, np.savez_compressed:
/// deflated; zip64 records are understood). Keys are the member names without
/// ".npy". CRCs are checked.
std::map<std::string, NpyArray> read_npz(const std::string& path);

/// Writes a float32 ("<f4", C order, format 1.0) .npy file; overwrites.
void write_npy(const std::string& path, const std::vector<std::int64_t>& shape, const float* data);

}  // namespace tessera::ifu
