// Atomic file replacement: a reader sees either the old file or the complete new one, never a
// partial write. Temp file in the target's folder (rename is atomic only within a filesystem),
// fsync before rename (so the rename cannot land before the data), fsync the folder after (so
// the rename itself survives a crash). Also the primitives of the output folder's swap
// (outputs.cpp): files written once into a private folder, folder fsync, renameat2.
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdio>

#include <atomic>
#include <cerrno>
#include <string>
#include <system_error>

#include "report/outputs.hpp"

namespace amk {
namespace {

std::atomic<uint64_t> g_temp_counter{0};

[[noreturn]] void throw_write_error(const std::filesystem::path& path, const std::string& what,
                                    int err) {
  throw Error(ErrorKind::io, "io.write", path.string(),
              what + ": " + std::system_category().message(err));
}

// Closes the fd and unlinks the temp file unless released; keeps every failure path short.
class TempFile {
public:
  TempFile(int fd, std::filesystem::path path) : fd_(fd), path_(std::move(path)) {}
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;
  ~TempFile() {
    if (fd_ >= 0) ::close(fd_);
    if (!released_) ::unlink(path_.c_str());
  }
  [[nodiscard]] int fd() const noexcept { return fd_; }
  [[nodiscard]] const std::filesystem::path& path() const noexcept { return path_; }
  // Closes now so that a close error (delayed write error on NFS) is reported.
  int close() noexcept {
    int rc = ::close(fd_);
    fd_ = -1;
    return rc;
  }
  void release() noexcept { released_ = true; }

private:
  int fd_;
  std::filesystem::path path_;
  bool released_ = false;
};

TempFile create_temp(const std::filesystem::path& dir, const std::filesystem::path& target) {
  // The name does not include the target's (which may already be NAME_MAX long); pid + counter
  // keep it unique, O_EXCL guards against a stale file left by a crashed process.
  constexpr int kAttempts = 16;
  int err = 0;
  for (int i = 0; i < kAttempts; ++i) {
    const uint64_t n = g_temp_counter.fetch_add(1, std::memory_order_relaxed);
    auto temp = dir / (".amk-tmp-" + std::to_string(::getpid()) + "-" + std::to_string(n));
    int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd >= 0) return TempFile(fd, std::move(temp));
    err = errno;
    if (err != EEXIST) break;
  }
  throw_write_error(target, "cannot create a temporary file in " + dir.string(), err);
}

void write_all(const TempFile& temp, const std::filesystem::path& target,
               std::span<const std::byte> bytes) {
  const std::byte* p = bytes.data();
  size_t left = bytes.size();
  while (left > 0) {
    ssize_t n = ::write(temp.fd(), p, left);
    if (n < 0) {
      const int err = errno;
      if (err == EINTR) continue;
      throw_write_error(target, "write failed", err);
    }
    p += n;
    left -= static_cast<size_t>(n);
  }
}

void sync_directory(const std::filesystem::path& dir, const std::filesystem::path& target) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    throw_write_error(target, "cannot open folder " + dir.string() + " to sync", err);
  }
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  // Some filesystems cannot sync a directory at all; the rename is done, nothing to undo.
  if (rc != 0 && err != EINVAL && err != ENOTSUP)
    throw_write_error(target, "fsync of folder " + dir.string() + " failed", err);
}

}  // namespace

void write_file_atomic(const std::filesystem::path& path, std::span<const std::byte> bytes) {
  if (!path.has_filename())
    throw Error(ErrorKind::io, "io.write", path.string(), "path does not name a file");
  const std::filesystem::path dir = path.has_parent_path() ? path.parent_path() : ".";

  TempFile temp = create_temp(dir, path);
  write_all(temp, path, bytes);
  // errno is read right after each call: building the message may allocate and clobber it.
  if (::fsync(temp.fd()) != 0) {
    const int err = errno;
    throw_write_error(path, "fsync failed", err);
  }
  if (temp.close() != 0) {
    const int err = errno;
    throw_write_error(path, "close failed", err);
  }
  if (::rename(temp.path().c_str(), path.c_str()) != 0) {
    const int err = errno;
    throw_write_error(path, "cannot replace the file", err);
  }
  temp.release();
  sync_directory(dir, path);
}

void write_text_atomic(const std::filesystem::path& path, const std::string& text) {
  write_file_atomic(path, std::as_bytes(std::span<const char>(text.data(), text.size())));
}

namespace detail {

void write_file_new(const std::filesystem::path& path, std::span<const std::byte> bytes) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
  if (fd < 0) {
    const int err = errno;
    throw_write_error(path, "cannot create the file", err);
  }
  TempFile file(fd, path);  // removed again on any failure below
  write_all(file, path, bytes);
  if (::fsync(file.fd()) != 0) {
    const int err = errno;
    throw_write_error(path, "fsync failed", err);
  }
  if (file.close() != 0) {
    const int err = errno;
    throw_write_error(path, "close failed", err);
  }
  file.release();
}

void sync_folder(const std::filesystem::path& dir) { sync_directory(dir, dir); }

int rename_paths(const std::filesystem::path& from, const std::filesystem::path& to,
                 RenameMode mode) noexcept {
  if (mode == RenameMode::replace) return ::rename(from.c_str(), to.c_str()) == 0 ? 0 : errno;
#ifdef SYS_renameat2
  // The kernel's flags (linux/fs.h); glibc before 2.28 has no wrapper, so the raw syscall.
  constexpr unsigned kNoReplace = 1, kExchange = 2;
  const unsigned flags = mode == RenameMode::exchange ? kExchange : kNoReplace;
  return ::syscall(SYS_renameat2, AT_FDCWD, from.c_str(), AT_FDCWD, to.c_str(), flags) == 0 ? 0
                                                                                            : errno;
#else
  return ENOSYS;
#endif
}

}  // namespace detail

}  // namespace amk
