// Reading ptxas -v output kept in a CompileOutput's log.
#pragma once

#include <string>

namespace amk::test {

// True when ptxas reported the VM kernel (amk_vm) and every function of the module with no stack
// frame and no spills. (Searching the whole log for one "0 bytes ... spill" line would also pass
// when only some helper function is clean.)
inline bool no_spills(const std::string& log) {
  const std::string head = "Function properties for ";
  const std::string clean = "0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads";
  bool vm = false;
  for (size_t at = log.find(head); at != std::string::npos; at = log.find(head, at + 1)) {
    const size_t name_end = log.find('\n', at);
    if (name_end == std::string::npos) return false;
    const size_t line_end = log.find('\n', name_end + 1);
    const std::string props = log.substr(
        name_end + 1, line_end == std::string::npos ? std::string::npos : line_end - name_end - 1);
    if (props.find(clean) == std::string::npos) return false;
    if (log.compare(at + head.size(), name_end - at - head.size(), "amk_vm") == 0) vm = true;
  }
  return vm;
}

// The VM kernel's (amk_vm) part of the log: from its "Function properties" line to the next
// function's; empty if ptxas did not report it.
inline std::string vm_properties(const std::string& log) {
  const std::string head = "Function properties for amk_vm\n";
  const size_t at = log.find(head);
  if (at == std::string::npos) return {};
  const size_t next = log.find("Function properties for ", at + head.size());
  return log.substr(at, next == std::string::npos ? std::string::npos : next - at);
}

// The number written just before `suffix` in the VM's part of the log ("Used N registers",
// "N bytes smem"); -1 if absent.
inline long vm_number_before(const std::string& log, const std::string& suffix) {
  const std::string props = vm_properties(log);
  const size_t end = props.find(suffix);
  if (end == std::string::npos) return -1;
  size_t i = end;
  while (i > 0 && props[i - 1] >= '0' && props[i - 1] <= '9') --i;
  return i == end ? -1 : std::stol(props.substr(i, end - i));
}

// Registers a thread of the VM kernel (amk_vm) uses, as ptxas reported them; -1 if not found.
inline int vm_registers(const std::string& log) {
  return static_cast<int>(vm_number_before(log, " registers"));
}

// Static shared memory of the VM kernel (amk_vm) in bytes, as ptxas reported it; -1 if not found.
inline long vm_smem_bytes(const std::string& log) { return vm_number_before(log, " bytes smem"); }

}  // namespace amk::test
