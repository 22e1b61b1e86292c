// A device-side probe, outside amk: the GEMV shape of the VM with roles (issue 45). One block an
// SM; a loader warp streams the block's rows of a chain of bf16 matrices into a ring of 16 KiB
// shared-memory pages with bulk copies (cp.async.bulk, completion on the page's mbarrier) as soon
// as the consumers free a page, across matrix boundaries, never waiting for anything else; eight
// consumer warps reduce each page against x (f32, in shared memory) and free it. Beside it, the
// same chain read by plain 16-byte loads (eight a thread in flight, no pages). Evidence for the
// VM's design; not part of the tool.
//   nvcc -O3 -std=c++17 -arch=sm_90a scripts/gemv_pages_probe.cu -o gemv_pages_probe
//   ./gemv_pages_probe [pages 2..12] [matrices] [M] [K]      (default 12 8 4096 4096)
// Prints, per kernel, the median of 7 launches: time, time a matrix, bandwidth; and the largest
// relative error of y against the host for the first and last matrix.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#define CK(x)                                                                                      \
  do {                                                                                             \
    cudaError_t e_ = (x);                                                                          \
    if (e_ != cudaSuccess) {                                                                       \
      std::fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__, cudaGetErrorString(e_));             \
      std::exit(1);                                                                                \
    }                                                                                              \
  } while (0)

constexpr int kConsumerWarps = 8;
constexpr int kConsumers = kConsumerWarps * 32;
constexpr uint32_t kPageBytes = 16384;
constexpr uint32_t kChunkBytes = 512;  // one warp's 16-byte loads side by side: within one row

struct Shape {
  uint32_t matrices, m, k, rows_per_block;
};

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ void mbar_init(uint64_t* bar, uint32_t count) {
  asm volatile("mbarrier.init.shared.b64 [%0], %1;" ::"r"(smem_addr(bar)), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint64_t* bar) {
  asm volatile("mbarrier.arrive.shared.b64 _, [%0];" ::"r"(smem_addr(bar)) : "memory");
}
__device__ __forceinline__ void mbar_expect(uint64_t* bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared.b64 _, [%0], %1;" ::"r"(smem_addr(bar)), "r"(bytes)
               : "memory");
}
// Waits until the phase of parity `parity` has completed.
__device__ __forceinline__ void mbar_wait(uint64_t* bar, uint32_t parity) {
  uint32_t done = 0;
  while (!done) {
    asm volatile(
        "{ .reg .pred p; mbarrier.try_wait.parity.shared.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }"
        : "=r"(done)
        : "r"(smem_addr(bar)), "r"(parity)
        : "memory");
  }
}
__device__ __forceinline__ void bulk_copy(void* dst, const void* src, uint32_t bytes,
                                          uint64_t* bar) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::
          "r"(smem_addr(dst)),
      "l"(src), "r"(bytes), "r"(smem_addr(bar))
      : "memory");
}
__host__ __device__ __forceinline__ uint64_t min64(uint64_t a, uint64_t b) { return a < b ? a : b; }
__device__ __forceinline__ void consumers_sync() {
  asm volatile("bar.sync 1, %0;" ::"n"(kConsumers) : "memory");
}

// Dot product of 8 bf16 weights (one 16-byte word) with x[col .. col + 8).
__device__ __forceinline__ float dot8(uint4 w, const float* x) {
  const uint32_t v[4] = {w.x, w.y, w.z, w.w};
  float s = 0.0f;
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    s += __uint_as_float(v[j] << 16) * x[2 * j];
    s += __uint_as_float(v[j] & 0xFFFF0000u) * x[2 * j + 1];
  }
  return s;
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xFFFFFFFFu, v, o);
  return v;
}

// Block b's rows of every matrix: [b * rows_per_block, min(M, ...)), one contiguous byte range.
__device__ __forceinline__ void block_rows(const Shape& s, uint32_t& r0, uint32_t& r1) {
  r0 = min(s.m, blockIdx.x * s.rows_per_block);
  r1 = min(s.m, r0 + s.rows_per_block);
}

// The loader warp and eight consumer warps over a ring of `pages` pages.
__global__ void __launch_bounds__(kConsumers + 32, 1)
    gemv_pages(const uint16_t* w, const float* x, float* y, Shape s, uint32_t pages) {
  extern __shared__ __align__(1024) unsigned char smem[];
  unsigned char* page = smem;                                       // pages x 16 KiB
  float* xs = reinterpret_cast<float*>(smem + pages * kPageBytes);  // K floats
  float* acc = xs + s.k;                                            // rows_per_block floats
  uint64_t* full = reinterpret_cast<uint64_t*>(acc + ((s.rows_per_block + 1) & ~1u));
  uint64_t* empty = full + pages;
  const uint32_t warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  uint32_t r0, r1;
  block_rows(s, r0, r1);
  const uint64_t bytes = uint64_t{r1 - r0} * s.k * 2;  // a matrix's, for this block
  const uint32_t chunks = static_cast<uint32_t>((bytes + kPageBytes - 1) / kPageBytes);
  if (threadIdx.x == 0) {
    for (uint32_t p = 0; p < pages; ++p) {
      mbar_init(&full[p], 1);
      mbar_init(&empty[p], kConsumerWarps);
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  for (uint32_t i = threadIdx.x; i < s.k; i += blockDim.x) xs[i] = x[i];
  for (uint32_t i = threadIdx.x; i < s.rows_per_block; i += blockDim.x) acc[i] = 0.0f;
  __syncthreads();
  if (chunks == 0) return;

  if (warp == kConsumerWarps) {  // the loader: one lane issues every copy
    if (lane == 0) {
      uint32_t n = 0;
      for (uint32_t mat = 0; mat < s.matrices; ++mat) {
        const unsigned char* src =
            reinterpret_cast<const unsigned char*>(w) + (uint64_t{mat} * s.m + r0) * s.k * 2;
        for (uint32_t c = 0; c < chunks; ++c, ++n) {
          const uint32_t p = n % pages, use = n / pages;
          if (use > 0) mbar_wait(&empty[p], (use - 1) & 1);
          const uint32_t len =
              static_cast<uint32_t>(min64(kPageBytes, bytes - uint64_t{c} * kPageBytes));
          mbar_expect(&full[p], len);
          bulk_copy(page + p * kPageBytes, src + uint64_t{c} * kPageBytes, len, &full[p]);
        }
      }
    }
    return;
  }

  // The consumers: each warp takes 512-byte pieces of the page (one row each: K * 2 is a
  // multiple of 512), lane by lane 16 bytes, and adds the piece's dot product to its row.
  uint32_t n = 0;
  for (uint32_t mat = 0; mat < s.matrices; ++mat) {
    for (uint32_t c = 0; c < chunks; ++c, ++n) {
      const uint32_t p = n % pages;
      mbar_wait(&full[p], (n / pages) & 1);
      const uint32_t len =
          static_cast<uint32_t>(min64(kPageBytes, bytes - uint64_t{c} * kPageBytes));
      const uint64_t base = uint64_t{c} * kPageBytes;  // byte offset in the block's range
      for (uint32_t piece = warp * kChunkBytes; piece < len;
           piece += kConsumerWarps * kChunkBytes) {
        const uint64_t at = base + piece + lane * 16;  // this lane's 16 bytes
        const uint32_t row = static_cast<uint32_t>(at / (uint64_t{s.k} * 2));
        const uint32_t col = static_cast<uint32_t>((at % (uint64_t{s.k} * 2)) / 2);
        const uint4 v = *reinterpret_cast<const uint4*>(page + p * kPageBytes + piece + lane * 16);
        const float d = warp_sum(dot8(v, xs + col));
        if (lane == 0) atomicAdd(&acc[row], d);
      }
      __syncwarp();
      if (lane == 0) mbar_arrive(&empty[p]);
    }
    consumers_sync();
    for (uint32_t r = threadIdx.x; r < r1 - r0; r += kConsumers) {
      y[uint64_t{mat} * s.m + r0 + r] = acc[r];
      acc[r] = 0.0f;
    }
    consumers_sync();
  }
}

// The same chain by plain loads: each thread keeps eight 16-byte loads in flight.
__global__ void __launch_bounds__(kConsumers, 1)
    gemv_loads(const uint16_t* w, const float* x, float* y, Shape s) {
  extern __shared__ __align__(1024) unsigned char smem[];
  float* xs = reinterpret_cast<float*>(smem);
  float* acc = xs + s.k;
  const uint32_t warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  uint32_t r0, r1;
  block_rows(s, r0, r1);
  const uint64_t bytes = uint64_t{r1 - r0} * s.k * 2;
  for (uint32_t i = threadIdx.x; i < s.k; i += blockDim.x) xs[i] = x[i];
  for (uint32_t i = threadIdx.x; i < s.rows_per_block; i += blockDim.x) acc[i] = 0.0f;
  __syncthreads();
  constexpr uint32_t kInFlight = 8;
  for (uint32_t mat = 0; mat < s.matrices; ++mat) {
    const unsigned char* src =
        reinterpret_cast<const unsigned char*>(w) + (uint64_t{mat} * s.m + r0) * s.k * 2;
    for (uint64_t piece0 = uint64_t{warp} * kChunkBytes; piece0 < bytes;
         piece0 += uint64_t{kConsumerWarps} * kChunkBytes * kInFlight) {
      uint4 v[kInFlight];
#pragma unroll
      for (uint32_t u = 0; u < kInFlight; ++u) {
        const uint64_t piece = piece0 + uint64_t{u} * kConsumerWarps * kChunkBytes;
        if (piece < bytes) v[u] = __ldcs(reinterpret_cast<const uint4*>(src + piece + lane * 16));
      }
#pragma unroll
      for (uint32_t u = 0; u < kInFlight; ++u) {
        const uint64_t piece = piece0 + uint64_t{u} * kConsumerWarps * kChunkBytes;
        if (piece >= bytes) break;
        const uint64_t at = piece + lane * 16;
        const uint32_t row = static_cast<uint32_t>(at / (uint64_t{s.k} * 2));
        const uint32_t col = static_cast<uint32_t>((at % (uint64_t{s.k} * 2)) / 2);
        const float d = warp_sum(dot8(v[u], xs + col));
        if (lane == 0) atomicAdd(&acc[row], d);
      }
    }
    __syncthreads();
    for (uint32_t r = threadIdx.x; r < r1 - r0; r += blockDim.x) {
      y[uint64_t{mat} * s.m + r0 + r] = acc[r];
      acc[r] = 0.0f;
    }
    __syncthreads();
  }
}

uint16_t bf16_of(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return static_cast<uint16_t>((u + 0x7FFF + ((u >> 16) & 1)) >> 16);
}
float float_of(uint16_t b) {
  const uint32_t u = uint32_t{b} << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

int main(int argc, char** argv) {
  const uint32_t pages = argc > 1 ? std::atoi(argv[1]) : 12;
  Shape s{};
  s.matrices = argc > 2 ? std::atoi(argv[2]) : 8;
  s.m = argc > 3 ? std::atoi(argv[3]) : 4096;
  s.k = argc > 4 ? std::atoi(argv[4]) : 4096;
  if (pages < 2 || pages > 12 || s.k % 256 != 0 || s.k > 8192 || s.matrices == 0) {
    std::fprintf(stderr, "pages 2..12, K a multiple of 256 up to 8192\n");
    return 2;
  }
  int sms = 0;
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  s.rows_per_block = (s.m + sms - 1) / sms;
  const uint64_t n_w = uint64_t{s.matrices} * s.m * s.k;
  std::vector<uint16_t> hw(n_w);
  std::vector<float> hx(s.k);
  uint64_t st = 88172645463325252ull;
  auto rnd = [&] {  // xorshift64 in [-1, 1)
    st ^= st << 13, st ^= st >> 7, st ^= st << 17;
    return static_cast<float>((st >> 11) * 0x1.0p-53 * 2.0 - 1.0);
  };
  for (auto& v : hw) v = bf16_of(rnd());
  for (auto& v : hx) v = rnd();
  uint16_t* dw;
  float *dx, *dy;
  CK(cudaMalloc(&dw, n_w * 2));
  CK(cudaMalloc(&dx, s.k * 4));
  CK(cudaMalloc(&dy, uint64_t{s.matrices} * s.m * 4));
  CK(cudaMemcpy(dw, hw.data(), n_w * 2, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(dx, hx.data(), s.k * 4, cudaMemcpyHostToDevice));

  const size_t smem_pages =
      size_t{pages} * kPageBytes + s.k * 4 + ((s.rows_per_block + 1) & ~1u) * 4 + 2 * pages * 8;
  const size_t smem_loads = s.k * 4 + s.rows_per_block * 4;
  CK(cudaFuncSetAttribute(gemv_pages, cudaFuncAttributeMaxDynamicSharedMemorySize,
                          static_cast<int>(smem_pages)));
  CK(cudaFuncSetAttribute(gemv_loads, cudaFuncAttributeMaxDynamicSharedMemorySize,
                          static_cast<int>(smem_loads)));
  cudaEvent_t a, b;
  CK(cudaEventCreate(&a));
  CK(cudaEventCreate(&b));
  std::vector<float> hy(uint64_t{s.matrices} * s.m);
  for (int kernel = 0; kernel < 2; ++kernel) {
    std::vector<float> ms;
    for (int it = 0; it < 9; ++it) {
      CK(cudaMemset(dy, 0xFF, uint64_t{s.matrices} * s.m * 4));  // poison: NaN
      CK(cudaEventRecord(a));
      if (kernel == 0)
        gemv_pages<<<sms, kConsumers + 32, smem_pages>>>(dw, dx, dy, s, pages);
      else
        gemv_loads<<<sms, kConsumers, smem_loads>>>(dw, dx, dy, s);
      CK(cudaEventRecord(b));
      CK(cudaEventSynchronize(b));
      CK(cudaGetLastError());
      float t;
      CK(cudaEventElapsedTime(&t, a, b));
      if (it >= 2) ms.push_back(t);
    }
    std::sort(ms.begin(), ms.end());
    const double med = ms[ms.size() / 2];
    CK(cudaMemcpy(hy.data(), dy, hy.size() * 4, cudaMemcpyDeviceToHost));
    double worst = 0;
    for (uint32_t mat : {0u, s.matrices - 1}) {
      double num = 0, den = 0;
      for (uint32_t r = 0; r < s.m; ++r) {
        double want = 0;
        const uint16_t* row = hw.data() + (uint64_t{mat} * s.m + r) * s.k;
        for (uint32_t c = 0; c < s.k; ++c) want += double(float_of(row[c])) * hx[c];
        const double got = hy[uint64_t{mat} * s.m + r];
        num += (got - want) * (got - want);
        den += want * want;
      }
      worst = std::max(worst, std::isfinite(num) ? std::sqrt(num / den) : INFINITY);
    }
    std::printf("%-6s pages %2u  %u x %u x %u bf16: %8.2f us, %7.2f us a matrix, %6.3f TB/s, "
                "error %.2e (range %.2f..%.2f us)\n",
                kernel == 0 ? "pages" : "loads", kernel == 0 ? pages : 0, s.matrices, s.m, s.k,
                med * 1e3, med * 1e3 / s.matrices, n_w * 2 / (med * 1e-3) / 1e12, worst,
                ms.front() * 1e3, ms.back() * 1e3);
  }
  return 0;
}
