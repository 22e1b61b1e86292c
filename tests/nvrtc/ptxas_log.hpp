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
    const std::string props = log.substr(name_end + 1, line_end == std::string::npos
                                                           ? std::string::npos
                                                           : line_end - name_end - 1);
    if (props.find(clean) == std::string::npos) return false;
    if (log.compare(at + head.size(), name_end - at - head.size(), "amk_vm") == 0) vm = true;
  }
  return vm;
}

// Registers a thread of the VM kernel (amk_vm) uses, as ptxas reported them; -1 if not found.
inline int vm_registers(const std::string& log) {
  const size_t at = log.find("Function properties for amk_vm\n");
  if (at == std::string::npos) return -1;
  const std::string used = "Used ";
  const size_t u = log.find(used, at);
  const size_t next = log.find("Function properties for ", at + 1);
  if (u == std::string::npos || (next != std::string::npos && u > next)) return -1;
  int n = 0;
  size_t i = u + used.size();
  if (i >= log.size() || log[i] < '0' || log[i] > '9') return -1;
  for (; i < log.size() && log[i] >= '0' && log[i] <= '9'; ++i) n = n * 10 + (log[i] - '0');
  return log.compare(i, 10, " registers") == 0 ? n : -1;
}

// Static shared memory of the VM kernel (amk_vm) in bytes, as ptxas reported it; -1 if not found.
inline long vm_smem_bytes(const std::string& log) {
  const size_t at = log.find("Function properties for amk_vm\n");
  if (at == std::string::npos) return -1;
  const size_t end = log.find(" bytes smem", at);
  const size_t next = log.find("Function properties for ", at + 1);
  if (end == std::string::npos || (next != std::string::npos && end > next)) return -1;
  size_t i = end;
  while (i > 0 && log[i - 1] >= '0' && log[i - 1] <= '9') --i;
  if (i == end) return -1;
  return std::stol(log.substr(i, end - i));
}

}  // namespace amk::test
