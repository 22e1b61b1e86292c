// The API's parts that need no device (both builds; unit-tested without a GPU): the program file
// loaded and verified for Executable::open, the checks of set_input / bind / read_output
// arguments, and the fingerprints that let set_input skip an upload of unchanged bytes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "amk/amk.hpp"
#include "config/vm_config.hpp"
#include "io/load.hpp"
#include "program/program.hpp"
#include "verify/ranks.hpp"
#include "wrapper/wrapper.hpp"

namespace amk::detail {

// Executable::open's program and what its options say, checked before anything is loaded:
// usage.vm for a bad vm text, api.timeout for a deadline of 0 or past a program's limit.
struct OpenedProgram {
  // Loaded and verified; a wrapper's: wrapper_buffers(*wrapper); a program with ranks: its
  // expansion over them (buffers NAME.rankR), which only the CPU backend runs.
  Program program;
  uint32_t ranks = 1;
  std::vector<RankOrigin> rank_origin;  // with ranks: what each instruction of `program` stands for
  std::optional<WrapperProgram> wrapper;  // a wrapper program, loaded and checked
  LoadOptions load;
  VmOverrides vm;
};
[[nodiscard]] OpenedProgram load_for_open(const std::string& path, const OpenOptions& options);
// The same for a program already in memory (a VM program; the Python module's amk.Program),
// verified here.
[[nodiscard]] OpenedProgram opened_program(Program program, const OpenOptions& options);
// Executable::open after the load: the device checked, the initial contents made, the VM
// compiled and uploaded (without CUDA: throw_no_cuda).
[[nodiscard]] Executable open_opened(OpenedProgram opened, const OpenOptions& options);

// The refusal of a build without the CUDA toolkit: Error(device, device.unsupported).
[[noreturn]] void throw_no_cuda();

// Error(usage, api.closed) for `call` on a closed executable.
[[noreturn]] void throw_closed(std::string_view call);

// Throws Error(usage, api.data) for a null host pointer handed to `call` for buffer `name`.
void check_host_pointer(const void* data, std::string_view name, std::string_view call);

// The buffers some instruction may write (indexed like program.buffers): those in the write and
// read_write slots of built-in ops, and every operand of a custom op (its slots declare no
// access).
[[nodiscard]] std::vector<bool> written_buffers(const Program& program);

// One program's buffers as the API sees them. `call` names the API call in errors.
class BufferBook {
public:
  // `written`: which buffers a launch may write, where the program cannot say (a wrapper's
  // kernel may write any array it is given); default written_buffers(program).
  explicit BufferBook(const Program& program,
                      std::optional<std::vector<bool>> written = std::nullopt);

  [[nodiscard]] const std::vector<BufferInfo>& infos() const noexcept { return infos_; }
  // The buffer's index; throws Error(usage, api.buffer) naming the program's buffers.
  [[nodiscard]] uint32_t find(std::string_view name, std::string_view call) const;
  // Throws Error(usage, api.size / api.dtype) unless `bytes` and `dtype` are the buffer's.
  void check(uint32_t index, uint64_t bytes, std::string_view dtype, std::string_view call) const;
  // Throws Error(usage, api.bind.pointer) for a null address, api.bind.alignment for one off the
  // 16-byte boundary the VM's vector loads and tensor maps need.
  void check_bind(uint32_t index, uint64_t address) const;

  // The fingerprint of `data` for buffer `index`, or nothing when they are the bytes last
  // uploaded there (the upload can be skipped).
  [[nodiscard]] std::optional<uint64_t> needs_upload(uint32_t index,
                                                     std::span<const std::byte> data) const;
  void uploaded(uint32_t index, uint64_t fingerprint);
  void bound(uint32_t index);  // lives in caller memory now: no fingerprint is kept
  void launched();             // forgets the fingerprints of the buffers a launch may write

private:
  std::vector<BufferInfo> infos_;
  std::vector<std::optional<uint64_t>> uploaded_;  // XXH64 of the last upload
  std::map<std::string, uint32_t, std::less<>> index_;
  std::string program_name_;
};

}  // namespace amk::detail
