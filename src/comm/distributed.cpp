// Arrays over several processes: what a process holds, gathering the rest,
// and building an array from what each process holds (tessera/distributed.hpp).
#include "tessera/distributed.hpp"

#include <algorithm>
#include <cstring>

#include "comm/process.hpp"
#include "core/array_impl.hpp"
#include "core/checked.hpp"

namespace tessera {

bool is_fully_addressable(const Array& array) {
  const detail::Runtime& rt = detail::Runtime::get();
  for (const Device& d : array.sharding().mesh().devices())
    if (!rt.is_local(d.id())) return false;
  return true;
}

namespace detail {

std::vector<unsigned char> process_allgather_bytes(const void* data, std::size_t nbytes) {
  std::vector<std::vector<unsigned char>> parts = allgather_processes(data, nbytes, "process_allgather");
  std::vector<unsigned char> out;
  for (const auto& p : parts) {
    if (p.size() != nbytes)
      throw ShapeError("[process_allgather] every process must pass the same number of bytes: this one passed " +
                       std::to_string(nbytes) + ", another " + std::to_string(p.size()));
    out.insert(out.end(), p.begin(), p.end());
  }
  return out;
}

void process_allgather_raw(const Array& array, void* out, DType as) {
  const ArrayImpl& a = *array.impl();
  if (a.trace) throw Error("[process_allgather] expected a concrete array, got a value traced by " +
                           std::string(a.traced_by));
  const Runtime& rt = Runtime::get();
  if (rt.process_count() == 1) {
    array.copy_to_host(out, as, "process_allgather");
    return;
  }
  // Each distinct block is sent by the first process (in mesh order) whose
  // device holds it; every process packs the blocks it sends, in mesh order.
  // Every process takes this path, whatever it holds (a mesh of one
  // process's devices included): the exchange is the same on all of them.
  const Mesh& mesh = a.sharding.mesh();
  const std::size_t isz = itemsize(a.dtype);
  std::vector<std::vector<Slice>> blocks;
  std::vector<int> sender, holder;  // per distinct block: process, position
  for (int pos = 0; pos < mesh.size(); ++pos) {
    auto idx = a.sharding.shard_index(a.shape, pos);
    if (box_empty(idx) || std::find(blocks.begin(), blocks.end(), idx) != blocks.end()) continue;
    blocks.push_back(idx);
    sender.push_back(rt.process_of(mesh.devices()[pos].id()));
    holder.push_back(pos);
  }
  const int me = rt.process_index();
  std::vector<unsigned char> mine;
  for (size_t b = 0; b < blocks.size(); ++b) {
    if (sender[b] != me) continue;
    const std::size_t n = static_cast<std::size_t>(num_elements(box_shape(blocks[b]))) * isz;
    mine.resize(mine.size() + n);
    read_buffer(a.buffers[holder[b]], mine.data() + mine.size() - n, n, "process_allgather");
  }
  const auto parts = allgather_processes(mine.data(), mine.size(), "process_allgather");
  std::vector<unsigned char> staging;
  void* dst = out;
  if (as != a.dtype) {
    staging.resize(static_cast<std::size_t>(num_elements(a.shape)) * isz);
    dst = staging.data();
  }
  const std::vector<Slice> whole = whole_box(a.shape);
  std::vector<std::size_t> offset(parts.size(), 0);
  for (size_t b = 0; b < blocks.size(); ++b) {
    const std::size_t n = static_cast<std::size_t>(num_elements(box_shape(blocks[b]))) * isz;
    const auto& part = parts[sender[b]];
    if (offset[sender[b]] + n > part.size())
      throw CollectiveError("[process_allgather] process " + std::to_string(sender[b]) +
                            " sent fewer bytes than its blocks of " + typeof(array) + " hold");
    copy_box(part.data() + offset[sender[b]], blocks[b], dst, whole, blocks[b], isz);
    offset[sender[b]] += n;
  }
  if (as != a.dtype) convert_checked(dst, a.dtype, out, as, num_elements(a.shape), "process_allgather");
}

Array array_from_process_local(const NamedSharding& sharding, const void* data, DType dtype, const Shape& local_shape,
                               const std::optional<Shape>& global_shape) {
  const char* op = "make_array_from_process_local_data";
  const Runtime& rt = Runtime::get();
  const Mesh& mesh = sharding.mesh();
  const int rank = static_cast<int>(local_shape.size());
  sharding.check_rank(rank, op);
  std::vector<int> local;  // positions of this process's devices
  for (int pos = 0; pos < mesh.size(); ++pos)
    if (rt.is_local(mesh.devices()[pos].id())) local.push_back(pos);
  Shape shape;
  if (global_shape) {
    shape = *global_shape;
    if (static_cast<int>(shape.size()) != rank)
      throw ShapeError("[" + std::string(op) + "] global shape " + shape_str(shape) + " and local shape " +
                       shape_str(local_shape) + " differ in rank");
  } else {
    // Even division: a dim split into k blocks of which this process holds
    // l contiguous ones is l/k of the global dim.
    shape = local_shape;
    for (int d = 0; d < rank; ++d) {
      std::int64_t k = 1;
      for (const auto& ax : sharding.spec()[d].axes()) k *= mesh.axis_size(ax);
      if (k == 1 || local.empty()) continue;
      // The block coordinate of each local position on dim d: its start in
      // a shape with k elements there.
      Shape probe(rank, 1);
      probe[d] = k;
      std::vector<std::int64_t> coords;
      for (int pos : local) coords.push_back(sharding.shard_index(probe, pos)[d].start);
      std::sort(coords.begin(), coords.end());
      coords.erase(std::unique(coords.begin(), coords.end()), coords.end());
      const auto l = static_cast<std::int64_t>(coords.size());
      if (local_shape[d] % l != 0)
        throw ShapeError("[" + std::string(op) + "] cannot infer the global shape: dim " + std::to_string(d) +
                         " of local shape " + shape_str(local_shape) + " is not divisible among this process's " +
                         std::to_string(l) + " blocks; pass global_shape");
      shape[d] = local_shape[d] / l * k;
    }
  }
  checked_nbytes(shape, dtype, op);
  // The box this process's blocks cover, which must be exactly their union.
  std::vector<Slice> box;
  std::int64_t covered = 0;
  std::vector<std::vector<Slice>> seen;
  for (int pos : local) {
    const auto idx = sharding.shard_index(shape, pos);
    if (std::find(seen.begin(), seen.end(), idx) != seen.end()) continue;
    seen.push_back(idx);
    covered += num_elements(box_shape(idx));
    if (box.empty()) {
      box = idx;
    } else {
      for (int d = 0; d < rank; ++d) box[d] = {std::min(box[d].start, idx[d].start), std::max(box[d].stop, idx[d].stop)};
    }
  }
  if (box.empty()) box.assign(rank, Slice{0, 0});
  if (covered != num_elements(box_shape(box)) && !local.empty())
    throw ShardingError("[" + std::string(op) + "] the blocks of process " + std::to_string(rt.process_index()) +
                        " under " + sharding.str() + " do not form one box of " + shape_str(shape) +
                        "; build the array with make_array_from_callback");
  if (box_shape(box) != local_shape && !local.empty())
    throw ShapeError("[" + std::string(op) + "] process " + std::to_string(rt.process_index()) + " holds the box " +
                     shape_str(box_shape(box)) + " of global shape " + shape_str(shape) + " under " + sharding.str() +
                     ", but its local data has shape " + shape_str(local_shape));
  const std::size_t isz = itemsize(dtype);
  return make_array(shape, dtype, sharding, [&](int pos, Buffer& b) {
    if (b.nbytes() == 0) return;
    const auto idx = sharding.shard_index(shape, pos);
    if (b.on_host()) {
      copy_box(data, box, b.data(), idx, idx, isz);
      return;
    }
    // A GPU's block: gathered on the host, then copied over at once.
    Buffer h = Buffer::host_staging(b.device_id(), b.nbytes());
    copy_box(data, box, h.data(), idx, idx, isz);
    write_buffer(b, h.data(), b.nbytes(), op);
  });
}

}  // namespace detail
}  // namespace tessera
