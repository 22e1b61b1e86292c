// `amk run` as a library call: load, verify, choose the backend, materialize the host data, run
// (GPU, or the CPU reference backend), optionally compare with the CPU backend (--check), and
// write the outputs and report.json.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "io/load.hpp"
#include "session/gpu_session.hpp"

namespace amk {

struct RunRequest {
  std::string program_path;
  LoadOptions load;
  std::string backend = "auto";    // auto (cuda when a GPU is usable, else cpu) | cuda | cpu
  std::string out_dir;             // outputs (.npy + manifest.json) and report.json; empty: none
  std::string report_path;         // report.json; empty: OUT/report.json, or none without OUT
  bool check = false;              // compare every output with the CPU backend
  bool save_inputs = false;        // also write every input buffer under OUT/inputs
  std::optional<uint64_t> reseed;  // draw every random init from this seed
  bool trust_source = false;       // compile a wrapper program's own CUDA source
  // Integer buffers whose contents the run sets instead of their init, by name (amk generate
  // --eos): each must exist, hold an integer dtype and as many elements as values given.
  std::vector<std::pair<std::string, std::vector<int64_t>>> values;
  // Device, cache, VM overrides; its iterations count on either backend, and trust_custom_ops
  // comes from `load`.
  GpuRequest gpu;
};

struct RunResult {
  ordered_json report;  // report.json's contents
  std::string text;     // the summary `amk run` prints
};

// Runs the program as `amk run` does. OUT is replaced as a whole (OutputFolder): the outputs,
// manifest.json and, without report_path, report.json are written to a staging folder swapped
// in once they are complete. Throws amk::Error; before anything runs for a backend other than
// auto, cuda or cpu (usage.backend), an OUT amk may not replace (usage.out_dir) or a
// report_path inside OUT other than OUT/report.json (usage.report). Every later failure is
// first written to a report with status error, timeout, rejected or mismatch: to report_path,
// else beside OUT as OUT.failed-report.json (OUT keeps the previous run's report); a successful
// run removes that file.
[[nodiscard]] RunResult run_program(const RunRequest& request);

}  // namespace amk
