// Wrapper programs compiled with NVRTC for sm_90a (no GPU needed): the sample with and without
// the trust flag, the cache, a syntax error's log, defines reaching the source, the kernel-name
// and parameter-list checks, and kernels/amk_wrapper.h's record sizes as the device sees them.
#include <doctest/doctest.h>

#include <cstdlib>
#include <filesystem>
#include <sstream>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "cuda/compile.hpp"
#include "session/gpu_session.hpp"
#include "wrapper/wrapper.hpp"

namespace fs = std::filesystem;
using namespace amk;

namespace {

const fs::path kSample = fs::path(AMK_SOURCE_DIR) / "tests/wrapper/sample/wrapper.json";

struct TempCache {
  fs::path path;
  TempCache() {
    std::string tmpl = (fs::temp_directory_path() / "amk_wrapper_XXXXXX").string();
    path = mkdtemp(tmpl.data());
  }
  ~TempCache() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

// Compiles `w` (trusted) into `cache`; the JSON result.
ordered_json compile(const WrapperProgram& w, const fs::path& cache, const std::string& out = "") {
  GpuRequest req;
  req.cache_dir = cache.string();
  std::ostringstream text;
  return compile_wrapper_for_arch(w, wrapper_compile_arch(w, "", true), req, out, text);
}

// `w` with an inline source and no defines.
WrapperProgram with_source(WrapperProgram w, const std::string& source) {
  w.wrapper.source = source;
  w.wrapper.source_path.clear();
  w.wrapper.defines.clear();
  return w;
}

}  // namespace

TEST_CASE("the sample wrapper compiles for its snapshot's sm_90a, then comes from the cache") {
  TempCache cache;
  const WrapperProgram w = load_wrapper_file(kSample);
  CHECK(wrapper_arch(w.target) == "sm_90a");
  const ordered_json first = compile(w, cache.path, (cache.path / "df.cubin").string());
  CHECK(first["arch"] == "sm_90a");
  CHECK(first["kernel"] == "df_main");
  CHECK(first["cache_hit"] == false);
  CHECK(first["cubin_bytes"].get<uint64_t>() > 0);
  const auto options = first["options"].get<std::vector<std::string>>();
  CHECK(std::find(options.begin(), options.end(), "-DDF_TILE=64") != options.end());
  CHECK(std::find(options.begin(), options.end(), "-DDF_FAST") != options.end());
  CHECK(fs::exists(cache.path / "df.cubin"));
  CHECK(fs::exists(cache.path / "df.cubin.json"));

  const ordered_json second = compile(w, cache.path);
  CHECK(second["cache_hit"] == true);
  CHECK(second["fingerprint"] == first["fingerprint"]);

  // Another define is another key.
  WrapperProgram other = w;
  other.wrapper.defines[0].value = "32";
  const ordered_json third = compile(other, cache.path);
  CHECK(third["cache_hit"] == false);
  CHECK(third["fingerprint"] != first["fingerprint"]);
}

TEST_CASE("without the trust flag the source is refused, naming the flag") {
  const WrapperProgram w = load_wrapper_file(kSample);
  try {
    (void)wrapper_compile_arch(w, "", false);
    FAIL("compiled without --trust-source");
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::program);
    CHECK(exit_code_for(e.kind()) == ExitCode::invalid_program);
    CHECK(e.code() == "wrapper.untrusted");
    CHECK(e.where() == "/wrapper/source_path");
    CHECK(e.message().find("--trust-source") != std::string::npos);
  }
  CHECK(wrapper_compile_arch(w, "sm_90a", true) == "sm_90a");
  try {
    (void)wrapper_compile_arch(w, "sm_100a", true);
    FAIL("compiled for another arch than the snapshot's");
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::device);
    CHECK(e.code() == "device.target");
    CHECK(e.where() == "--arch");
  }
}

TEST_CASE("a syntax error is the nvrtc error with the log") {
  TempCache cache;
  const WrapperProgram w = with_source(
      load_wrapper_file(kSample), "extern \"C\" __global__ void df_main(int* p) { p[0] = 1 }\n");
  try {
    (void)compile(w, cache.path);
    FAIL("a syntax error compiled");
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::nvrtc);
    CHECK(e.code() == "nvrtc.compile");
    CHECK(e.message().find("df_main") != std::string::npos);
    CHECK(e.detail().find("wrapper.cu") != std::string::npos);  // the log names the source
    CHECK(e.detail().find("error") != std::string::npos);
  }
}

TEST_CASE("the program's defines reach the source") {
  TempCache cache;
  WrapperProgram w = with_source(
      load_wrapper_file(kSample),
      "#if !defined(T_ON) || T_WIDTH != 0x20\n"
      "#error \"T_ON and T_WIDTH=0x20 are the program's defines\"\n"
      "#endif\n"
      "#include \"amk_wrapper.h\"\n"
      "extern \"C\" __global__ void df_main(AMK_WRAPPER_PARAMS,\n"
      "    const __grid_constant__ amk_wrapper_tensor_map_t m) { flags[1] = T_WIDTH; }\n");
  try {
    (void)compile(w, cache.path);
    FAIL("compiled without the defines");
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::nvrtc);
    CHECK(e.detail().find("are the program's defines") != std::string::npos);
  }
  w.wrapper.defines = {{"T_ON", std::nullopt}, {"T_WIDTH", "0x20"}};
  CHECK(compile(w, cache.path)["cache_hit"] == false);
}

TEST_CASE("the kernel must be in the cubin under its own name") {
  TempCache cache;
  const WrapperProgram base = load_wrapper_file(kSample);
  for (const char* source : {"extern \"C\" __global__ void other(int* p) { p[0] = 1; }\n",
                             "__global__ void df_main(int* p) { p[0] = 1; }\n"}) {  // mangled
    CAPTURE(source);
    try {
      (void)compile(with_source(base, source), cache.path);
      FAIL("a cubin without df_main passed");
    } catch (const Error& e) {
      CHECK(e.kind() == ErrorKind::program);
      CHECK(e.code() == "wrapper.kernel_missing");
      CHECK(e.where() == "/wrapper/kernel_name");
    }
  }
  CHECK_FALSE(cubin_has_entry({}, "df_main"));
}

TEST_CASE("the kernel's parameters must be the 14 pointers and one tensor map per TMA spec") {
  TempCache cache;
  const WrapperProgram base = load_wrapper_file(kSample);  // one TMA spec (w_map)
  const std::string head = "#include \"amk_wrapper.h\"\nextern \"C\" __global__ void df_main(";
  const std::string body = ") { if (flags) flags[1] = 1; }\n";
  const std::string tma = "const __grid_constant__ amk_wrapper_tensor_map_t m";
  // The right list compiles; its records read back from the cubin.
  const ordered_json ok =
      compile(with_source(base, head + "AMK_WRAPPER_PARAMS, " + tma + body), cache.path);
  CHECK(ok["status"] == "ok");
  for (const std::string& params : std::vector<std::string>{
           "AMK_WRAPPER_PARAMS",                                     // the tensor map missing
           "AMK_WRAPPER_PARAMS, " + tma + ", " + tma + "2",          // one too many
           std::string("AMK_WRAPPER_PARAMS, unsigned long long m"),  // a pointer-sized stand-in
           "const uint8_t* instructions, " + tma + ", uint32_t* flags"}) {  // too few pointers
    CAPTURE(params);
    try {
      (void)compile(with_source(base, head + params + body), cache.path);
      FAIL("a kernel with another parameter list passed");
    } catch (const Error& e) {
      CHECK(e.kind() == ErrorKind::program);
      CHECK(e.code() == "wrapper.kernel_params");
      CHECK(e.where() == "/wrapper/kernel_name");
      CHECK(std::string(e.message()).find("1 tensor map(s) of 128 bytes") != std::string::npos);
    }
  }
  CHECK_FALSE(cubin_kernel_params({}, "df_main"));
}

TEST_CASE("amk_wrapper.h's records have the host's sizes on the device") {
  TempCache cache;
  const std::string source =
      "#include \"amk_wrapper.h\"\n"
      "static_assert(sizeof(amk_wrapper_tensor_arg_t) == " +
      std::to_string(sizeof(WrapperTensorArgRecord)) +
      ", \"tensor arg\");\n"
      "static_assert(sizeof(amk_wrapper_comm_t) == " +
      std::to_string(sizeof(WrapperCommRecord)) +
      ", \"comm\");\n"
      "static_assert(alignof(amk_wrapper_tensor_arg_t) == " +
      std::to_string(alignof(WrapperTensorArgRecord)) +
      ", \"tensor arg align\");\n"
      "static_assert(sizeof(amk_wrapper_tensor_map_t) == 128 && "
      "alignof(amk_wrapper_tensor_map_t) == 64, \"CUtensorMap\");\n"
      "extern \"C\" __global__ void df_main(AMK_WRAPPER_PARAMS,\n"
      "    const __grid_constant__ amk_wrapper_tensor_map_t tma_0) {\n"
      "  if (amk_wrapper_abort_requested(flags)) return;\n"
      "  global_staging[0] = (uint8_t)tensor_args[0].rank + (uint8_t)comms[0].kind;\n"
      "}\n";
  CHECK(compile(with_source(load_wrapper_file(kSample), source), cache.path)["kernel"] ==
        "df_main");
  CHECK(sizeof(WrapperTensorArgRecord) == AMK_WRAPPER_TENSOR_ARG_BYTES);
  CHECK(sizeof(WrapperCommRecord) == AMK_WRAPPER_COMM_BYTES);
}
