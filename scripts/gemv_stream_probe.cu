// A device-side probe, outside amk: how fast a bf16 GEMV (y = W x, W rows of 4096 bf16, x and y
// f32) streams W from HBM in the two shapes a VM with roles can take (issue 45):
// - loads: 8 warps a block, each warp two rows at a time, every lane issuing its 16-byte
//   vectors of both rows before it multiplies, the row sums kept in registers (one warp
//   reduction a row);
// - pages: 8 consumer warps and one loader warp; the loader's lane 0 copies the block's rows
//   into a ring of shared-memory pages (cp.async.bulk, one copy a page, as many pages in flight
//   as the ring holds), gated only by the pages' "free" barriers; each consumer warp takes whole
//   pages in turn, multiplies them from shared memory with the row sums in registers, and frees
//   the page. Pages of 16 KiB (2 rows, ring of 12) and 32 KiB (4 rows, ring of 6).
// x is staged in shared memory once a block. Each arm is checked against a float64 reference
// (normalized error), then timed with CUDA events, the arms interleaved over rounds; "in the
// kernel" takes off the same kernel's time with no rows.
//   nvcc -O3 -std=c++17 -arch=sm_90a scripts/gemv_stream_probe.cu -o gemv_stream_probe
//   ./gemv_stream_probe [ROUNDS]
// Prints one line per (arm, matrix): median and range of the rounds' medians, TB/s, error.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#include "probe_check.cuh"

constexpr int kK = 4096;               // columns (bf16 weights a row)
constexpr int kRowBytes = kK * 2;      // 8 KiB
constexpr int kVecs = kRowBytes / 16;  // 16-byte vectors a row
constexpr int kLaneVecs = kVecs / 32;  // a lane's vectors of a row
constexpr int kConsumerWarps = 8;
constexpr int kSmemBudget = 227 * 1024;  // opt-in shared memory a block (sm_90)

// ---- device helpers -------------------------------------------------------------------------
// (Not volatile: the compiler may issue all of a row pair's loads before the first multiply.)
__device__ __forceinline__ uint4 ld_stream(const void* p) {
  uint4 v;
  asm("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
      : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
      : "l"(p));
  return v;
}
__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ void bar_init(uint32_t bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ void bar_arrive(uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(bar) : "memory");
}
__device__ __forceinline__ void bar_wait(uint32_t bar, uint32_t parity) {
  uint32_t ok = 0;
  while (!ok)
    asm volatile("{ .reg .pred q; mbarrier.try_wait.parity.shared::cta.b64 q, [%1], %2; "
                 "selp.u32 %0, 1, 0, q; }"
                 : "=r"(ok)
                 : "r"(bar), "r"(parity)
                 : "memory");
}
__device__ __forceinline__ void bulk_copy(uint32_t dst, const void* src, uint32_t bytes,
                                          uint32_t bar) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes)
               : "memory");
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, "
               "[%3];" ::"r"(dst),
               "l"(src), "r"(bytes), "r"(bar)
               : "memory");
}

// 8 bf16 weights (one 16-byte vector) times x[8], added to acc.
__device__ __forceinline__ float dot8(uint4 w, const float* x, float acc) {
  const float4 a = *reinterpret_cast<const float4*>(x);
  const float4 b = *reinterpret_cast<const float4*>(x + 4);
  const uint32_t u[4] = {w.x, w.y, w.z, w.w};
  const float xs[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    acc = fmaf(__uint_as_float(u[i] << 16), xs[2 * i], acc);
    acc = fmaf(__uint_as_float(u[i] & 0xffff0000u), xs[2 * i + 1], acc);
  }
  return acc;
}
__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ void stage_x(float* xs, const float* x, int threads) {
  for (int i = threadIdx.x; i < kK / 4; i += threads)
    reinterpret_cast<float4*>(xs)[i] = reinterpret_cast<const float4*>(x)[i];
}

// The rows [first, last) of block b among `blocks`, in units of `unit` rows.
__device__ __forceinline__ void block_rows(int rows, int unit, int& first, int& last) {
  const int units = rows / unit;
  first = static_cast<int>(static_cast<int64_t>(units) * blockIdx.x / gridDim.x) * unit;
  last = static_cast<int>(static_cast<int64_t>(units) * (blockIdx.x + 1) / gridDim.x) * unit;
}

// ---- loads ----------------------------------------------------------------------------------
__global__ void __launch_bounds__(kConsumerWarps * 32)
    gemv_loads(const uint16_t* __restrict__ w, const float* __restrict__ x, float* __restrict__ y,
               int rows) {
  extern __shared__ __align__(16) float xs[];
  stage_x(xs, x, blockDim.x);
  __syncthreads();
  int first, last;
  block_rows(rows, 2, first, last);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  for (int r = first + 2 * warp; r < last; r += 2 * kConsumerWarps) {
    const char* row0 = reinterpret_cast<const char*>(w) + static_cast<size_t>(r) * kRowBytes;
    const char* row1 = row0 + kRowBytes;
    uint4 v0[kLaneVecs], v1[kLaneVecs];
#pragma unroll
    for (int j = 0; j < kLaneVecs; ++j) {
      v0[j] = ld_stream(row0 + (lane + 32 * j) * 16);
      v1[j] = ld_stream(row1 + (lane + 32 * j) * 16);
    }
    float a0 = 0.f, a1 = 0.f;
#pragma unroll
    for (int j = 0; j < kLaneVecs; ++j) {
      a0 = dot8(v0[j], xs + (lane + 32 * j) * 8, a0);
      a1 = dot8(v1[j], xs + (lane + 32 * j) * 8, a1);
    }
    a0 = warp_sum(a0);
    a1 = warp_sum(a1);
    if (lane == 0) {
      y[r] = a0;
      y[r + 1] = a1;
    }
  }
}

// ---- pages ----------------------------------------------------------------------------------
template <int kPageRows, int kSlots>
__global__ void __launch_bounds__((kConsumerWarps + 1) * 32)
    gemv_pages(const uint16_t* __restrict__ w, const float* __restrict__ x, float* __restrict__ y,
               int rows) {
  constexpr uint32_t kPageBytes = kPageRows * kRowBytes;
  extern __shared__ __align__(128) unsigned char smem[];
  unsigned char* pages = smem;                                       // kSlots pages
  float* xs = reinterpret_cast<float*>(smem + kSlots * kPageBytes);  // kK floats
  uint64_t* bars = reinterpret_cast<uint64_t*>(xs + kK);             // full, then free
  const uint32_t full0 = smem_addr(bars), free0 = smem_addr(bars + kSlots);
  if (threadIdx.x == 0) {
    for (int s = 0; s < kSlots; ++s) {
      bar_init(full0 + 8 * s, 1);
      bar_init(free0 + 8 * s, 1);
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  stage_x(xs, x, blockDim.x);
  __syncthreads();
  int first, last;
  block_rows(rows, kPageRows, first, last);
  const int count = (last - first) / kPageRows;  // the block's pages
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (warp == kConsumerWarps) {  // the loader
    if (lane == 0)
      for (int p = 0; p < count; ++p) {
        const int s = p % kSlots;
        if (p >= kSlots) bar_wait(free0 + 8 * s, static_cast<uint32_t>((p / kSlots - 1) & 1));
        bulk_copy(smem_addr(pages + s * kPageBytes),
                  reinterpret_cast<const char*>(w) +
                      static_cast<size_t>(first + p * kPageRows) * kRowBytes,
                  kPageBytes, full0 + 8 * s);
      }
    return;
  }
  for (int p = warp; p < count; p += kConsumerWarps) {
    const int s = p % kSlots;
    bar_wait(full0 + 8 * s, static_cast<uint32_t>((p / kSlots) & 1));
    const unsigned char* page = pages + s * kPageBytes;
    float acc[kPageRows];
#pragma unroll
    for (int r = 0; r < kPageRows; ++r) acc[r] = 0.f;
#pragma unroll 4
    for (int j = 0; j < kLaneVecs; ++j) {
      const int v = lane + 32 * j;
#pragma unroll
      for (int r = 0; r < kPageRows; ++r)
        acc[r] = dot8(*reinterpret_cast<const uint4*>(page + r * kRowBytes + v * 16), xs + v * 8,
                      acc[r]);
    }
    __syncwarp();
    if (lane == 0) bar_arrive(free0 + 8 * s);  // the page's bytes are read: the loader may refill
#pragma unroll
    for (int r = 0; r < kPageRows; ++r) acc[r] = warp_sum(acc[r]);
    if (lane == 0)
#pragma unroll
      for (int r = 0; r < kPageRows; ++r) y[first + p * kPageRows + r] = acc[r];
  }
}

// ---- host -----------------------------------------------------------------------------------
struct Arm {
  const char* name;
  void (*kernel)(const uint16_t*, const float*, float*, int);
  int threads;
  size_t smem;
};

template <int kPageRows, int kSlots>
Arm pages_arm(const char* name) {
  const size_t smem = kSlots * size_t{kPageRows} * kRowBytes + kK * 4 + 2 * kSlots * 8;
  static_assert(kSlots * kPageRows * kRowBytes + kK * 4 + 2 * kSlots * 8 <= kSmemBudget);
  return {name, gemv_pages<kPageRows, kSlots>, (kConsumerWarps + 1) * 32, smem};
}

float median(std::vector<float> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

int main(int argc, char** argv) {
  const int rounds = argc > 1 ? std::max(1, std::atoi(argv[1])) : 5;
  constexpr int kIterations = 20;
  int sms = 0;
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  cudaDeviceProp prop{};
  CK(cudaGetDeviceProperties(&prop, 0));
  std::printf("%s, %d SMs, L2 %d MiB\n", prop.name, sms, prop.l2CacheSize >> 20);

  const Arm arms[] = {{"loads", gemv_loads, kConsumerWarps * 32, kK * 4},
                      pages_arm<2, 12>("pages 16 KiB x 12"),
                      pages_arm<4, 6>("pages 32 KiB x 6")};
  for (const Arm& a : arms)
    CK(cudaFuncSetAttribute(a.kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                            static_cast<int>(a.smem)));

  const int kMaxRows = 8 * 4096;  // 8 matrices of 4096 x 4096: 256 MiB
  std::mt19937 rng(1234);
  std::uniform_real_distribution<float> uni(-1.f, 1.f);
  std::vector<uint16_t> hw(static_cast<size_t>(kMaxRows) * kK);
  for (auto& v : hw) {
    const float f = uni(rng);
    uint32_t b;
    std::memcpy(&b, &f, 4);
    v = static_cast<uint16_t>(b >> 16);
  }
  std::vector<float> hx(kK);
  for (auto& v : hx) v = uni(rng);
  uint16_t* dw;
  float *dx, *dy;
  CK(cudaMalloc(&dw, hw.size() * 2));
  CK(cudaMalloc(&dx, kK * 4));
  CK(cudaMalloc(&dy, kMaxRows * 4));
  CK(cudaMemcpy(dw, hw.data(), hw.size() * 2, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(dx, hx.data(), kK * 4, cudaMemcpyHostToDevice));

  // The float64 reference of every row.
  std::vector<double> ref(kMaxRows);
  double ref_max = 0;
  for (int r = 0; r < kMaxRows; ++r) {
    double s = 0;
    for (int k = 0; k < kK; ++k) {
      uint32_t b = static_cast<uint32_t>(hw[static_cast<size_t>(r) * kK + k]) << 16;
      float f;
      std::memcpy(&f, &b, 4);
      s += static_cast<double>(f) * hx[k];
    }
    ref[r] = s;
    ref_max = std::max(ref_max, std::fabs(s));
  }

  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  auto time_ms = [&](const Arm& a, int rows) {
    std::vector<float> t;
    for (int i = 0; i < kIterations + 3; ++i) {
      CK(cudaEventRecord(e0));
      a.kernel<<<sms, a.threads, a.smem>>>(dw, dx, dy, rows);
      CK(cudaEventRecord(e1));
      CK(cudaEventSynchronize(e1));
      float ms;
      CK(cudaEventElapsedTime(&ms, e0, e1));
      if (i >= 3) t.push_back(ms);
    }
    CK(cudaGetLastError());
    return median(t);
  };

  const int sizes[] = {kMaxRows, 4096};
  for (const Arm& a : arms)
    for (int rows : sizes) {
      CK(cudaMemset(dy, 0xff, kMaxRows * 4));  // poisoned: NaN where a row is not written
      a.kernel<<<sms, a.threads, a.smem>>>(dw, dx, dy, rows);
      CK(cudaDeviceSynchronize());
      std::vector<float> hy(rows);
      CK(cudaMemcpy(hy.data(), dy, rows * 4, cudaMemcpyDeviceToHost));
      double err = 0;
      for (int r = 0; r < rows; ++r)
        err = std::max(err, std::isfinite(hy[r]) ? std::fabs(hy[r] - ref[r]) / ref_max : 1e30);
      std::printf("%-20s %5d rows: normalized error %.2e %s\n", a.name, rows, err,
                  err <= 1e-5 ? "ok" : "FAIL");
      if (err > 1e-5) return 1;
    }

  const int n = static_cast<int>(sizeof arms / sizeof arms[0]);
  std::vector<std::vector<float>> t(n * 3);  // [arm][0 rows, 4096 rows, all rows]
  for (int round = 0; round < rounds; ++round)
    for (int k = 0; k < n; ++k) {
      const Arm& a = arms[(k + round) % n];  // a different arm first each round
      const int i = static_cast<int>(&a - arms);
      t[i * 3 + 0].push_back(time_ms(a, 0));
      t[i * 3 + 1].push_back(time_ms(a, 4096));
      t[i * 3 + 2].push_back(time_ms(a, kMaxRows));
    }
  for (int i = 0; i < n; ++i) {
    const float empty = median(t[i * 3]);
    for (int c = 1; c <= 2; ++c) {
      const auto& v = t[i * 3 + c];
      const int rows = c == 1 ? 4096 : kMaxRows;
      const double bytes = static_cast<double>(rows) * kRowBytes;
      const float m = median(v);
      std::printf("%-20s %5d rows (%3.0f MiB): %8.2f us a launch (rounds %.2f..%.2f), "
                  "%.2f TB/s in the kernel (empty launch %.2f us)\n",
                  arms[i].name, rows, bytes / 1048576, m * 1e3,
                  *std::min_element(v.begin(), v.end()) * 1e3,
                  *std::max_element(v.begin(), v.end()) * 1e3, bytes / ((m - empty) * 1e-3) / 1e12,
                  empty * 1e3);
    }
  }
  return 0;
}
