// OutputFolder: the output folder is replaced as a whole. A new folder, an earlier run's folder
// replaced (with RENAME_EXCHANGE and with the two-rename fallback), folders amk must not
// replace, what killed runs leave beside the folder, and failures that leave it as it was.
#include <doctest/doctest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "report/outputs.hpp"

#include "support.hpp"

namespace fs = std::filesystem;
using amk::OutputFolder;
using amk_test::entries;
using amk_test::read_text;
using amk_test::ScratchDir;
using amk_test::snapshot;
using amk_test::write_text;

namespace {

// Above any pid_max (2^22): never a live process.
constexpr const char* kDeadPid = "99999999";

// A folder as a run leaves it: a manifest naming `files`, the files, and a report.
void write_run(const fs::path& staging, const std::string& tag,
               const std::vector<std::string>& files) {
  nlohmann::json m = {{"schema_version", 1}, {"program", tag}, {"program_fingerprint", tag}};
  m["outputs"] = nlohmann::json::array();
  for (const auto& f : files) {
    write_text(staging / f, tag + " " + f);
    m["outputs"].push_back({{"file", f}});
  }
  write_text(staging / "manifest.json", m.dump());
  write_text(staging / "report.json", nlohmann::json{{"schema_version", 1},
                                                     {"amk_version", "test"},
                                                     {"command", "run"},
                                                     {"status", "ok"}}
                                          .dump());
}

void run_into(const fs::path& dir, const std::string& tag, const std::vector<std::string>& files,
              bool exchange = true) {
  OutputFolder folder(dir);
  write_run(folder.staging(), tag, files);
  folder.commit(exchange);
}

// Runs f, expecting usage.out_dir; returns the message.
template <typename F>
std::string expect_refusal(F&& f) {
  try {
    f();
  } catch (const amk::Error& e) {
    CHECK(e.kind() == amk::ErrorKind::usage);
    CHECK(e.code() == "usage.out_dir");
    return e.message();
  }
  FAIL("expected usage.out_dir");
  return {};
}

}  // namespace

TEST_CASE("a new output folder appears whole, parents and all") {
  ScratchDir scratch("folder_new");
  const fs::path dir = scratch.path() / "a" / "out";
  {
    OutputFolder folder(dir / "");  // a trailing separator names the same folder
    CHECK(folder.dir() == dir);
    CHECK(folder.staging().parent_path() == scratch.path() / "a");
    const std::string name = folder.staging().filename().string();
    CHECK_MESSAGE(name.rfind(".out.amk-new-" + std::to_string(::getpid()) + "-", 0) == 0, name);
    CHECK(folder.failed_report_path() == scratch.path() / "a" / "out.failed-report.json");
    write_run(folder.staging(), "one", {"y.npy", "inputs/x.npy"});
    CHECK(!fs::exists(dir));  // nothing is visible before the commit
    folder.commit();
    CHECK(folder.committed());
  }
  CHECK(entries(scratch.path() / "a") == std::vector<std::string>{"out"});
  CHECK(entries(dir) ==
        std::vector<std::string>{"inputs", "manifest.json", "report.json", "y.npy"});
  CHECK(read_text(dir / "inputs/x.npy") == "one inputs/x.npy");
}

TEST_CASE("an earlier run's folder is replaced as a whole") {
  ScratchDir scratch("folder_replace");
  const fs::path dir = scratch.path() / "out";
  run_into(dir, "one", {"a.npy", "b.npy", "inputs/x.npy"});
  // An older amk's temporary file and a file of an earlier program stay only until the swap.
  write_text(dir / ".amk-tmp-1-0", "partial");
  write_text(dir / "stale.npy", "stale");
  ::chmod(dir.c_str(), 0750);

  for (const bool exchange : {true, false}) {
    CAPTURE(exchange);
    run_into(dir, exchange ? "two" : "three", {"b.npy", "c.npy"}, exchange);
    CHECK(entries(dir) ==
          std::vector<std::string>{"b.npy", "c.npy", "manifest.json", "report.json"});
    CHECK(read_text(dir / "b.npy") == (exchange ? "two b.npy" : "three b.npy"));
    // No staging or old folder is left beside it, and the folder keeps its permissions.
    CHECK(entries(scratch.path()) == std::vector<std::string>{"out"});
    struct stat st {};
    REQUIRE(::stat(dir.c_str(), &st) == 0);
    CHECK((st.st_mode & 07777) == 0750);
  }
}

TEST_CASE("an empty folder or one with only an earlier failed run's report is amk's to replace") {
  ScratchDir scratch("folder_empty");
  fs::create_directories(scratch.path() / "empty");
  run_into(scratch.path() / "empty", "one", {"y.npy"});
  CHECK(read_text(scratch.path() / "empty/y.npy") == "one y.npy");

  // (An older amk wrote a failed run's report into the folder.)
  write_text(scratch.path() / "failed/report.json", R"({"schema_version": 1, "amk_version": "0.9",
      "command": "run", "status": "error"})");
  run_into(scratch.path() / "failed", "one", {"y.npy"});
  CHECK(entries(scratch.path() / "failed") ==
        std::vector<std::string>{"manifest.json", "report.json", "y.npy"});
}

TEST_CASE("a folder that is not amk's is refused before anything is written") {
  ScratchDir scratch("folder_foreign");
  const fs::path dir = scratch.path() / "mine";
  std::string msg;

  SUBCASE("a user's files") {
    write_text(dir / "notes.txt", "keep me");
    msg = expect_refusal([&] { OutputFolder folder(dir); });
    CHECK_MESSAGE(msg.find("'notes.txt' is not an amk output") != std::string::npos, msg);
  }
  SUBCASE("a manifest.json that is not amk's") {
    write_text(dir / "manifest.json", R"({"name": "my project"})");
    write_text(dir / "a.npy", "data");
    msg = expect_refusal([&] { OutputFolder folder(dir); });
    CHECK_MESSAGE(msg.find("'manifest.json' is not an amk output") != std::string::npos, msg);
  }
  SUBCASE(".npy files without amk's manifest or report") {
    write_text(dir / "a.npy", "data");
    msg = expect_refusal([&] { OutputFolder folder(dir); });
    CHECK_MESSAGE(msg.find("holds no manifest.json or report.json of amk") != std::string::npos,
                  msg);
  }
  SUBCASE("an amk folder with a user's file added") {
    run_into(dir, "one", {"y.npy"});
    write_text(dir / "notes.txt", "keep me");
    msg = expect_refusal([&] { OutputFolder folder(dir); });
    CHECK_MESSAGE(msg.find("'notes.txt' is not an amk output") != std::string::npos, msg);
  }
  SUBCASE("an amk folder with a user's folder or link in it") {
    run_into(dir, "one", {"y.npy"});
    fs::create_directories(dir / "inputs" / "sub");
    msg = expect_refusal([&] { OutputFolder folder(dir); });
    CHECK_MESSAGE(msg.find("'inputs/sub' is not an amk output") != std::string::npos, msg);
    fs::remove(dir / "inputs" / "sub");
    fs::create_symlink(scratch.path(), dir / "link.npy");
    msg = expect_refusal([&] { OutputFolder folder(dir); });
    CHECK_MESSAGE(msg.find("'link.npy' is not an amk output") != std::string::npos, msg);
  }
  SUBCASE("a file") {
    write_text(dir, "a file");
    msg = expect_refusal([&] { OutputFolder folder(dir); });
    CHECK(msg.find("it is not a folder") != std::string::npos);
  }
  SUBCASE("the current folder or one above it") {
    fs::create_directories(dir);
    const fs::path cwd = fs::current_path();
    fs::current_path(dir);
    const std::string here = expect_refusal([&] { OutputFolder folder("."); });
    const std::string above = expect_refusal([&] { OutputFolder folder(".."); });
    const std::string root = expect_refusal([&] { OutputFolder folder("/"); });
    fs::current_path(cwd);
    CHECK_MESSAGE(here.find("it is the current folder or holds it") != std::string::npos, here);
    CHECK_MESSAGE(above.find("it is the current folder or holds it") != std::string::npos, above);
    CHECK_MESSAGE(root.find("it is the current folder or holds it") != std::string::npos, root);
    msg = "amk replaces the whole output folder";
  }
  CHECK_MESSAGE(msg.find("amk replaces the whole output folder") != std::string::npos, msg);
  // Nothing was created beside the folder.
  CHECK(entries(scratch.path()) == std::vector<std::string>{"mine"});
}

TEST_CASE("a folder that stops being amk's during the run is not replaced") {
  ScratchDir scratch("folder_changed");
  const fs::path dir = scratch.path() / "out";
  run_into(dir, "one", {"y.npy"});
  {
    OutputFolder folder(dir);
    write_run(folder.staging(), "two", {"y.npy"});
    write_text(dir / "notes.txt", "added during the run");
    const auto before = snapshot(dir);
    expect_refusal([&] { folder.commit(); });
    CHECK(snapshot(dir) == before);
    CHECK(!folder.committed());
  }
  CHECK(entries(scratch.path()) == std::vector<std::string>{"out"});  // staging removed
}

TEST_CASE("an uncommitted folder leaves the previous outputs byte for byte") {
  ScratchDir scratch("folder_abort");
  const fs::path dir = scratch.path() / "out";
  run_into(dir, "one", {"y.npy", "inputs/x.npy"});
  const auto before = snapshot(dir);
  {
    OutputFolder folder(dir);
    write_run(folder.staging(), "two", {"y.npy", "z.npy"});
    // (the run fails here)
  }
  CHECK(snapshot(dir) == before);
  CHECK(entries(scratch.path()) == std::vector<std::string>{"out"});
}

TEST_CASE("what killed runs left beside the folder is cleaned up by the next run") {
  ScratchDir scratch("folder_stale");
  const fs::path dir = scratch.path() / "out";
  const std::string dead = kDeadPid;

  SUBCASE("staging folders and old contents of processes that are gone") {
    run_into(dir, "one", {"y.npy"});
    write_text(scratch.path() / (".out.amk-new-" + dead + "-0123456789abcdef/y.npy"), "partial");
    write_text(scratch.path() / (".out.amk-old-" + dead + "-0123456789abcdef/y.npy"), "older");
    // A live process's (pid 1 is always there): a concurrent run; another folder's; not amk's.
    write_text(scratch.path() / ".out.amk-new-1-0123456789abcdef/y.npy", "running");
    write_text(scratch.path() / (".other.amk-new-" + dead + "-0123456789abcdef/y.npy"), "other");
    write_text(scratch.path() / ".out.amk-new-x/y.npy", "unknown");
    {
      OutputFolder folder(dir);
      std::vector<std::string> want = {
          ".other.amk-new-" + dead + "-0123456789abcdef", ".out.amk-new-1-0123456789abcdef",
          folder.staging().filename().string(), ".out.amk-new-x", "out"};
      std::sort(want.begin(), want.end());
      CHECK(entries(scratch.path()) == want);
    }
    CHECK(read_text(dir / "y.npy") == "one y.npy");
  }
  SUBCASE("a run killed between the fallback's two renames: the old folder comes back") {
    write_run(scratch.path() / (".out.amk-old-" + dead + "-0123456789abcdef"), "old", {"y.npy"});
    write_run(scratch.path() / (".out.amk-new-" + dead + "-0123456789abcdef"), "new", {"y.npy"});
    {
      OutputFolder folder(dir);  // and then the run fails
    }
    CHECK(entries(scratch.path()) == std::vector<std::string>{"out"});
    CHECK(read_text(dir / "y.npy") == "old y.npy");
  }
}

TEST_CASE("a staging folder name fits in NAME_MAX beside a long folder name") {
  ScratchDir scratch("folder_long");
  const fs::path dir = scratch.path() / std::string(250, 'd');
  run_into(dir, "one", {"y.npy"});
  run_into(dir, "two", {"y.npy"});
  CHECK(read_text(dir / "y.npy") == "two y.npy");
  CHECK(entries(scratch.path()) == std::vector<std::string>{std::string(250, 'd')});
}

TEST_CASE("a symbolic link to the output folder is followed") {
  ScratchDir scratch("folder_link");
  const fs::path real = scratch.path() / "real";
  run_into(real, "one", {"y.npy"});
  fs::create_directory_symlink(real, scratch.path() / "link");
  run_into(scratch.path() / "link", "two", {"y.npy"});
  CHECK(fs::is_symlink(scratch.path() / "link"));
  CHECK(read_text(real / "y.npy") == "two y.npy");
  CHECK(entries(scratch.path()) == std::vector<std::string>{"link", "real"});
}
