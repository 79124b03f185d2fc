#include "cli/preflight_report.h"

#include <algorithm>
#include <cstdio>

#include "core/error.h"
#include "core/json_writer.h"
#include "plan/comm_model.h"

namespace megatron::cli {
namespace {

double median(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

std::string fixed(double v, int decimals) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.*f", decimals, v);
  return buf;
}
// A measured value: one decimal from 100 up, else three significant digits (a CPU's 0.0521).
std::string measured(double v) {
  if (v >= 100.0 || v == 0.0) return fixed(v, 1);
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%#.3g", v);
  return buf;
}

// "rank 3 on node-b", or "ranks 0,1 on node-a" / "ranks 0,8 on node-a,node-b".
std::string where(const PreflightValue& v, const std::vector<std::string>& hosts) {
  std::string ranks, on;
  std::vector<std::string> seen;
  for (int64_t r : v.ranks) {
    ranks += (ranks.empty() ? "" : ",") + std::to_string(r);
    const std::string& h = hosts.at(static_cast<size_t>(r));
    if (std::find(seen.begin(), seen.end(), h) == seen.end()) {
      seen.push_back(h);
      on += (on.empty() ? "" : ",") + h;
    }
  }
  return str_cat(v.ranks.size() == 1 ? "rank " : "ranks ", ranks, " on ", on);
}

std::vector<double> values_of(const PreflightRow& row) {
  std::vector<double> out;
  for (const PreflightValue& v : row.values) out.push_back(v.value);
  return out;
}

}  // namespace

std::string plan_link_flags(const PreflightReport& report, double tolerance) {
  if (report.host_staged) return "";
  std::vector<double> within, across;
  for (const PreflightRow& row : report.rows) {
    if (!row.bus_bandwidth) continue;
    const double mid = median(values_of(row));
    for (const PreflightValue& v : row.values) {
      if (v.value >= (1.0 - tolerance) * mid) (v.across_nodes ? across : within).push_back(v.value);
    }
  }
  std::string flags;
  if (!within.empty()) flags += " --intra-node-bandwidth " + fixed(median(within) / plan::kLinkEfficiency, 0);
  if (!across.empty()) flags += " --inter-node-bandwidth " + fixed(median(across) / plan::kLinkEfficiency, 0);
  return flags.empty() ? "" : flags.substr(1);
}

std::string format_preflight(const PreflightReport& report, double tolerance, int64_t* slow) {
  std::string text = report.header + "\n";
  size_t width = 0;
  for (const PreflightRow& row : report.rows) width = std::max(width, row.what.size());
  std::vector<std::string> slow_lines;
  for (const PreflightRow& row : report.rows) {
    if (row.values.empty()) continue;
    const double mid = median(values_of(row));
    const PreflightValue* lo = &row.values.front();
    const PreflightValue* hi = &row.values.front();
    for (const PreflightValue& v : row.values) {
      if (v.value < lo->value) lo = &v;
      if (v.value > hi->value) hi = &v;
    }
    std::string what = row.what;
    what.resize(width, ' ');
    text += str_cat("  ", what, "  min ", measured(lo->value), " ", row.unit, " (", where(*lo, report.hosts),
                    ")  median ", measured(mid), "  max ", measured(hi->value), "  [", row.values.size(),
                    row.values.size() == 1 ? " value" : " values", "]\n");
    for (const PreflightValue& v : row.values) {
      if (v.value < (1.0 - tolerance) * mid) {
        slow_lines.push_back(str_cat("  ", where(v, report.hosts), ": ", row.what, " ", measured(v.value), " ",
                                     row.unit, ", ", fixed(100.0 * (1.0 - v.value / mid), 1), "% below the median"));
      }
    }
  }
  const std::string pct = fixed(100.0 * tolerance, 0);
  if (slow_lines.empty()) {
    text += str_cat("every rank and group within ", pct, "% of its median\n");
  } else {
    text += str_cat(slow_lines.size(), " slow (more than ", pct, "% below the median):\n");
    for (const std::string& l : slow_lines) text += l + "\n";
  }
  if (const std::string flags = plan_link_flags(report, tolerance); !flags.empty()) {
    text += str_cat("for `megatron plan`: ", flags, "  (median bus bandwidths, slow ones left out, over the planner's ",
                    fixed(plan::kLinkEfficiency, 2), " link efficiency)\n");
  }
  if (slow != nullptr) *slow = static_cast<int64_t>(slow_lines.size());
  return text;
}

std::string preflight_json(const PreflightReport& report, double tolerance) {
  JsonWriter w(0);
  w.begin_object();
  w.key("header").value(report.header);
  w.key("tolerance").value(tolerance);
  int64_t slow = 0;
  w.key("rows").begin_array();
  for (const PreflightRow& row : report.rows) {
    const std::vector<double> values = values_of(row);
    const double mid = median(values);
    w.begin_object();
    w.key("what").value(row.what);
    w.key("unit").value(row.unit);
    w.key("bus_bandwidth").value(row.bus_bandwidth);
    if (!values.empty()) {
      w.key("min").value(*std::min_element(values.begin(), values.end()));
      w.key("median").value(mid);
      w.key("max").value(*std::max_element(values.begin(), values.end()));
    }
    w.key("values").begin_array();
    for (const PreflightValue& v : row.values) {
      const bool is_slow = v.value < (1.0 - tolerance) * mid;
      slow += is_slow ? 1 : 0;
      w.begin_object();
      w.key("ranks").begin_array();
      for (int64_t r : v.ranks) w.value(r);
      w.end_array();
      w.key("hosts").begin_array();
      for (int64_t r : v.ranks) w.value(report.hosts.at(static_cast<size_t>(r)));
      w.end_array();
      w.key("value").value(v.value);
      w.key("slow").value(is_slow);
      w.end_object();
    }
    w.end_array();
    w.end_object();
  }
  w.end_array();
  w.key("slow").value(slow);
  w.key("plan_flags").value(plan_link_flags(report, tolerance));
  w.end_object();
  return w.take() + "\n";
}

}  // namespace megatron::cli
