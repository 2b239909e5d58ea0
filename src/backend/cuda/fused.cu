// Fused GPU kernels from generated CUDA source (backend/cuda/fused.hpp):
// NVRTC, opened with dlopen, compiles a group's source to a cubin for the
// GPU's architecture; the CUDA runtime's library API loads it.
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <nvrtc.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <mutex>
#include <sstream>
#include <string>
#include <unordered_map>
#include <vector>

#include "backend/cuda/fused.hpp"
#include "backend/cuda/stream.hpp"
#include "core/hash.hpp"
#include "tessera/error.hpp"

namespace tessera::cuda {

struct FusedKernel {
  cudaLibrary_t library = nullptr;
  cudaKernel_t kernel = nullptr;
  cudaKernel_t fix = nullptr;  // tessera_fused_fix, where the source splits its loop
};

namespace {

// NVRTC's entry points, from the shared library found at run time.
struct Nvrtc {
  decltype(&nvrtcCreateProgram) create = nullptr;
  decltype(&nvrtcCompileProgram) compile = nullptr;
  decltype(&nvrtcGetProgramLogSize) log_size = nullptr;
  decltype(&nvrtcGetProgramLog) log = nullptr;
  decltype(&nvrtcGetCUBINSize) cubin_size = nullptr;
  decltype(&nvrtcGetCUBIN) cubin = nullptr;
  decltype(&nvrtcDestroyProgram) destroy = nullptr;
  decltype(&nvrtcVersion) version = nullptr;
  std::string include;  // -I flags for libcu++ (the toolkit's include/ and include/cccl)
  std::string name;     // "NVRTC 13.0"
  std::string why_not;  // empty when loaded
};

template <class F>
bool sym(void* lib, const char* name, F& f) {
  f = reinterpret_cast<F>(dlsym(lib, name));
  return f != nullptr;
}

bool exists(const std::string& path) {
  struct stat st {};
  return stat(path.c_str(), &st) == 0;
}

// The toolkit's include folder holding libcu++ (cuda/std/...), which the
// generated source includes: next to the NVRTC library that was loaded
// (<toolkit>/lib or lib64 -> <toolkit>/include), else $CUDA_HOME,
// $CUDA_PATH, /usr/local/cuda.
std::string find_include(void* any_symbol) {
  std::vector<std::string> roots;
  Dl_info info{};
  if (dladdr(any_symbol, &info) != 0 && info.dli_fname != nullptr) {
    std::string lib = info.dli_fname;
    const auto slash = lib.rfind('/');
    if (slash != std::string::npos) roots.push_back(lib.substr(0, slash) + "/..");
  }
  for (const char* env : {"CUDA_HOME", "CUDA_PATH"})
    if (const char* v = std::getenv(env); v && *v) roots.push_back(v);
  roots.push_back("/usr/local/cuda");
  for (const std::string& r : roots) {
    const std::string inc = r + "/include";
    if (exists(inc + "/cccl/cuda/std/cstdint")) return "-I" + inc + "/cccl|-I" + inc;
    if (exists(inc + "/cuda/std/cstdint")) return "-I" + inc;
  }
  return "";
}

const Nvrtc& nvrtc() {
  static const Nvrtc n = [] {
    Nvrtc r;
    const std::string major = std::to_string(CUDART_VERSION / 1000);
    void* lib = nullptr;
    for (const std::string& name : {"libnvrtc.so." + major, std::string("libnvrtc.so")})
      if ((lib = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL)) != nullptr) break;
    if (lib == nullptr) {
      r.why_not = "NVRTC (libnvrtc.so." + major + ") was not found: " + dlerror();
      return r;
    }
    if (!sym(lib, "nvrtcCreateProgram", r.create) || !sym(lib, "nvrtcCompileProgram", r.compile) ||
        !sym(lib, "nvrtcGetProgramLogSize", r.log_size) || !sym(lib, "nvrtcGetProgramLog", r.log) ||
        !sym(lib, "nvrtcGetCUBINSize", r.cubin_size) || !sym(lib, "nvrtcGetCUBIN", r.cubin) ||
        !sym(lib, "nvrtcDestroyProgram", r.destroy) || !sym(lib, "nvrtcVersion", r.version)) {
      r.why_not = "NVRTC lacks an entry point this build needs";
      return r;
    }
    int maj = 0, min = 0;
    r.version(&maj, &min);
    r.name = "NVRTC " + std::to_string(maj) + "." + std::to_string(min);
    r.include = find_include(reinterpret_cast<void*>(r.create));
    if (r.include.empty()) r.why_not = "the CUDA toolkit's headers (cuda/std/...) were not found; set CUDA_HOME";
    return r;
  }();
  return n;
}

std::atomic<int> g_max_registers{0};  // set_fused_max_registers
std::mutex g_mu;  // the caches and the counters
std::unordered_map<std::string, std::shared_ptr<const FusedKernel>> g_loaded;  // key -> kernel
std::unordered_map<std::string, std::string> g_failed;                       // key -> why
FusedStats g_stats;

std::string arch_of(int ordinal) {
  int major = 0, minor = 0;
  if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, ordinal) != cudaSuccess ||
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, ordinal) != cudaSuccess) {
    (void)cudaGetLastError();
    return "";
  }
  return "sm_" + std::to_string(major) + std::to_string(minor);
}

// The cubin of `source` for `arch`, or "" with *why set.
std::string compile(const Nvrtc& n, const std::string& source, const std::string& arch, int max_registers,
                    std::string* why) {
  nvrtcProgram p = nullptr;
  if (n.create(&p, source.c_str(), "tessera_fused.cu", 0, nullptr, nullptr) != NVRTC_SUCCESS) {
    *why = "nvrtcCreateProgram failed";
    return "";
  }
  // The flags of every CUDA source of the library (cmake/cuda_options.cmake):
  // the GPU must give the CPU's bits.
  std::vector<std::string> flags = {"--gpu-architecture=" + arch, "--fmad=false", "--ftz=false", "--prec-div=true",
                                    "--prec-sqrt=true", "-std=c++20"};
  if (max_registers > 0) flags.push_back("--maxrregcount=" + std::to_string(max_registers));
  std::stringstream inc(n.include);
  for (std::string f; std::getline(inc, f, '|');) flags.push_back(f);
  std::vector<const char*> opts;
  for (const std::string& f : flags) opts.push_back(f.c_str());
  const nvrtcResult r = n.compile(p, static_cast<int>(opts.size()), opts.data());
  std::string cubin;
  if (r == NVRTC_SUCCESS) {
    std::size_t size = 0;
    if (n.cubin_size(p, &size) == NVRTC_SUCCESS && size > 0) {
      cubin.resize(size);
      if (n.cubin(p, cubin.data()) != NVRTC_SUCCESS) cubin.clear();
    }
    if (cubin.empty()) *why = "NVRTC gave no cubin for " + arch;
  } else {
    std::size_t size = 0;
    n.log_size(p, &size);
    std::string log(size, '\0');
    if (size > 0) n.log(p, log.data());
    *why = "NVRTC could not compile a fused group for " + arch + ": " + log.substr(0, 2000);
  }
  n.destroy(&p);
  return cubin;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return "";
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Written under a temporary name, then renamed: a concurrent reader sees
// the whole file or none.
void write_file(const std::string& path, const std::string& data) {
  const std::string tmp = path + ".tmp" + std::to_string(::getpid());
  {
    std::ofstream out(tmp, std::ios::binary);
    if (!out) return;
    out.write(data.data(), static_cast<std::streamsize>(data.size()));
    if (!out) return;
  }
  std::rename(tmp.c_str(), path.c_str());
}

}  // namespace

std::shared_ptr<const FusedKernel> fused_kernel(const std::string& source, const std::string& cache_dir,
                                                std::string* why) {
  const Current& c = current("jit");
  auto fail = [&](const std::string& w) -> std::shared_ptr<const FusedKernel> {
    if (why) *why = w;
    return nullptr;
  };
  if (c.emulated) return fail("an emulated GPU runs no CUDA code");
  const std::string arch = arch_of(c.ordinal);
  if (arch.empty()) return fail("the GPU's architecture could not be read");
  const Nvrtc& n = nvrtc();
  if (!n.why_not.empty()) return fail(n.why_not);
  const int max_registers = g_max_registers.load();
  const std::string key = detail::fnv1a_hex(source + "|" + arch + "|" + n.name +
                                            (max_registers > 0 ? "|r" + std::to_string(max_registers) : ""));
  std::lock_guard<std::mutex> lock(g_mu);
  if (auto it = g_loaded.find(key); it != g_loaded.end()) {
    ++g_stats.reused;
    return it->second;
  }
  if (auto it = g_failed.find(key); it != g_failed.end()) return fail(it->second);
  const std::string file = cache_dir.empty() ? "" : cache_dir + "/" + key + ".cubin";
  std::string cubin = file.empty() ? "" : read_file(file);
  const bool from_disk = !cubin.empty();
  std::string w;
  if (!from_disk) cubin = compile(n, source, arch, max_registers, &w);
  auto k = std::make_shared<FusedKernel>();
  if (!cubin.empty()) {
    cudaError_t e = cudaLibraryLoadData(&k->library, cubin.data(), nullptr, nullptr, 0, nullptr, nullptr, 0);
    if (e == cudaSuccess) e = cudaLibraryGetKernel(&k->kernel, k->library, "tessera_fused");
    if (e == cudaSuccess && source.find("tessera_fused_fix") != std::string::npos)
      e = cudaLibraryGetKernel(&k->fix, k->library, "tessera_fused_fix");
    if (e != cudaSuccess) {
      (void)cudaGetLastError();
      w = std::string("loading a fused kernel failed: ") + cudaGetErrorName(e);
      cubin.clear();
    }
  }
  if (cubin.empty()) {
    ++g_stats.failed;
    g_stats.last_error = w;
    g_failed[key] = w;
    return fail(w);
  }
  if (from_disk) {
    ++g_stats.loaded;
  } else {
    ++g_stats.compiled;
    if (!file.empty()) write_file(file, cubin);
  }
  g_loaded[key] = k;
  return k;
}

void launch_fused(const FusedKernel& k, const std::uint64_t* words, std::size_t nwords, std::size_t inputs,
                  std::size_t outputs, int slot, std::int64_t n, const char* op) {
  if (n <= 0) return;
  const Current& c = current(op);
  long long count = n;
  auto launch = [&](cudaKernel_t kernel, void** params) {
    const unsigned blocks = grid_blocks(reinterpret_cast<const void*>(kernel), n);
    check(static_cast<int>(cudaLaunchKernel(reinterpret_cast<const void*>(kernel), dim3(blocks),
                                            dim3(kLaunchThreads), params, 0, static_cast<cudaStream_t>(c.stream))),
          op, "a fused kernel launch");
  };
  void* params[] = {const_cast<std::uint64_t*>(words), &count, &slot};
  if (k.fix == nullptr) {
    launch(k.kernel, params);
    return;
  }
  // The fix-up reads the inputs after the first kernel has written its
  // outputs: where an output is an input, the fix-up alone (force: the
  // whole loop, slow path included) computes everything.
  const std::size_t first_out = inputs > 0 ? inputs : 1;
  int force = 0;
  for (std::size_t o = 0; o < outputs && first_out + o < nwords; ++o)
    for (std::size_t i = 0; i < inputs; ++i)
      if (words[first_out + o] == words[i]) force = 1;
  void* fix_params[] = {const_cast<std::uint64_t*>(words), &count, &slot, &force};
  if (force == 0) launch(k.kernel, params);
  launch(k.fix, fix_params);
}

void set_fused_max_registers(int registers) { g_max_registers.store(registers < 0 ? 0 : registers); }

FusedStats fused_stats() {
  std::lock_guard<std::mutex> lock(g_mu);
  return g_stats;
}

}  // namespace tessera::cuda
