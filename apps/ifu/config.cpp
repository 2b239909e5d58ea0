// Reading the Rubix user config. The YAML is walked against a fixed schema of
// the keys Rubix 0.0.5 reads (from its core/*.py, input handlers and
// defaults); every level checks its keys first, so a typo anywhere names the
// full dotted key and the keys known at that level.
//
// Scalars follow PyYAML (YAML 1.1), which Rubix uses: `.inf` is infinity,
// yes/no/on/off are booleans, and a quoted scalar is a string, so
// `dist_z: "0.1"` is a type error here as it is one in Rubix.
#include "ifu/config.hpp"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <optional>
#include <set>
#include <sstream>
#include <vector>

#include "ifu/errors.hpp"
#include "ifu/telescope.hpp"

namespace tessera::ifu {

namespace {

using Keys = std::vector<std::string>;

std::string join(const Keys& keys) {
  std::string out;
  for (const auto& k : keys) {
    if (!out.empty()) out += ", ";
    out += k;
  }
  return out;
}

std::string upper(std::string s) {
  for (char& c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return s;
}

// " (line N)" for a node read from text; yaml-cpp counts lines from 0.
std::string where(const YAML::Node& n) {
  const YAML::Mark m = n.Mark();
  if (m.line < 0) return "";
  std::string s = " (line ";
  s += std::to_string(m.line + 1);
  s += ")";
  return s;
}

// What a node is, for "got ..." in messages.
std::string describe(const YAML::Node& n) {
  switch (n.Type()) {
    case YAML::NodeType::Null:
      return "null";
    case YAML::NodeType::Sequence:
      return "a list";
    case YAML::NodeType::Map:
      return "a mapping";
    case YAML::NodeType::Scalar: {
      std::string s = n.Tag() == "!" ? "quoted string '" : "'";
      s += n.Scalar();
      s += "'";
      return s;
    }
    default:
      return "nothing";
  }
}

// A plain (unquoted, untagged) scalar, the only kind PyYAML resolves to a
// number or boolean.
bool plain(const YAML::Node& n) { return n.IsScalar() && n.Tag() == "?"; }

// YAML 1.1 float/int text to a double, as PyYAML resolves plain scalars
// (plus exponents without a dot, which PyYAML leaves as strings but are
// clearly meant as numbers).
std::optional<double> yaml_number(std::string s) {
  s.erase(std::remove(s.begin(), s.end(), '_'), s.end());
  if (s.empty()) return std::nullopt;
  bool neg = false;
  std::string body = s;
  if (body[0] == '+' || body[0] == '-') {
    neg = body[0] == '-';
    body = body.substr(1);
  }
  if (body == ".inf" || body == ".Inf" || body == ".INF")
    return neg ? -std::numeric_limits<double>::infinity() : std::numeric_limits<double>::infinity();
  if (body == ".nan" || body == ".NaN" || body == ".NAN") return std::numeric_limits<double>::quiet_NaN();
  // from_chars would also take "inf" and "nan", which YAML reads as strings.
  if (body.empty() || !(std::isdigit(static_cast<unsigned char>(body[0])) || body[0] == '.')) return std::nullopt;
  double v = 0;
  const char* end = body.data() + body.size();
  auto [ptr, ec] = std::from_chars(body.data(), end, v);
  if (ec != std::errc() || ptr != end) return std::nullopt;
  return neg ? -v : v;
}

// A level of the config: a mapping, its dotted path and the file name.
class Section {
 public:
  Section(const std::string& source, YAML::Node node, std::string path)
      : source_(source), node_(std::move(node)), path_(std::move(path)) {}

  [[noreturn]] void fail(const std::string& what) const {
    std::string msg = "[ifu config] ";
    if (!source_.empty()) {
      msg += source_;
      msg += ": ";
    }
    msg += what;
    throw InputError(msg);
  }

  std::string dotted(const std::string& key) const {
    if (path_.empty()) return key;
    std::string s = path_;
    s += ".";
    s += key;
    return s;
  }

  // Every key must be a known scalar, once.
  void check_keys(const Keys& known) const {
    std::set<std::string> seen;
    for (const auto& kv : node_) {
      if (!kv.first.IsScalar()) {
        std::string what = "keys must be names, got ";
        what += describe(kv.first);
        what += " in '";
        what += path_.empty() ? std::string("the top level") : path_;
        what += "'";
        what += where(kv.first);
        fail(what);
      }
      const std::string key = kv.first.Scalar();
      if (std::find(known.begin(), known.end(), key) == known.end()) {
        std::string what = "unknown key '";
        what += dotted(key);
        what += "' (known: ";
        what += join(known);
        what += ")";
        fail(what);
      }
      if (!seen.insert(key).second) {
        std::string what = "duplicate key '";
        what += dotted(key);
        what += "'";
        what += where(kv.first);
        fail(what);
      }
    }
  }

  bool has(const std::string& key) const { return static_cast<bool>(node_[key]); }
  YAML::Node at(const std::string& key) const { return node_[key]; }

  [[noreturn]] void type_error(const std::string& key, const char* expected) const {
    const YAML::Node n = at(key);
    std::string what = "'";
    what += dotted(key);
    what += "' must be ";
    what += expected;
    what += ", got ";
    what += describe(n);
    what += where(n);
    fail(what);
  }

  [[noreturn]] void missing(const std::string& key, const char* why) const {
    std::string what = "missing required key '";
    what += dotted(key);
    what += "'";
    if (why && *why) {
      what += " (";
      what += why;
      what += ")";
    }
    fail(what);
  }

  Section section(const std::string& key) const {
    const YAML::Node n = at(key);
    if (!n.IsMap()) type_error(key, "a mapping");
    return Section(source_, n, dotted(key));
  }

  double number(const std::string& key) const {
    const YAML::Node n = at(key);
    if (!plain(n)) type_error(key, "a number");
    auto v = yaml_number(n.Scalar());
    if (!v) type_error(key, "a number");
    return *v;
  }

  // A finite number (angles, sizes, redshifts).
  double finite(const std::string& key) const {
    const double v = number(key);
    if (!std::isfinite(v)) type_error(key, "a finite number");
    return v;
  }

  double positive(const std::string& key) const {
    const double v = finite(key);
    if (!(v > 0)) type_error(key, "a number > 0");
    return v;
  }

  std::int64_t integer(const std::string& key) const {
    const YAML::Node n = at(key);
    if (!plain(n)) type_error(key, "an integer");
    auto v = yaml_number(n.Scalar());
    // 5.0 is accepted where Rubix takes an int (it only does arithmetic with it).
    if (!v || !std::isfinite(*v) || std::floor(*v) != *v || std::fabs(*v) > 9.0e15) type_error(key, "an integer");
    return static_cast<std::int64_t>(*v);
  }

  bool boolean(const std::string& key) const {
    static const std::set<std::string> yes = {"yes", "Yes", "YES", "true", "True", "TRUE", "on", "On", "ON"};
    static const std::set<std::string> no = {"no", "No", "NO", "false", "False", "FALSE", "off", "Off", "OFF"};
    const YAML::Node n = at(key);
    if (!plain(n)) type_error(key, "true or false");
    if (yes.count(n.Scalar())) return true;
    if (no.count(n.Scalar())) return false;
    type_error(key, "true or false");
  }

  std::string string(const std::string& key) const {
    const YAML::Node n = at(key);
    if (!n.IsScalar()) type_error(key, "a string");
    return n.Scalar();
  }

  // A string or null (paths Rubix allows to be null).
  void string_or_null(const std::string& key) const {
    const YAML::Node n = at(key);
    if (!n.IsNull() && !n.IsScalar()) type_error(key, "a string or null");
  }

  std::vector<std::string> string_list(const std::string& key) const {
    const YAML::Node n = at(key);
    if (!n.IsSequence()) type_error(key, "a list of strings");
    std::vector<std::string> out;
    for (const auto& e : n) {
      if (!e.IsScalar()) type_error(key, "a list of strings");
      out.push_back(e.Scalar());
    }
    return out;
  }

  // `value` of `key` is a name Rubix knows but this program does not support.
  [[noreturn]] void unsupported(const std::string& key, const std::string& value, const std::string& why) const {
    std::string what = dotted(key);
    what += " '";
    what += value;
    what += "' is not supported: ";
    what += why;
    fail(what);
  }

  // `value` of `key` is not among `known`.
  [[noreturn]] void unknown_value(const std::string& key, const std::string& value, const std::string& known) const {
    std::string what = "unknown ";
    what += dotted(key);
    what += " '";
    what += value;
    what += "' (";
    what += known;
    what += ")";
    what += where(at(key));
    fail(what);
  }

 private:
  const std::string& source_;
  YAML::Node node_;
  std::string path_;
};

void read_pipeline(const Section& s, Config& c) {
  s.check_keys({"name"});
  if (!s.has("name")) s.missing("name", "calc_ifu");
  c.pipeline = s.string("name");
  // calc_dusty_ifu's ssp.dust keys are checked once the whole file is read
  // (parse_config calls check_dusty_config).
  if (c.pipeline == "calc_ifu" || c.pipeline == "calc_dusty_ifu") return;
  s.unknown_value("name", c.pipeline, "supported: calc_ifu, calc_dusty_ifu");
}

void read_logger(const Section& s, Config& c) {
  s.check_keys({"log_level", "log_file_path", "format"});
  if (s.has("log_level")) {
    const std::string level = upper(s.string("log_level"));
    if (level == "WARN")
      c.log_level = "WARNING";
    else if (level == "FATAL")
      c.log_level = "CRITICAL";
    else if (level == "NOTSET" || level == "DEBUG" || level == "INFO" || level == "WARNING" || level == "ERROR" ||
             level == "CRITICAL")
      c.log_level = level;
    else
      s.unknown_value("log_level", s.string("log_level"), "known: DEBUG, INFO, WARNING, ERROR, CRITICAL");
  }
  // Accepted and unused: messages go to stderr; Rubix ignores `format` too.
  if (s.has("log_file_path")) s.string_or_null("log_file_path");
  if (s.has("format")) s.string("format");
}

// data.*: only Rubix's download/conversion step reads it (skipped here: the
// galaxy file must exist), except particle_type and subset.
void read_data(const Section& s) {
  s.check_keys({"name", "args", "load_galaxy_args", "subset"});
  if (s.has("name")) s.string("name");
  if (s.has("args")) {
    const Section a = s.section("args");
    a.check_keys({"api_key", "particle_type", "simulation", "snapshot", "save_data_path"});
    if (a.has("api_key")) a.string_or_null("api_key");
    if (a.has("particle_type")) {
      const auto types = a.string_list("particle_type");
      for (const auto& t : types)
        if (t != "stars" && t != "gas") a.unknown_value("particle_type", t, "known: stars, gas");
      if (std::find(types.begin(), types.end(), "stars") == types.end()) {
        std::string what = "'";
        what += a.dotted("particle_type");
        what += "' must include stars: the datacube is made from the star particles";
        a.fail(what);
      }
    }
    if (a.has("simulation")) a.string("simulation");
    if (a.has("snapshot")) a.integer("snapshot");
    if (a.has("save_data_path")) a.string("save_data_path");
  }
  if (s.has("load_galaxy_args")) {
    const Section l = s.section("load_galaxy_args");
    l.check_keys({"id", "overwrite", "reuse"});
    if (l.has("id")) l.integer("id");
    if (l.has("overwrite")) l.boolean("overwrite");
    if (l.has("reuse")) l.boolean("reuse");
  }
  if (s.has("subset")) {
    const Section sub = s.section("subset");
    sub.check_keys({"use_subset", "subset_size"});
    if (sub.has("subset_size")) sub.integer("subset_size");
    if (sub.has("use_subset") && sub.boolean("use_subset"))
      sub.unsupported("use_subset", "true", "random particle subsets are not supported yet (set it to false)");
  }
}

void read_simulation(const Section& s, Config& c) {
  s.check_keys({"name", "args"});
  if (!s.has("name")) s.missing("name", "NIHAO or IllustrisTNG");
  c.simulation = s.string("name");
  if (c.simulation != "NIHAO" && c.simulation != "IllustrisTNG")
    s.unknown_value("name", c.simulation, "known: NIHAO, IllustrisTNG");
  // Where the raw snapshot lives, for Rubix's conversion step: unused.
  if (s.has("args")) {
    const Section a = s.section("args");
    a.check_keys({"path", "halo_path", "rotation_path", "halo_id", "dist_z", "config"});
  }
}

void read_telescope(const Section& s, Config& c) {
  s.check_keys({"name", "psf", "lsf", "noise"});
  if (!s.has("name")) s.missing("name", "the instrument, e.g. MUSE");
  c.telescope = s.string("name");
  try {
    telescope(c.telescope);
  } catch (const InputError& e) {
    // Re-say the table's message in config terms, without its own prefix.
    std::string inner = e.what();
    const std::string prefix = "[ifu telescope] ";
    if (inner.rfind(prefix, 0) == 0) inner = inner.substr(prefix.size());
    std::string what = s.dotted("name");
    what += ": ";
    what += inner;
    s.fail(what);
  }
  if (s.has("psf")) {
    const Section p = s.section("psf");
    p.check_keys({"name", "size", "sigma"});
    for (const char* k : {"name", "size", "sigma"})
      if (!p.has(k)) p.missing(k, "the psf section needs name, size and sigma");
    c.psf = true;
    c.psf_name = p.string("name");
    if (c.psf_name != "gaussian") p.unknown_value("name", c.psf_name, "supported: gaussian");
    const std::int64_t size = p.integer("size");
    if (size < 1 || size > 1001) p.type_error("size", "an integer from 1 to 1001");
    c.psf_size = static_cast<int>(size);
    c.psf_sigma = p.positive("sigma");
  }
  if (s.has("lsf")) {
    const Section l = s.section("lsf");
    l.check_keys({"sigma"});
    if (!l.has("sigma")) l.missing("sigma", "Angstrom");
    c.lsf = true;
    c.lsf_sigma = l.positive("sigma");
  }
  if (s.has("noise")) {
    const Section n = s.section("noise");
    n.check_keys({"signal_to_noise", "noise_distribution"});
    if (!n.has("signal_to_noise")) n.missing("signal_to_noise", ".inf turns the noise off");
    if (!n.has("noise_distribution")) n.missing("noise_distribution", "normal");
    c.noise = true;
    c.signal_to_noise = n.number("signal_to_noise");
    if (!(c.signal_to_noise > 0)) n.type_error("signal_to_noise", "a number > 0 (.inf for no noise)");
    c.noise_distribution = n.string("noise_distribution");
    if (c.noise_distribution == "uniform")
      n.unsupported("noise_distribution", "uniform", "only normal noise is supported yet");
    if (c.noise_distribution != "normal")
      n.unknown_value("noise_distribution", c.noise_distribution,
                      "Rubix 0.0.5 knows normal, uniform; supported: normal");
  }
}

void read_cosmology(const Section& s, Config& c) {
  s.check_keys({"name", "args"});
  if (!s.has("name")) s.missing("name", "PLANCK15");
  const std::string name = s.string("name");
  c.cosmology = upper(name);  // Rubix compares the upper-cased name
  if (c.cosmology == "CUSTOM")
    s.unsupported("name", name, "custom cosmologies are not supported yet (supported: PLANCK15)");
  if (c.cosmology != "PLANCK15")
    s.unknown_value("name", name, "Rubix 0.0.5 knows PLANCK15, CUSTOM; supported: PLANCK15");
  // The parameters of a CUSTOM cosmology; PLANCK15 ignores them, as in Rubix.
  if (s.has("args")) {
    const Section a = s.section("args");
    a.check_keys({"Om0", "w0", "wa", "h"});
    for (const char* k : {"Om0", "w0", "wa", "h"})
      if (a.has(k)) a.finite(k);
  }
}

void read_galaxy(const Section& s, Config& c) {
  s.check_keys({"dist_z", "rotation"});
  if (!s.has("dist_z")) s.missing("dist_z", "the redshift the galaxy is observed at");
  c.dist_z = s.finite("dist_z");
  if (!(c.dist_z > 0)) s.type_error("dist_z", "a redshift > 0");
  if (!s.has("rotation")) return;  // no rotation: the face-on identity
  const Section r = s.section("rotation");
  r.check_keys({"type", "alpha", "beta", "gamma"});
  // Rubix ignores the angles when a type is given; they are still checked.
  for (const char* k : {"alpha", "beta", "gamma"})
    if (r.has(k)) r.finite(k);
  if (r.has("type")) {
    const std::string type = r.string("type");
    if (type == "face-on") {
      c.rotation = {"face-on", 0, 0, 0};
    } else if (type == "edge-on") {
      c.rotation = {"edge-on", 90, 0, 0};
    } else if (type == "matrix") {
      r.unsupported("type", type,
                    "Rubix 0.0.5 accepts it but rotates edge-on; write type: edge-on, or give alpha, beta, gamma");
    } else {
      r.unknown_value("type", type, "known: face-on, edge-on; or leave type out and give alpha, beta, gamma");
    }
    return;
  }
  for (const char* k : {"alpha", "beta", "gamma"})
    if (!r.has(k)) r.missing(k, "without a type, the rotation needs alpha, beta and gamma in degrees");
  c.rotation = {"euler", r.finite("alpha"), r.finite("beta"), r.finite("gamma")};
}

// ssp.dust: only the calc_dusty_ifu pipeline applies it, but the names and
// values are checked whatever the pipeline, so a typo is caught before the
// dusty pipeline is asked for.
void read_dust(const Section& d, DustConfig& dust) {
  d.check_keys({"extinction_model", "dust_to_gas_ratio", "dust_to_metals_ratio", "dust_grain_density", "Rv",
                "dust_to_gas_model", "Xco"});
  dust.present = true;
  if (d.has("extinction_model")) {
    dust.has_extinction_model = true;
    dust.extinction_model = d.string("extinction_model");
    // Rubix's RV_MODELS; its source lists O94, F99, ... as to do.
    if (dust.extinction_model != "Cardelli89" && dust.extinction_model != "Gordon23")
      d.unknown_value("extinction_model", dust.extinction_model, "Rubix 0.0.5 knows Cardelli89, Gordon23");
  }
  if (d.has("Rv")) {
    dust.has_Rv = true;
    dust.Rv = d.positive("Rv");
  }
  if (d.has("dust_grain_density")) {
    dust.has_dust_grain_density = true;
    dust.dust_grain_density = d.positive("dust_grain_density");
  }
  if (d.has("dust_to_gas_model")) {
    dust.dust_to_gas_model = d.string("dust_to_gas_model");
    if (dust.dust_to_gas_model == "power law slope fixed")
      d.unsupported("dust_to_gas_model", dust.dust_to_gas_model,
                    "Rubix 0.0.5 does not implement it (supported: power law slope free, broken power law fit)");
    if (dust.dust_to_gas_model != "power law slope free" && dust.dust_to_gas_model != "broken power law fit")
      d.unknown_value("dust_to_gas_model", dust.dust_to_gas_model,
                      "Remy-Ruyer et al. 2014 fits in Rubix 0.0.5: power law slope free, broken power law fit");
  }
  if (d.has("Xco")) {
    dust.Xco = d.string("Xco");
    if (dust.Xco != "MW" && dust.Xco != "Z") d.unknown_value("Xco", dust.Xco, "known: MW, Z");
  }
  // Accepted, unused: no Rubix 0.0.5 code reads them.
  for (const char* k : {"dust_to_gas_ratio", "dust_to_metals_ratio"})
    if (d.has(k)) d.finite(k);
}

void read_ssp(const Section& s, Config& c) {
  s.check_keys({"template", "method", "dust"});
  if (!s.has("template")) s.missing("template", "template: {name: BruzualCharlot2003}");
  const Section t = s.section("template");
  t.check_keys({"name"});
  if (!t.has("name")) t.missing("name", "BruzualCharlot2003");
  c.ssp_template = t.string("name");
  if (c.ssp_template == "Mastar_CB19_SLOG_1_5" || c.ssp_template == "FSPS")
    t.unsupported("name", c.ssp_template, "only the BruzualCharlot2003 templates are supported yet");
  if (c.ssp_template != "BruzualCharlot2003")
    t.unknown_value("name", c.ssp_template,
                    "Rubix 0.0.5 knows BruzualCharlot2003, Mastar_CB19_SLOG_1_5, FSPS; supported: BruzualCharlot2003");
  if (s.has("method")) {
    c.ssp_method = s.string("method");
    static const Keys interpax = {"nearest", "cubic2", "catmull-rom", "cardinal", "monotonic", "monotonic-0", "akima"};
    if (std::find(interpax.begin(), interpax.end(), c.ssp_method) != interpax.end())
      s.unsupported("method", c.ssp_method, "supported: cubic, linear");
    if (c.ssp_method != "cubic" && c.ssp_method != "linear")
      s.unknown_value("method", c.ssp_method, "supported: cubic, linear");
  }
  if (s.has("dust")) read_dust(s.section("dust"), c.dust);
}

}  // namespace

const char* default_config_yaml() {
  return R"(pipeline:
  name: calc_ifu
simulation:
  name: NIHAO
telescope:
  name: MUSE
  psf:
    name: gaussian
    size: 5
    sigma: 0.6
  lsf:
    sigma: 0.5
  noise:
    signal_to_noise: .inf
    noise_distribution: normal
cosmology:
  name: PLANCK15
galaxy:
  dist_z: 0.1
  rotation:
    alpha: 60.0
    beta: 20.0
    gamma: 30.0
ssp:
  template:
    name: BruzualCharlot2003
  method: cubic
)";
}

Config parse_config(const std::string& yaml_text, const std::string& source) {
  Config c;
  c.source = source;
  YAML::Node root;
  try {
    root = YAML::Load(yaml_text);
  } catch (const YAML::Exception& e) {
    std::string msg = "[ifu config] ";
    if (!source.empty()) {
      msg += source;
      msg += ": ";
    }
    msg += "invalid YAML at line ";
    msg += std::to_string(e.mark.line + 1);
    msg += ", column ";
    msg += std::to_string(e.mark.column + 1);
    msg += ": ";
    msg += e.msg;
    throw InputError(msg);
  }
  const Section top(c.source, root, "");
  if (!root.IsMap()) {
    std::string what = "the config must be a mapping of sections (telescope, galaxy, ssp, ...), got ";
    what += root.IsNull() ? std::string("an empty document") : describe(root);
    top.fail(what);
  }
  top.check_keys(
      {"pipeline", "logger", "data", "simulation", "output_path", "telescope", "cosmology", "galaxy", "ssp"});
  // Required sections first, in reading order, so the first missing one is named.
  if (!top.has("telescope")) top.missing("telescope", "telescope: {name: MUSE, ...}");
  if (!top.has("galaxy")) top.missing("galaxy", "galaxy: {dist_z: ...}");
  if (!top.has("ssp")) top.missing("ssp", "ssp: {template: {name: BruzualCharlot2003}}");
  if (top.has("pipeline")) read_pipeline(top.section("pipeline"), c);
  if (top.has("logger")) read_logger(top.section("logger"), c);
  if (top.has("data")) read_data(top.section("data"));
  if (top.has("simulation")) read_simulation(top.section("simulation"), c);
  if (top.has("output_path")) {
    c.output_path = top.string("output_path");
    const std::filesystem::path out(c.output_path);
    const std::filesystem::path folder = std::filesystem::path(source).parent_path();
    if (out.is_relative() && !folder.empty()) c.output_path = (folder / out).lexically_normal().string();
  }
  read_telescope(top.section("telescope"), c);
  if (top.has("cosmology")) read_cosmology(top.section("cosmology"), c);
  read_galaxy(top.section("galaxy"), c);
  read_ssp(top.section("ssp"), c);
  if (c.pipeline == "calc_dusty_ifu") check_dusty_config(c);
  return c;
}

void check_dusty_config(const Config& c) {
  const DustConfig& d = c.dust;
  const char* key = !d.present                  ? "ssp.dust"
                    : !d.has_extinction_model   ? "ssp.dust.extinction_model"
                    : !d.has_Rv                 ? "ssp.dust.Rv"
                    : !d.has_dust_grain_density ? "ssp.dust.dust_grain_density"
                                                : nullptr;
  if (!key) return;
  std::string msg = "[ifu config] ";
  if (!c.source.empty()) {
    msg += c.source;
    msg += ": ";
  }
  msg += "missing required key '";
  msg += key;
  msg += "' (pipeline calc_dusty_ifu needs ssp.dust with extinction_model (Cardelli89 or Gordon23), Rv and "
         "dust_grain_density in g/cm^3)";
  throw InputError(msg);
}

Config load_config(const std::string& path) {
  std::error_code ec;
  std::ifstream in;
  if (std::filesystem::is_regular_file(path, ec)) in.open(path, std::ios::binary);
  if (!in.is_open() || !in) {
    std::string msg = "[ifu config] cannot read '";
    msg += path;
    msg += "': ";
    msg += !std::filesystem::exists(path, ec)           ? "no such file"
           : std::filesystem::is_regular_file(path, ec) ? "permission denied"
                                                        : "not a regular file";
    throw InputError(msg);
  }
  std::ostringstream text;
  text << in.rdbuf();
  return parse_config(text.str(), path);
}

}  // namespace tessera::ifu
