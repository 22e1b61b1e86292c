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

}  // namespace amk::test
