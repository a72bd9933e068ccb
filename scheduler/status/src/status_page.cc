#include "bytecomp/scheduler/status/status_page.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "bytecomp/compress/strategy.h"

namespace bytecomp::status {
namespace {

std::string Escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

std::string Json(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      out += absl::StrFormat("\\u%04x", c);
    } else {
      out += c;
    }
  }
  return out + "\"";
}

std::string Bytes(int64_t b) {
  if (b >= (int64_t{1} << 30)) return absl::StrFormat("%.2f GiB", b / double(int64_t{1} << 30));
  if (b >= (1 << 20)) return absl::StrFormat("%.1f MiB", b / double(1 << 20));
  if (b >= (1 << 10)) return absl::StrFormat("%.1f KiB", b / 1024.0);
  return absl::StrCat(b, " B");
}

// A "nice" axis step near range / 5.
double NiceStep(double range) {
  if (range <= 0) return 1;
  const double raw = range / 5;
  const double p = std::pow(10, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0, 10.0}) {
    if (raw <= m * p) return m * p;
  }
  return 10 * p;
}

constexpr char kStyle[] = R"(
body{font-family:system-ui,-apple-system,"Segoe UI",Helvetica,Arial,sans-serif;margin:24px;color:#1d2430;background:#f6f7f9}
h1{font-size:22px;margin:0 0 4px}h2{font-size:16px;margin:22px 0 8px;color:#33405a}
.sub{color:#5b6577;font-size:13px}
.cards{display:flex;gap:12px;flex-wrap:wrap;margin-top:14px}
.card{background:#fff;border:1px solid #dde2ea;border-radius:8px;padding:10px 14px;min-width:130px}
.card b{display:block;font-size:20px;margin-top:2px}.card span{font-size:12px;color:#5b6577}
table{border-collapse:collapse;background:#fff;border:1px solid #dde2ea;font-size:13px}
th,td{padding:5px 10px;border-bottom:1px solid #edf0f4;text-align:left}
th{background:#eef1f6;font-weight:600}td.n{text-align:right;font-variant-numeric:tabular-nums}
.badge{display:inline-block;padding:1px 8px;border-radius:10px;font-size:12px;color:#fff}
.ok{background:#2e8b57}.late{background:#d08a00}.silent{background:#c0392b}.done{background:#6c7a89}
.chart{background:#fff;border:1px solid #dde2ea;border-radius:8px}
.warn{background:#fff4e0;border:1px solid #d08a00;border-radius:8px;padding:8px 12px;font-size:13px}
)";

}  // namespace

std::string RoundChartSvg(const StatusSnapshot& s, int width, int height) {
  const int left = 56, right = 16, top = 16, bottom = 36;
  const int w = width - left - right, h = height - top - bottom;
  std::string svg = absl::StrFormat(
      "<svg id=\"round-chart\" class=\"chart\" width=\"%d\" "
      "height=\"%d\" viewBox=\"0 0 %d %d\" role=\"img\" aria-label=\"round time over recent "
      "rounds\">",
      width, height, width, height);
  if (s.rounds.empty()) {
    absl::StrAppend(&svg, "<text x=\"", width / 2, "\" y=\"", height / 2,
                    "\" text-anchor=\"middle\" fill=\"#5b6577\" font-size=\"13\">no rounds "
                    "reported yet</text></svg>");
    return svg;
  }
  double max_ms = 0;
  for (const auto& [round, ms] : s.rounds) max_ms = std::max(max_ms, ms);
  if (s.predicted_ms.has_value()) max_ms = std::max(max_ms, *s.predicted_ms);
  const double step = NiceStep(max_ms);
  const double top_ms = std::max(step, std::ceil(max_ms / step) * step);
  const uint64_t first = s.rounds.front().first, last = s.rounds.back().first;
  const double span = std::max<double>(1, static_cast<double>(last - first));
  auto x = [&](uint64_t r) { return left + w * (static_cast<double>(r - first) / span); };
  auto y = [&](double ms) { return top + h * (1 - ms / top_ms); };
  for (double v = 0; v <= top_ms + 1e-9; v += step) {
    absl::StrAppendFormat(&svg,
                          "<line x1=\"%d\" x2=\"%d\" y1=\"%.1f\" y2=\"%.1f\" stroke=\"#e3e7ee\"/>"
                          "<text x=\"%d\" y=\"%.1f\" text-anchor=\"end\" font-size=\"11\" "
                          "fill=\"#5b6577\">%g</text>",
                          left, left + w, y(v), y(v), left - 6, y(v) + 4, v);
  }
  absl::StrAppendFormat(&svg,
                        "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\" font-size=\"11\" "
                        "fill=\"#5b6577\">round %d .. %d</text>"
                        "<text x=\"12\" y=\"%d\" font-size=\"11\" fill=\"#5b6577\" "
                        "transform=\"rotate(-90 12 %d)\" text-anchor=\"middle\">ms</text>",
                        left + w / 2, height - 8, first, last, top + h / 2, top + h / 2);
  std::string points;
  for (const auto& [round, ms] : s.rounds)
    absl::StrAppendFormat(&points, "%.1f,%.1f ", x(round), y(ms));
  absl::StrAppend(&svg, "<polyline fill=\"none\" stroke=\"#2f6fdf\" stroke-width=\"2\" points=\"",
                  points, "\"/>");
  for (const auto& [round, ms] : s.rounds) {
    absl::StrAppendFormat(&svg,
                          "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"2.5\" fill=\"#2f6fdf\"><title>round "
                          "%d: %.2f ms</title></circle>",
                          x(round), y(ms), round, ms);
  }
  if (s.predicted_ms.has_value()) {
    absl::StrAppendFormat(&svg,
                          "<line x1=\"%d\" x2=\"%d\" y1=\"%.1f\" y2=\"%.1f\" stroke=\"#d0542b\" "
                          "stroke-dasharray=\"6 4\" stroke-width=\"2\"/><text x=\"%d\" y=\"%.1f\" "
                          "text-anchor=\"end\" font-size=\"11\" fill=\"#d0542b\">predicted "
                          "%.1f ms</text>",
                          left, left + w, y(*s.predicted_ms), y(*s.predicted_ms), left + w - 4,
                          y(*s.predicted_ms) - 5, *s.predicted_ms);
  }
  svg += "</svg>";
  return svg;
}

std::string StatusPageHtml(const StatusSnapshot& s) {
  std::string html = absl::StrCat(
      "<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">"
      "<meta http-equiv=\"refresh\" content=\"2\"><title>ByteComp job status</title><style>",
      kStyle, "</style></head><body>");
  int ok = 0;
  for (const NodeHealth& n : s.nodes) ok += n.state == "ok" || n.state == "done";
  absl::StrAppendFormat(&html,
                        "<h1>ByteComp job</h1><div class=\"sub\">up %.1f s &middot; %d workers, "
                        "%d servers &middot; refreshes every 2 s</div><div class=\"cards\">",
                        s.uptime_s, s.num_workers, s.num_servers);
  auto card = [&](const std::string& id, const std::string& label, const std::string& value) {
    absl::StrAppend(&html, "<div class=\"card\" id=\"", id, "\"><span>", label, "</span><b>",
                    Escape(value), "</b></div>");
  };
  card("card-nodes", "nodes healthy", absl::StrCat(ok, " / ", s.num_workers + s.num_servers));
  card("card-strategy", "strategy version",
       absl::StrCat("v", s.strategy_version, " (", s.strategy_source, ")"));
  card("card-pushed", "pushed by workers", Bytes(s.pushed_bytes));
  card("card-round", "round time (median)",
       s.measured_round_ms > 0 ? absl::StrFormat("%.1f ms", s.measured_round_ms) : "-");
  card("card-predicted", "predicted iteration",
       s.predicted_ms.has_value() ? absl::StrFormat("%.1f ms", *s.predicted_ms) : "no plan");
  html += "</div>";

  html +=
      "<h2>Nodes</h2><table id=\"nodes\"><tr><th>node</th><th>host</th><th>pid</th>"
      "<th>data address</th><th>last heard</th><th>health</th></tr>";
  for (const NodeHealth& n : s.nodes) {
    absl::StrAppend(
        &html, "<tr><td>", Escape(n.node.name), "</td><td>", Escape(n.node.host),
        "</td><td class=\"n\">", n.node.pid, "</td><td>",
        Escape(n.node.data_address.empty() ? "-" : n.node.data_address), "</td><td class=\"n\">",
        n.heartbeat_age_s < 0 ? "never" : absl::StrFormat("%.1f s ago", n.heartbeat_age_s),
        "</td><td><span class=\"badge ", n.state, "\">", n.state, "</span></td></tr>");
  }
  html += "</table>";

  html += "<h2>Round time over recent rounds</h2>";
  html += RoundChartSvg(s, 720, 240);
  html +=
      "<h2>Predicted against measured</h2><table id=\"prediction\"><tr><th>what</th>"
      "<th>ms</th></tr>";
  absl::StrAppend(&html, "<tr><td>planner's predicted iteration</td><td class=\"n\">",
                  s.predicted_ms.has_value() ? absl::StrFormat("%.2f", *s.predicted_ms)
                                             : "no plan (--strategy=auto plans)",
                  "</td></tr>");
  absl::StrAppend(&html,
                  "<tr><td>measured round: first push_pull to last completion (median)</td>"
                  "<td class=\"n\">",
                  s.measured_round_ms > 0 ? absl::StrFormat("%.2f", s.measured_round_ms) : "-",
                  "</td></tr>");
  absl::StrAppend(
      &html,
      "<tr><td>measured iteration: round start to next round start (median)</td>"
      "<td class=\"n\">",
      s.measured_iteration_ms > 0 ? absl::StrFormat("%.2f", s.measured_iteration_ms) : "-",
      "</td></tr>");
  if (s.predicted_ms.has_value() && s.measured_iteration_ms > 0) {
    absl::StrAppendFormat(
        &html,
        "<tr><td>prediction error against the iteration</td><td "
        "class=\"n\">%+.1f%%</td></tr>",
        100 * (*s.predicted_ms - s.measured_iteration_ms) / s.measured_iteration_ms);
  }
  html += "</table>";

  html += "<h2>Tensors</h2>";
  std::vector<std::string> unencrypted;
  for (const TensorRow& t : s.tensors) {
    if (t.unencrypted) unencrypted.push_back(Escape(t.name));
  }
  if (!unencrypted.empty()) {
    absl::StrAppend(&html, "<p class=\"warn\" id=\"unencrypted\"><b>", unencrypted.size(),
                    unencrypted.size() == 1 ? " tensor travels" : " tensors travel",
                    " unencrypted</b> in this keyed job: gloo's collectives sum them without "
                    "CURVE (the strategy sets allow_unencrypted_collectives): ",
                    absl::StrJoin(unencrypted, ", "), "</p>");
  }
  html +=
      "<table id=\"tensors\"><tr><th>tensor</th><th>codec</th><th>way</th>"
      "<th>compressed on</th><th>scheme</th><th>rounds (all workers)</th><th>raw</th>"
      "<th>pushed</th><th>ratio</th><th>last round</th></tr>";
  for (const TensorRow& t : s.tensors) {
    absl::StrAppend(
        &html, "<tr><td>", Escape(t.name), "</td><td>", Escape(t.codec), "</td><td>",
        compress::IsNoneName(t.codec)
            ? "-"
            : (t.pull_codec.empty() ? "one-way" : "two-way (" + Escape(t.pull_codec) + ")"),
        "</td><td>", Escape(t.compress_on), "</td><td>", Escape(t.scheme),
        t.unencrypted ? " (unencrypted)" : "", "</td><td class=\"n\">", t.rounds,
        "</td><td class=\"n\">", Bytes(t.raw_bytes), "</td><td class=\"n\">", Bytes(t.pushed_bytes),
        "</td><td class=\"n\">", t.ratio > 0 ? absl::StrFormat("%.2fx", t.ratio) : "-",
        "</td><td class=\"n\">", absl::StrFormat("%.2f ms", t.last_round_ms), "</td></tr>");
  }
  if (s.tensors.empty()) html += "<tr><td colspan=\"10\">no worker has reported yet</td></tr>";
  absl::StrAppend(&html, "</table><p class=\"sub\">bad control messages so far: ", s.bad_messages,
                  " &middot; <a href=\"/metrics\">/metrics</a> &middot; "
                  "<a href=\"/status.json\">/status.json</a></p></body></html>\n");
  return html;
}

std::string StatusJson(const StatusSnapshot& s) {
  std::string j =
      absl::StrCat("{\"uptime_s\":", s.uptime_s, ",\"num_workers\":", s.num_workers,
                   ",\"num_servers\":", s.num_servers, ",\"keyed\":", s.keyed ? "true" : "false",
                   ",\"strategy_version\":", s.strategy_version,
                   ",\"strategy_source\":", Json(s.strategy_source), ",\"nodes\":[");
  for (size_t i = 0; i < s.nodes.size(); ++i) {
    const NodeHealth& n = s.nodes[i];
    absl::StrAppend(&j, i ? "," : "", "{\"name\":", Json(n.node.name),
                    ",\"role\":", Json(n.node.role), ",\"rank\":", n.node.rank,
                    ",\"host\":", Json(n.node.host), ",\"pid\":", n.node.pid,
                    ",\"heartbeat_age_s\":", n.heartbeat_age_s, ",\"state\":", Json(n.state), "}");
  }
  j += "],\"tensors\":[";
  for (size_t i = 0; i < s.tensors.size(); ++i) {
    const TensorRow& t = s.tensors[i];
    absl::StrAppend(&j, i ? "," : "", "{\"name\":", Json(t.name), ",\"codec\":", Json(t.codec),
                    ",\"pull_codec\":", Json(t.pull_codec),
                    ",\"compress_on\":", Json(t.compress_on), ",\"scheme\":", Json(t.scheme),
                    ",\"unencrypted\":", t.unencrypted ? "true" : "false", ",\"rounds\":", t.rounds,
                    ",\"raw_bytes\":", t.raw_bytes, ",\"pushed_bytes\":", t.pushed_bytes,
                    ",\"ratio\":", t.ratio, ",\"last_round_ms\":", t.last_round_ms, "}");
  }
  j += "],\"rounds\":[";
  for (size_t i = 0; i < s.rounds.size(); ++i) {
    absl::StrAppend(&j, i ? "," : "", "[", s.rounds[i].first, ",", s.rounds[i].second, "]");
  }
  absl::StrAppend(&j, "],\"measured_round_ms\":", s.measured_round_ms,
                  ",\"measured_iteration_ms\":", s.measured_iteration_ms, ",\"predicted_ms\":",
                  s.predicted_ms.has_value() ? absl::StrCat(*s.predicted_ms) : "null",
                  ",\"pushed_bytes\":", s.pushed_bytes, ",\"pulled_bytes\":", s.pulled_bytes,
                  ",\"operations\":", s.operations, ",\"bad_messages\":", s.bad_messages, "}\n");
  return j;
}

}  // namespace bytecomp::status
