// The structural checks a loader can make on a wrapper program without a device: package arrays
// against each other (queue and barrier-init ranges, record sizes), the launch against the
// target snapshot the compiler recorded, and the TMA specs against cuTensorMapEncodeTiled's rules.
// What needs the device (its fingerprint, occupancy, the kernel's cluster limit) comes later.
#include <cstring>
#include <string>
#include <vector>

#include "backend/host_data.hpp"
#include "core/checked.hpp"
#include "core/error.hpp"
#include "verify/verify.hpp"
#include "wrapper/wrapper.hpp"

namespace amk {
namespace {

std::string at(PackageArray a) { return "/package/" + std::string(package_array_name(a)); }

// Moves an error about the one-buffer program that materialized `a` to the package entry.
std::string relocate(const std::string& where, PackageArray a) {
  const std::string from = "/buffers/0";
  if (where.compare(0, from.size(), from) == 0) return at(a) + where.substr(from.size());
  return where;
}

// Element i of an integer array of dtype i32, u32 or i64; negative values are refused.
uint64_t index_at(const std::vector<std::byte>& bytes, DType dtype, uint64_t i, PackageArray a) {
  int64_t v = 0;
  switch (dtype) {
    case DType::i32: {
      int32_t x = 0;
      std::memcpy(&x, bytes.data() + i * 4, 4);
      v = x;
      break;
    }
    case DType::u32: {
      uint32_t x = 0;
      std::memcpy(&x, bytes.data() + i * 4, 4);
      return x;
    }
    default: std::memcpy(&v, bytes.data() + i * 8, 8); break;
  }
  if (v < 0)
    throw_program_error("wrapper.package.negative", at(a),
                        "element " + std::to_string(i) + " is " + std::to_string(v) +
                            "; offsets and lengths are non-negative");
  return static_cast<uint64_t>(v);
}

// Every (offset, length) pair of two parallel arrays lies within `limit` records of `what`.
void check_ranges(const WrapperProgram& w, PackageArray offsets, PackageArray lengths,
                  uint64_t limit, const std::string& what, const std::string& code,
                  const LoadOptions& options) {
  const PackageEntry& eo = w.entry(offsets);
  const PackageEntry& el = w.entry(lengths);
  const std::vector<std::byte> ob = package_bytes(w, offsets, options);
  const std::vector<std::byte> lb = package_bytes(w, lengths, options);
  for (uint64_t q = 0; q < eo.count(); ++q) {
    const uint64_t off = index_at(ob, eo.buffer.dtype, q, offsets);
    const uint64_t len = index_at(lb, el.buffer.dtype, q, lengths);
    const auto end = checked_add(off, len);
    if (!end || *end > limit)
      throw_program_error(code, at(offsets),
                          "entry " + std::to_string(q) + ": offset " + std::to_string(off) +
                              " + length " + std::to_string(len) + " is past the " +
                              std::to_string(limit) + " " + what);
  }
}

}  // namespace

std::vector<std::byte> package_bytes(const WrapperProgram& w, PackageArray a,
                                     const LoadOptions& options) {
  const PackageEntry& e = w.entry(a);
  if (!e.present || e.count() == 0) return {};
  if (e.buffer.init.kind == InitKind::values) return e.buffer.init.data;
  Program p;
  p.base_dir = w.base_dir;
  p.buffers = {e.buffer};
  try {
    return materialize_buffer(p, 0, options);
  } catch (const Error& err) {
    Error moved(err.kind(), err.code(), relocate(err.where(), a), err.message());
    moved.with_detail(err.detail());
    throw moved;
  }
}

WrapperSummary check_wrapper(const WrapperProgram& w, const LoadOptions& options) {
  WrapperSummary s;

  // Record sizes divide their arrays.
  for (size_t i = 0; i < kPackageArrays; ++i) {
    const PackageEntry& e = w.package[i];
    if (!e.present || e.bytes() % e.record_bytes == 0) continue;
    throw_program_error("wrapper.package.record_bytes",
                        at(static_cast<PackageArray>(i)) + "/record_bytes",
                        std::to_string(e.bytes()) + " bytes are not a whole number of " +
                            std::to_string(e.record_bytes) + "-byte records");
  }
  s.instruction_count = w.entry(PackageArray::instructions).records();
  s.slot_count = w.entry(PackageArray::slots).records();
  s.comm_count = w.entry(PackageArray::comms).records();
  s.tensor_args_bytes = w.tensor_args.size() * sizeof(WrapperTensorArgRecord);

  // One queue per block: queue_offsets and queue_lengths have one entry per queue, and every
  // queue lies within the instruction records.
  for (PackageArray a : {PackageArray::queue_offsets, PackageArray::queue_lengths})
    if (w.entry(a).count() != w.launch.queues)
      throw_program_error("wrapper.package.queue_count", at(a) + "/count",
                          std::to_string(w.entry(a).count()) + " entries; launch.queues is " +
                              std::to_string(w.launch.queues) + " (one entry per queue)");
  check_ranges(w, PackageArray::queue_offsets, PackageArray::queue_lengths, s.instruction_count,
               "instruction records", "wrapper.package.queue_range", options);

  // Barrier inits: parallel offset and length arrays (none, or one entry per queue) whose ranges
  // lie within barrier_init_indices.
  const PackageEntry& bo = w.entry(PackageArray::barrier_init_offsets);
  const PackageEntry& bl = w.entry(PackageArray::barrier_init_lengths);
  if (bo.count() != bl.count())
    throw_program_error(
        "wrapper.package.barrier_init_count", at(PackageArray::barrier_init_lengths) + "/count",
        std::to_string(bl.count()) + " lengths for " + std::to_string(bo.count()) + " offsets");
  if (bo.count() != 0 && bo.count() != w.launch.queues)
    throw_program_error("wrapper.package.barrier_init_count",
                        at(PackageArray::barrier_init_offsets) + "/count",
                        std::to_string(bo.count()) + " entries; expected none or one per queue (" +
                            std::to_string(w.launch.queues) + ")");
  check_ranges(w, PackageArray::barrier_init_offsets, PackageArray::barrier_init_lengths,
               w.entry(PackageArray::barrier_init_indices).count(),
               "elements of barrier_init_indices", "wrapper.package.barrier_init_range", options);

  // Comm records: the HBM send and receive kinds need the flags zeroed before each launch.
  if (s.comm_count > 0) {
    const std::vector<std::byte> comms = package_bytes(w, PackageArray::comms, options);
    for (uint64_t r = 0; r < s.comm_count && !s.flags_need_reset; ++r) {
      WrapperCommRecord rec{};
      std::memcpy(&rec, comms.data() + r * sizeof rec, sizeof rec);
      s.flags_need_reset = rec.kind == kCommKindHbmSend || rec.kind == kCommKindHbmRecv;
    }
  }

  // The launch against the target the compiler recorded (the live device is checked later).
  if (w.launch.dynamic_smem_bytes > w.target.max_shared_memory_per_block_optin)
    throw_program_error("wrapper.launch.dynamic_smem_bytes", "/launch/dynamic_smem_bytes",
                        std::to_string(w.launch.dynamic_smem_bytes) +
                            " bytes of dynamic shared memory; the target's opt-in limit is " +
                            std::to_string(w.target.max_shared_memory_per_block_optin));
  if (w.launch.cluster_size > 1 && !w.target.cluster_launch)
    throw_program_error("wrapper.launch.cluster_size", "/launch/cluster_size",
                        "a cluster of " + std::to_string(w.launch.cluster_size) +
                            " blocks, but the target does not support cluster launch");

  // TMA specs: the VM's rules, on a program whose buffers are the tensor arguments.
  Program p;
  p.buffers = w.tensor_args;
  p.tma = w.tma;
  for (uint32_t t = 0; t < p.tma.size(); ++t) {
    try {
      check_tma(p, t);
    } catch (const Error& err) {
      std::string where = err.where();
      if (const auto b = where.rfind("/buffer"); b != std::string::npos && b + 7 == where.size())
        where.replace(b, 7, "/tensor");
      throw Error(err.kind(), err.code(), where, err.message());
    }
  }
  return s;
}

}  // namespace amk
