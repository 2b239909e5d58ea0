// check_layers: keeps the layer stack of docs/layers.md.
//
// The source is a stack of layers (runtime < core < sharding < ... < apps and
// tools). A file may include headers of its own layer and of the layers below
// it, never of a layer above: that is what lets each layer be built, tested
// and reasoned about without the ones above it. The stack is data in
// tests/layers/layers.txt; this program reads it and checks every quoted
// #include of every source file under src/, apps/ and tools/, and of the
// public headers under include/.
//
// Rules:
//  - A file's layer is given by the table: src/<folder>/... by its folder,
//    each src/backend/<name>/ as its own sibling in the backend layer,
//    include/tessera/<h>.hpp by the header's entry, apps/ and tools/ as the
//    top layer. A file under src/ (or a public header) that the table does
//    not place is an error: a new folder must be given a place in the stack.
//  - An included file is found the way the build finds it: next to the
//    including file, then under src/, include/, the repository root, and
//    apps/ (the IFU application's headers are included as "ifu/...").
//    <...> includes are system headers and are not read. A quoted include
//    that is not found is an error when it names a project path (a layer
//    folder or tessera/), since then the tree is broken; otherwise (a header
//    of the examples or benchmarks, a generated header) it is noted and
//    skipped.
//  - Including a file of a higher layer is a violation, and so is one
//    backend including another: backends are alternatives, and a backend
//    that needs another's code would pull it into every build.
//
// Usage: check_layers --root DIR --table FILE [--graph]
// Exit status: 0 when clean, 1 on violations or errors, 2 on bad usage or a
// bad table. --graph also prints the folder-to-folder include graph.
//
// Standalone on purpose (std::filesystem only, no tessera library): it must
// run while the library does not build.

#include <algorithm>
#include <cstddef>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

namespace fs = std::filesystem;

namespace {

// A layer's number is its index + 1, as in docs/layers.md.
struct Layer {
  std::string name;
};

// One path of the table: a folder, a folder of siblings, or a file.
struct Entry {
  std::string path;  // "src/core/", "src/backend/" (for "src/backend/*/"), "include/tessera/ops.hpp"
  enum class Kind { folder, siblings, file } kind = Kind::folder;
  int layer = 0;  // index into the layers
};

struct Table {
  std::vector<Layer> layers;
  std::vector<Entry> entries;
  std::set<std::string> project_roots;  // first components that mark a project path
};

// Where a file sits in the stack. `unit` names it in messages and in the
// graph: the folder ("core", "backend/cpu", "tools"), or "include:<layer>"
// for public headers; two units of one layer are siblings when they come
// from a "*/" entry.
struct Place {
  int layer = 0;
  std::string unit;
  std::string shown;  // how a message names it: the unit, or the layer for a public header
  bool sibling = false;
};

bool starts_with(std::string_view s, std::string_view p) { return s.substr(0, p.size()) == p; }

std::string first_component(std::string_view p) {
  const auto slash = p.find('/');
  return std::string(p.substr(0, slash));
}

std::optional<Table> read_table(const fs::path& file) {
  std::ifstream in(file);
  if (!in) {
    std::cerr << "check_layers: cannot read the table " << file.string() << "\n";
    return std::nullopt;
  }
  Table t;
  std::set<std::string> names, paths;
  std::string line;
  int lineno = 0;
  auto bad = [&](const std::string& why) {
    std::cerr << file.string() << ":" << lineno << ": " << why << "\n";
    return std::nullopt;
  };
  while (std::getline(in, line)) {
    ++lineno;
    if (const auto hash = line.find('#'); hash != std::string::npos) line.erase(hash);
    std::istringstream words(line);
    std::string name;
    if (!(words >> name)) continue;
    if (!names.insert(name).second) return bad("layer " + name + " listed twice");
    const int index = static_cast<int>(t.layers.size());
    t.layers.push_back({name});
    std::string path;
    int count = 0;
    while (words >> path) {
      ++count;
      if (starts_with(path, "/") || path.find("..") != std::string::npos)
        return bad("path " + path + " is not relative to the repository root");
      if (!paths.insert(path).second) return bad("path " + path + " listed twice");
      Entry e{path, Entry::Kind::file, index};
      if (path.size() >= 3 && path.ends_with("/*/")) {
        e.kind = Entry::Kind::siblings;
        e.path = path.substr(0, path.size() - 2);
      } else if (path.ends_with("/")) {
        e.kind = Entry::Kind::folder;
      }
      if (e.path.find('*') != std::string::npos) return bad("'*' only as a last folder, as in src/backend/*/");
      if (e.kind != Entry::Kind::file) {
        // A layer folder named at the start of an include ("core/...") or
        // the folder itself ("src/...", "apps/...") marks a project path.
        t.project_roots.insert(first_component(e.path));
        if (starts_with(e.path, "src/")) t.project_roots.insert(first_component(e.path.substr(4)));
      }
      t.entries.push_back(e);
    }
    if (count == 0) return bad("layer " + name + " has no path");
  }
  if (t.layers.empty()) {
    std::cerr << file.string() << ": no layer\n";
    return std::nullopt;
  }
  t.project_roots.insert("tessera");
  return t;
}

// The unit of a folder entry: the folder without "src/" and the last '/'.
std::string folder_unit(std::string_view folder) {
  if (starts_with(folder, "src/")) folder.remove_prefix(4);
  if (folder.ends_with("/")) folder.remove_suffix(1);
  return std::string(folder);
}

// The place of a file, by the longest table path that holds it.
std::optional<Place> place_of(const Table& t, const std::string& rel) {
  const Entry* best = nullptr;
  std::string sibling;
  for (const Entry& e : t.entries) {
    std::string name;
    if (e.kind == Entry::Kind::file) {
      if (rel != e.path) continue;
    } else {
      if (!starts_with(rel, e.path)) continue;
      if (e.kind == Entry::Kind::siblings) {
        // Only files inside a subfolder belong: src/backend/<name>/...
        const auto slash = rel.find('/', e.path.size());
        if (slash == std::string::npos) continue;
        name = rel.substr(e.path.size(), slash - e.path.size());
      }
    }
    if (best == nullptr || e.path.size() > best->path.size()) {
      best = &e;
      sibling = name;
    }
  }
  if (best == nullptr) return std::nullopt;
  Place p;
  p.layer = best->layer;
  const std::string& layer_name = t.layers[static_cast<std::size_t>(best->layer)].name;
  switch (best->kind) {
    case Entry::Kind::file:
      p.unit = "include:" + layer_name;
      p.shown = layer_name;
      break;
    case Entry::Kind::folder:
      p.unit = p.shown = folder_unit(best->path);
      break;
    case Entry::Kind::siblings:
      p.unit = p.shown = folder_unit(best->path) + "/" + sibling;
      p.sibling = true;
      break;
  }
  return p;
}

struct Include {
  int line = 0;
  std::string spelled;  // as written between the quotes
};

bool ident_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}

// The quoted #include directives of a file. A small lexer rather than a
// line match, so that an #include inside a comment or a (raw) string literal
// is not taken for one.
std::vector<Include> quoted_includes(const std::string& s) {
  std::vector<Include> out;
  const std::size_t n = s.size();
  std::size_t i = 0;
  int line = 1;
  bool line_start = true;  // only whitespace so far on this line
  // Skips a "..." or '...' literal whose opening quote is at i; stops at an
  // unescaped newline too, so that a stray quote (in #error text) cannot
  // swallow the rest of the file.
  auto skip_quoted = [&](char q) {
    for (++i; i < n && s[i] != q && s[i] != '\n'; ++i)
      if (s[i] == '\\' && i + 1 < n) {
        if (s[i + 1] == '\n') ++line;
        ++i;
      }
    if (i < n && s[i] == q) ++i;
  };
  while (i < n) {
    const char c = s[i];
    if (c == '\n') {
      ++line;
      line_start = true;
      ++i;
    } else if (c == ' ' || c == '\t' || c == '\r' || c == '\f' || c == '\v') {
      ++i;
    } else if (c == '/' && i + 1 < n && s[i + 1] == '/') {
      while (i < n && s[i] != '\n') ++i;
    } else if (c == '/' && i + 1 < n && s[i + 1] == '*') {
      for (i += 2; i < n && !(s[i] == '*' && i + 1 < n && s[i + 1] == '/'); ++i)
        if (s[i] == '\n') ++line;
      i = std::min(n, i + 2);
    } else if (c == '#' && line_start) {
      line_start = false;
      ++i;
      while (i < n && (s[i] == ' ' || s[i] == '\t')) ++i;
      const std::size_t word = i;
      while (i < n && ident_char(s[i])) ++i;
      if (std::string_view(s).substr(word, i - word) != "include") continue;
      while (i < n && (s[i] == ' ' || s[i] == '\t')) ++i;
      if (i < n && s[i] == '"') {
        const std::size_t end = s.find_first_of("\"\n", i + 1);
        if (end != std::string::npos && s[end] == '"') {
          out.push_back({line, s.substr(i + 1, end - i - 1)});
          i = end + 1;
        }
      } else if (i < n && s[i] == '<') {
        // A system header: not read, and its name is no literal.
        const std::size_t end = s.find_first_of(">\n", i + 1);
        i = end == std::string::npos ? n : (s[end] == '>' ? end + 1 : end);
      }
    } else if (c == '"') {
      line_start = false;
      skip_quoted('"');
    } else if (c == '\'') {
      line_start = false;
      skip_quoted('\'');
    } else if ((c >= '0' && c <= '9') || (c == '.' && i + 1 < n && s[i + 1] >= '0' && s[i + 1] <= '9')) {
      // A pp-number, whose digit separators (1'000) are not char literals.
      line_start = false;
      for (++i; i < n; ++i) {
        if ((s[i] == '+' || s[i] == '-') && (s[i - 1] == 'e' || s[i - 1] == 'E' || s[i - 1] == 'p' || s[i - 1] == 'P'))
          continue;
        if (!ident_char(s[i]) && s[i] != '.' && s[i] != '\'') break;
      }
    } else if (ident_char(c)) {
      line_start = false;
      const std::size_t word = i;
      while (i < n && ident_char(s[i])) ++i;
      const std::string_view id = std::string_view(s).substr(word, i - word);
      const bool raw = id == "R" || id == "LR" || id == "uR" || id == "UR" || id == "u8R";
      if (raw && i < n && s[i] == '"') {
        // R"delim( ... )delim"
        const std::size_t open = s.find('(', i + 1);
        if (open == std::string::npos) {
          i = n;
          break;
        }
        const std::string close = ")" + s.substr(i + 1, open - i - 1) + "\"";
        const std::size_t end = s.find(close, open + 1);
        const std::size_t stop = end == std::string::npos ? n : end + close.size();
        line += static_cast<int>(std::count(s.begin() + static_cast<std::ptrdiff_t>(i),
                                            s.begin() + static_cast<std::ptrdiff_t>(stop), '\n'));
        i = stop;
      }
      // An encoding prefix (L, u, U, u8) is followed by its literal, which
      // the next round reads.
    } else {
      line_start = false;
      ++i;
    }
  }
  return out;
}

bool source_file(const fs::path& p) {
  const std::string ext = p.extension().string();
  return ext == ".cpp" || ext == ".hpp" || ext == ".h" || ext == ".cu" || ext == ".cuh";
}

std::string relative_to(const fs::path& file, const fs::path& root) {
  return file.lexically_normal().lexically_relative(root).generic_string();
}

int usage() {
  std::cerr << "usage: check_layers --root DIR --table FILE [--graph]\n";
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  std::optional<fs::path> root_arg, table_arg;
  bool graph = false;
  for (int a = 1; a < argc; ++a) {
    const std::string_view arg = argv[a];
    if (arg == "--root" && a + 1 < argc) {
      root_arg = argv[++a];
    } else if (arg == "--table" && a + 1 < argc) {
      table_arg = argv[++a];
    } else if (arg == "--graph") {
      graph = true;
    } else {
      return usage();
    }
  }
  if (!root_arg || !table_arg) return usage();
  std::error_code ec;
  const fs::path root = fs::absolute(*root_arg, ec).lexically_normal();
  if (ec || !fs::is_directory(root / "src")) {
    std::cerr << "check_layers: " << root_arg->string() << " has no src/\n";
    return 2;
  }
  const std::optional<Table> table = read_table(*table_arg);
  if (!table) return 2;

  // Every source file, sorted so that the report reads the same every run.
  std::vector<fs::path> files;
  for (const char* top : {"src", "apps", "tools", "include"}) {
    if (!fs::is_directory(root / top)) continue;
    for (fs::recursive_directory_iterator it(root / top, ec), end; !ec && it != end; it.increment(ec))
      if (it->is_regular_file(ec) && source_file(it->path())) files.push_back(it->path().lexically_normal());
    if (ec) {
      std::cerr << "check_layers: cannot list " << (root / top).string() << ": " << ec.message() << "\n";
      return 2;
    }
  }
  std::sort(files.begin(), files.end());

  // Where a quoted include is looked for after the including file's own
  // folder: the build's include paths (apps/ last, for "ifu/...").
  const std::vector<fs::path> search = {root / "src", root / "include", root, root / "apps"};

  std::vector<std::string> notes, problems;
  std::map<std::string, int> unit_layer;
  std::set<std::string> sibling_units;
  std::map<std::pair<std::string, std::string>, int> edges;
  int violations = 0, errors = 0;
  std::size_t includes = 0;
  for (const fs::path& file : files) {
    const std::string rel = relative_to(file, root);
    const std::optional<Place> from = place_of(*table, rel);
    if (!from) {
      // Files under apps/ and tools/ are always placed; include/ holds
      // public headers (unplaced: not in the table) and maybe others.
      if (starts_with(rel, "src/") || starts_with(rel, "include/tessera/")) {
        problems.push_back(rel + ": error: " +
                           (starts_with(rel, "src/") ? "its folder is not in the layer table"
                                                     : std::string("public header not in the layer table")) +
                           " (" + table_arg->filename().string() + "); give it a place in the stack");
        ++errors;
      } else {
        notes.push_back(rel + ": note: not in any layer, not checked");
      }
      continue;
    }
    unit_layer[from->unit] = from->layer;
    if (from->sibling) sibling_units.insert(from->unit);
    std::ifstream in(file, std::ios::binary);
    if (!in) {
      problems.push_back(rel + ": error: cannot read");
      ++errors;
      continue;
    }
    std::ostringstream text;
    text << in.rdbuf();
    for (const Include& inc : quoted_includes(text.str())) {
      ++includes;
      const std::string where = rel + ":" + std::to_string(inc.line) + ": ";
      std::optional<fs::path> target;
      fs::path candidate = (file.parent_path() / inc.spelled).lexically_normal();
      if (fs::is_regular_file(candidate, ec)) target = candidate;
      for (std::size_t k = 0; !target && k < search.size(); ++k) {
        candidate = (search[k] / inc.spelled).lexically_normal();
        if (fs::is_regular_file(candidate, ec)) target = candidate;
      }
      if (!target) {
        if (table->project_roots.count(first_component(inc.spelled))) {
          problems.push_back(where + "error: \"" + inc.spelled +
                             "\" not found (next to the file, under src/, include/, the root or apps/)");
          ++errors;
        } else {
          notes.push_back(where + "note: \"" + inc.spelled + "\" not found and not a project path, not checked");
        }
        continue;
      }
      const std::string target_rel = relative_to(*target, root);
      const std::optional<Place> to = starts_with(target_rel, "../") ? std::nullopt : place_of(*table, target_rel);
      if (!to) {
        // An unplaced source file under src/ is reported where it is
        // scanned; anything else there unplaced is reported here. Files
        // outside (examples/, bench/) are not in the stack.
        const bool ours = starts_with(target_rel, "src/") || starts_with(target_rel, "include/tessera/");
        if (ours && !source_file(*target)) {
          problems.push_back(where + "error: " + target_rel + " is in a folder not in the layer table");
          ++errors;
        } else if (!ours) {
          notes.push_back(where + "note: " + target_rel + " is in no layer, not checked");
        }
        continue;
      }
      unit_layer[to->unit] = to->layer;
      if (to->sibling) sibling_units.insert(to->unit);
      ++edges[{from->unit, to->unit}];
      const bool up = to->layer > from->layer;
      const bool across = from->sibling && to->sibling && from->layer == to->layer && from->unit != to->unit;
      if (up || across) {
        ++violations;
        problems.push_back(where + from->shown + " (layer " + std::to_string(from->layer + 1) + ") includes " +
                           inc.spelled + " of " + to->shown + " (layer " + std::to_string(to->layer + 1) + ")" +
                           (across ? ", a sibling: backends never include one another" : ""));
      }
    }
  }

  for (const std::string& n : notes) std::cout << n << "\n";
  if (graph) {
    // Lowest including folder first, then what it includes, lowest first.
    std::vector<std::tuple<int, std::string, int, std::string, int>> rows;
    for (const auto& [edge, count] : edges)
      rows.emplace_back(unit_layer[edge.first], edge.first, unit_layer[edge.second], edge.second, count);
    std::sort(rows.begin(), rows.end());
    std::cout << "include graph (folder -> folder  includes; include:<layer> is that layer's public headers):\n";
    for (const auto& [from_layer, from_unit, to_layer, to_unit, count] : rows) {
      std::cout << "  " << from_unit << " -> " << to_unit << " " << count;
      if (to_layer > from_layer)
        std::cout << "  (up the stack)";
      else if (from_unit != to_unit && sibling_units.count(from_unit) && sibling_units.count(to_unit))
        std::cout << "  (sibling)";
      std::cout << "\n";
    }
  }
  for (const std::string& p : problems) std::cout << p << "\n";
  std::cout << "layers: " << files.size() << " files, " << includes << " includes, ";
  if (violations == 0 && errors == 0) {
    std::cout << "no violation\n";
    return 0;
  }
  std::cout << violations << (violations == 1 ? " violation" : " violations");
  if (errors > 0) std::cout << ", " << errors << (errors == 1 ? " error" : " errors");
  std::cout << "\n";
  return 1;
}
