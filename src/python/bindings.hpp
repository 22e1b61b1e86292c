// What the Python module's files share: JSON text to and from Python values, a buffer as a dict,
// and the executable's definition (executable.cpp).
#pragma once

#include <pybind11/pybind11.h>

#include <string>

#include "program/program.hpp"

namespace amk::python {

namespace py = pybind11;

// Python's json module turns amk's JSON text into plain dicts and back.
inline py::object json_loads(const std::string& text) {
  return py::module_::import("json").attr("loads")(text);
}
inline std::string json_dumps(const py::object& value) {
  return py::module_::import("json").attr("dumps")(value).cast<std::string>();
}

inline py::dict buffer_dict(const Buffer& b) {
  py::dict d;
  d["name"] = b.name;
  d["dtype"] = std::string(dtype_name(b.dtype));
  d["shape"] = b.shape;
  d["output"] = b.output;
  return d;
}

// amk.Executable and amk.open.
void define_executable(py::module_& m);

}  // namespace amk::python
