#include <cstdio>
#include <numeric>

#include "tessera/explain.hpp"

namespace tessera {

namespace {
thread_local detail::ExplainScope* t_scope = nullptr;
}

std::string format_bytes(std::int64_t b) {
  const char* unit[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(b);
  int u = 0;
  while (v >= 1024.0 && u < 4) {
    v /= 1024.0;
    ++u;
  }
  char buf[48];
  if (u == 0)
    std::snprintf(buf, sizeof buf, "%lld B", static_cast<long long>(b));
  else
    std::snprintf(buf, sizeof buf, "%.1f %s", v, unit[u]);
  return buf;
}

std::int64_t CommRecord::bytes_moved() const {
  return std::accumulate(bytes_received.begin(), bytes_received.end(), std::int64_t{0});
}

std::string CommRecord::str() const {
  std::string s = op + " " + kind + ": " + std::to_string(pieces) + " pieces, " + format_bytes(bytes_moved()) +
                  " moved between devices; received per device [";
  for (size_t i = 0; i < bytes_received.size(); ++i) {
    if (i) s += ", ";
    s += format_bytes(bytes_received[i]);
  }
  return s + "]";
}

std::int64_t Explanation::bytes_moved() const {
  std::int64_t b = 0;
  for (const auto& r : records) b += r.bytes_moved();
  return b;
}

std::string Explanation::str() const {
  std::string s;
  for (const auto& r : records) s += r.str() + "\n";
  return s;
}

namespace detail {

ExplainScope::ExplainScope() : parent_(t_scope) { t_scope = this; }
ExplainScope::~ExplainScope() { t_scope = parent_; }
Explanation ExplainScope::take() { return std::move(result_); }

namespace {
thread_local std::vector<CommRecord>* t_redirect_to = nullptr;
thread_local bool t_redirect = false;
}  // namespace

RecordRedirect::RecordRedirect(std::vector<CommRecord>* to) : prev_to_(t_redirect_to), prev_active_(t_redirect) {
  t_redirect_to = to;
  t_redirect = true;
}

RecordRedirect::~RecordRedirect() {
  t_redirect_to = prev_to_;
  t_redirect = prev_active_;
}

void record_comm(const CommRecord& r) {
  if (t_redirect) {
    if (t_redirect_to) t_redirect_to->push_back(r);
    return;
  }
  for (ExplainScope* s = t_scope; s != nullptr; s = s->parent_) s->result_.records.push_back(r);
}

}  // namespace detail
}  // namespace tessera
