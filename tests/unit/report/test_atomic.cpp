// Atomic writes: the target is either the old file or the whole new one, and no temporary file
// survives a failure.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "report/outputs.hpp"

#include "support.hpp"

namespace fs = std::filesystem;
using amk_test::entries;
using amk_test::FileSizeLimit;
using amk_test::read_text;
using amk_test::ScratchDir;

namespace {

// Runs f, expecting an io.write error about `path`; returns its message.
template <typename F>
std::string expect_write_error(const fs::path& path, F&& f) {
  try {
    f();
  } catch (const amk::Error& e) {
    CHECK(e.kind() == amk::ErrorKind::io);
    CHECK(e.code() == "io.write");
    CHECK(e.where() == path.string());
    return e.message();
  }
  FAIL("expected an io.write error");
  return {};
}

}  // namespace

TEST_CASE("atomic write creates and replaces, leaving no temp files") {
  ScratchDir dir("atomic_ok");
  const fs::path target = dir.path() / "a.txt";
  amk::write_text_atomic(target, "first");
  CHECK(read_text(target) == "first");
  amk::write_text_atomic(target, "second, longer");
  CHECK(read_text(target) == "second, longer");
  amk::write_text_atomic(target, "");
  CHECK(read_text(target) == "");
  CHECK(fs::file_size(target) == 0);

  const std::vector<std::byte> bin = {std::byte{0}, std::byte{0xff}, std::byte{'\n'}};
  amk::write_file_atomic(dir.path() / "b.bin", bin);
  CHECK(amk_test::read_bytes(dir.path() / "b.bin") == bin);
  CHECK(entries(dir.path()) == std::vector<std::string>{"a.txt", "b.bin"});
}

TEST_CASE("atomic write over a directory fails and leaves it intact") {
  ScratchDir dir("atomic_dir");
  const fs::path target = dir.path() / "out";
  fs::create_directories(target);
  amk::write_text_atomic(target / "keep.txt", "keep");
  const std::string msg = expect_write_error(target, [&] { amk::write_text_atomic(target, "x"); });
  CHECK(msg.find("cannot replace the file") != std::string::npos);
  CHECK(msg.find("Is a directory") != std::string::npos);
  CHECK(fs::is_directory(target));
  CHECK(read_text(target / "keep.txt") == "keep");
  CHECK(entries(dir.path()) == std::vector<std::string>{"out"});
}

TEST_CASE("atomic write that fails mid-way keeps the old file") {
  ScratchDir dir("atomic_full");
  const fs::path target = dir.path() / "data.bin";
  amk::write_text_atomic(target, "old contents");
  const std::string big(64 * 1024, 'n');
  std::string msg;
  {
    FileSizeLimit limit(4096);
    REQUIRE(limit.ok());
    msg = expect_write_error(target, [&] { amk::write_text_atomic(target, big); });
  }
  CHECK(msg.find("write failed") != std::string::npos);
  CHECK(msg.find("File too large") != std::string::npos);
  CHECK(read_text(target) == "old contents");
  CHECK(entries(dir.path()) == std::vector<std::string>{"data.bin"});
  // And the same write succeeds once the limit is gone.
  amk::write_text_atomic(target, big);
  CHECK(read_text(target) == big);
}

TEST_CASE("atomic write into a read-only folder keeps the old file") {
  if (amk_test::is_root()) {
    MESSAGE("skipped: root ignores folder permissions");
    return;
  }
  ScratchDir dir("atomic_ro");
  const fs::path target = dir.path() / "r.txt";
  amk::write_text_atomic(target, "old");
  fs::permissions(dir.path(), fs::perms::owner_read | fs::perms::owner_exec);
  const std::string msg =
      expect_write_error(target, [&] { amk::write_text_atomic(target, "new"); });
  fs::permissions(dir.path(), fs::perms::owner_all);
  CHECK(msg.find("cannot create a temporary file") != std::string::npos);
  CHECK(read_text(target) == "old");
  CHECK(entries(dir.path()) == std::vector<std::string>{"r.txt"});
}

TEST_CASE("atomic write into a missing folder or to a folder path is refused") {
  ScratchDir dir("atomic_missing");
  const fs::path target = dir.path() / "no_such_dir" / "x.txt";
  const std::string msg = expect_write_error(target, [&] { amk::write_text_atomic(target, "x"); });
  CHECK(msg.find("No such file or directory") != std::string::npos);
  CHECK(!fs::exists(dir.path() / "no_such_dir"));

  const fs::path folder_path = dir.path() / "";
  expect_write_error(folder_path, [&] { amk::write_text_atomic(folder_path, "x"); });
  CHECK(entries(dir.path()).empty());
}
