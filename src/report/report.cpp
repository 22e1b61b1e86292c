// report.json: one ordered, versioned object per command run (schemas/report.schema.json).
#include <algorithm>
#include <array>
#include <cmath>
#include <ctime>

#include "report/outputs.hpp"

#ifndef AMK_VERSION
#error "AMK_VERSION must be defined by the build"
#endif

namespace amk {
namespace {

constexpr std::array<std::string_view, 5> kStatuses = {"ok", "timeout", "error", "rejected",
                                                       "mismatch"};

// Absent parts are null rather than "" or 0, so consumers can tell "unknown" from a value.
nlohmann::ordered_json string_or_null(const std::string& s) {
  return s.empty() ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(s);
}

nlohmann::ordered_json positive_or_null(uint32_t v) {
  return v == 0 ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(v);
}

}  // namespace

std::string utc_timestamp(std::chrono::system_clock::time_point when) {
  const std::time_t t = std::chrono::system_clock::to_time_t(when);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  const size_t n = std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return std::string(buf, n);
}

nlohmann::json error_to_json(const Error& error) {
  nlohmann::json e;
  e["kind"] = kind_name(error.kind());
  e["code"] = error.code();
  e["where"] = error.where();
  e["message"] = error.message();
  e["detail"] = error.detail();
  return e;
}

nlohmann::ordered_json make_report(const RunReport& r) {
  // A status outside the schema's enum is a bug in the caller; refuse rather than write a
  // report that does not validate.
  if (std::find(kStatuses.begin(), kStatuses.end(), r.status) == kStatuses.end())
    throw Error(ErrorKind::internal, "report.status", "",
                "unknown report status '" + r.status + "'");
  if (r.command.empty())
    throw Error(ErrorKind::internal, "report.command", "", "report without a command");

  using oj = nlohmann::ordered_json;
  oj j;
  j["schema_version"] = kReportSchemaVersion;
  j["amk_version"] = AMK_VERSION;
  j["command"] = r.command;
  j["status"] = r.status;
  j["backend"] = string_or_null(r.backend);
  j["program"] = {{"path", string_or_null(r.program_path)},
                  {"name", string_or_null(r.program_name)},
                  {"fingerprint", string_or_null(r.program_fingerprint)},
                  {"data_fingerprint", string_or_null(r.data_fingerprint)}};
  j["target_fingerprint"] = string_or_null(r.target_fingerprint);
  j["artifact_fingerprint"] = string_or_null(r.artifact_fingerprint);
  j["launch"] = {{"grid", positive_or_null(r.grid)},
                 {"block", positive_or_null(r.block)},
                 {"passes", r.passes},
                 {"passes_run", r.passes_run != 0 ? r.passes_run : r.passes}};
  j["instructions"] = r.instructions;
  oj timings = oj::object();
  // JSON has no NaN/inf: an unmeasured phase is null.
  for (const auto& [phase, ms] : r.timings_ms)
    timings[phase] = std::isfinite(ms) ? oj(ms) : oj(nullptr);
  j["timings_ms"] = std::move(timings);
  j["device"] = r.device;
  j["versions"] = r.versions;
  j["error"] = r.error;
  j["diagnostics"] = r.diagnostics;
  j["check"] = r.check;
  j["outputs"] = r.outputs;
  j["extra"] = r.extra;
  j["created_utc"] =
      r.created_utc.empty() ? utc_timestamp(std::chrono::system_clock::now()) : r.created_utc;
  return j;
}

void write_report(const std::filesystem::path& path, const RunReport& report) {
  // Messages may quote bytes from a user's file; invalid UTF-8 is replaced, never a throw.
  write_text_atomic(
      path,
      make_report(report).dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n");
}

}  // namespace amk
