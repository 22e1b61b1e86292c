// Paths of a wrapper program written to another folder (amk convert W.json -o elsewhere/W.amkb):
// each relative data path and the source path are rewritten to name the same file from there.
// The VM's rebase_data_paths does the work, on a program holding just the buffers that name files.
#include <string>
#include <utility>
#include <vector>

#include "core/error.hpp"
#include "wrapper/amkb.hpp"

namespace amk {

namespace fs = std::filesystem;

namespace {

bool names_a_file(const BufferInit& init) {
  return init.kind == InitKind::npy || init.kind == InitKind::raw ||
         init.kind == InitKind::safetensors;
}

// Moves an error of the VM rebase ("/buffers/K/...") to the wrapper value it came from.
Error relocated(const Error& e, const std::vector<std::string>& places) {
  std::string where = e.where();
  const std::string prefix = "/buffers/";
  if (where.rfind(prefix, 0) == 0) {
    const size_t slash = where.find('/', prefix.size());
    const std::string index = where.substr(prefix.size(), slash - prefix.size());
    size_t k = 0;
    for (char c : index) k = k * 10 + static_cast<size_t>(c - '0');
    if (k < places.size())
      where = places[k] + (slash == std::string::npos ? "" : where.substr(slash));
  }
  Error moved(e.kind(), e.code(), std::move(where), e.message());
  moved.with_detail(e.detail());
  return moved;
}

}  // namespace

uint32_t rebase_wrapper_paths(WrapperProgram& w, const fs::path& new_dir,
                              const LoadOptions& options) {
  Program files;
  files.base_dir = w.base_dir;
  std::vector<Buffer*> owners;
  std::vector<std::string> places;
  const auto add = [&](Buffer& b, std::string place) {
    if (!names_a_file(b.init)) return;
    files.buffers.push_back(b);  // a file init holds no data, so the copy is small
    owners.push_back(&b);
    places.push_back(std::move(place));
  };
  for (size_t i = 0; i < kPackageArrays; ++i)
    if (w.package[i].present)
      add(w.package[i].buffer,
          "/package/" + std::string(package_array_name(static_cast<PackageArray>(i))));
  for (size_t i = 0; i < w.tensor_args.size(); ++i)
    add(w.tensor_args[i], "/tensor_args/" + std::to_string(i));
  uint32_t changed = 0;
  try {
    changed = rebase_data_paths(files, new_dir, options);
  } catch (const Error& e) {
    throw relocated(e, places);
  }

  // The source never leaves the program's folder, whatever the options say.
  std::string source_path = w.wrapper.source_path;
  if (!source_path.empty()) {
    Program source;
    source.base_dir = w.base_dir;
    Buffer b;
    b.init.kind = InitKind::raw;
    b.init.path = w.wrapper.source_path;
    source.buffers.push_back(std::move(b));
    try {
      changed += rebase_data_paths(source, new_dir, LoadOptions{});
    } catch (const Error& e) {
      if (e.code() != "usage.convert.path") throw relocated(e, {"/wrapper/source_path"});
      throw Error(e.kind(), e.code(), "/wrapper/source_path",
                  "the kernel source \"" + w.wrapper.source_path +
                      "\" would be outside the new program's folder, and a source never leaves "
                      "it: write the program into a folder that holds its source");
    }
    source_path = source.buffers[0].init.path;
  }
  // Nothing changes until every path is known to rebase.
  for (size_t k = 0; k < owners.size(); ++k) owners[k]->init.path = files.buffers[k].init.path;
  w.wrapper.source_path = source_path;
  w.base_dir = files.base_dir;
  return changed;
}

}  // namespace amk
