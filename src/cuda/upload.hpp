// Copies a program's initial contents into device memory at the speed of the bus: zeros and
// repeated elements are set on the device, host bytes (mapped files, host-built data) go through
// pinned staging buffers, several threads copying into them while earlier chunks are in flight.
#pragma once

#include <cuda.h>

#include <cstdint>
#include <functional>
#include <span>
#include <string>

#include "backend/initial_data.hpp"
#include "cuda/resources.hpp"

namespace amk::cu {

// Bytes of one staging buffer; each copying thread has two.
inline constexpr size_t kStagingBytes = size_t{16} << 20;

// Writes data[i] to addresses[i] for every buffer and returns once all of it has landed. Fills are
// ordered on `stream`; the staged copies run on streams of their own, in `context` (made current
// on every copying thread). `what(i)` names buffer i in errors. Progress is logged as "upload".
void upload_initial(const InitialData& data, std::span<const uint64_t> addresses,
                    const PrimaryContext& context, CUstream stream,
                    const std::function<std::string(size_t)>& what);

}  // namespace amk::cu
