// Helpers shared by the report tests (with common/files.hpp): a file size limit (a full disk),
// and running the system Python (numpy / jsonschema checks are skipped when it or the module is
// missing).
#pragma once

#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "common/files.hpp"

namespace amk_test {

namespace fs = std::filesystem;

inline constexpr const char* kPython = "/usr/bin/python3";

// Runs a command, returns (exit status, stdout).
inline std::pair<int, std::string> run_capture(const std::string& command) {
  std::string out;
  FILE* f = ::popen(command.c_str(), "r");
  if (f == nullptr) return {-1, out};
  std::array<char, 4096> buf;
  size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), f)) > 0) out.append(buf.data(), n);
  const int status = ::pclose(f);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

// Whether /usr/bin/python3 exists and can import `module`.
inline bool python_has(const std::string& module) {
  if (!fs::exists(kPython)) return false;
  return run_capture(std::string(kPython) + " -c 'import " + module + "' 2>/dev/null").first == 0;
}

// Runs a Python script file with arguments; returns (status, stdout).
inline std::pair<int, std::string> run_python(const fs::path& script,
                                              const std::vector<std::string>& args) {
  std::string cmd = std::string(kPython) + " '" + script.string() + "'";
  for (const auto& a : args) cmd += " '" + a + "'";
  return run_capture(cmd + " 2>&1");
}

inline bool is_root() { return ::geteuid() == 0; }

// Lowers the file size limit so that writes past `bytes` fail with EFBIG (a stand-in for a full
// disk that works as root too), and restores it.
class FileSizeLimit {
public:
  explicit FileSizeLimit(rlim_t bytes) {
    ::getrlimit(RLIMIT_FSIZE, &old_);
    old_handler_ = std::signal(SIGXFSZ, SIG_IGN);  // EFBIG instead of a signal
    rlimit lim = old_;
    lim.rlim_cur = bytes;
    ok_ = ::setrlimit(RLIMIT_FSIZE, &lim) == 0;
  }
  ~FileSizeLimit() {
    ::setrlimit(RLIMIT_FSIZE, &old_);
    std::signal(SIGXFSZ, old_handler_);
  }
  [[nodiscard]] bool ok() const { return ok_; }

private:
  rlimit old_{};
  void (*old_handler_)(int) = nullptr;
  bool ok_ = false;
};

// Validates a JSON file against schemas/<name>.schema.json (the report schema refers to the
// manifest schema by $id, so both are registered). Prints "valid" or the errors and "invalid".
inline std::pair<int, std::string> validate_against_schema(const fs::path& scratch,
                                                           const fs::path& instance,
                                                           const std::string& name) {
  const fs::path script = scratch / "validate.py";
  {
    std::ofstream s(script);
    s << R"(import json, os, sys
from jsonschema import Draft202012Validator, FormatChecker
schema_dir, instance, name = sys.argv[1:4]
schemas = {n: json.load(open(os.path.join(schema_dir, n + '.schema.json')))
           for n in ('report', 'manifest')}
for s in schemas.values():
    Draft202012Validator.check_schema(s)
schema = schemas[name]
try:  # jsonschema >= 4.18
    from referencing import Registry, Resource
    registry = Registry().with_resources(
        [(s['$id'], Resource.from_contents(s)) for s in schemas.values()])
    v = Draft202012Validator(schema, registry=registry, format_checker=FormatChecker())
except (ImportError, TypeError):
    from jsonschema import RefResolver
    resolver = RefResolver.from_schema(schema, store={s['$id']: s for s in schemas.values()})
    v = Draft202012Validator(schema, resolver=resolver, format_checker=FormatChecker())
errors = sorted(v.iter_errors(json.load(open(instance))), key=lambda e: list(e.path))
for e in errors:
    print('/'.join(map(str, e.path)), e.message)
print('invalid' if errors else 'valid')
)";
  }
  return run_python(script, {std::string(AMK_SOURCE_DIR) + "/schemas", instance.string(), name});
}

}  // namespace amk_test
