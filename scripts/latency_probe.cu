// A device-side probe, outside amk: how long a dependent hop between blocks and an L2 round trip
// take while other blocks stream weights from HBM, and what a hop costs when its flag travels
// inside the data (an 8-byte store of value and epoch, the consumer polling the data itself)
// instead of in a counter behind a release. The background streams through 16-byte loads (a
// given number a lane in flight) or through the copy engine (bulk copies of 16 KiB in flight a
// block). Evidence for the VM's design; not part of the tool.
//   nvcc -O3 -std=c++17 -arch=sm_90a scripts/latency_probe.cu -o latency_probe && ./latency_probe
// Prints one line per (probe, background) with the median of 5 launches.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "probe_check.cuh"

constexpr int kThreads = 256;
constexpr int kPer = 8;                // values a thread carries
constexpr int kN = kThreads * kPer;    // values a hop carries (2048 floats: a 1B hidden state)
constexpr uint32_t kTmaBytes = 16384;  // one bulk copy of the TMA background

__device__ __forceinline__ uint64_t gtimer() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}
__device__ __forceinline__ uint32_t ld_relaxed(const uint32_t* p) {
  uint32_t v;
  asm volatile("ld.relaxed.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}
// (value, epoch) as one 64-bit access: single-copy atomic, so a reader that sees the epoch sees
// the value written with it.
__device__ __forceinline__ uint2 ld_relaxed2(const uint2* p) {
  unsigned long long w;
  asm volatile("ld.relaxed.gpu.global.u64 %0, [%1];" : "=l"(w) : "l"(p) : "memory");
  return make_uint2(static_cast<uint32_t>(w), static_cast<uint32_t>(w >> 32));
}
__device__ __forceinline__ void st_relaxed2(uint2* p, uint2 v) {
  const unsigned long long w = v.x | (static_cast<unsigned long long>(v.y) << 32);
  asm volatile("st.relaxed.gpu.global.u64 [%0], %1;" ::"l"(p), "l"(w) : "memory");
}
__device__ __forceinline__ void red_release(uint32_t* p, uint32_t v) {
  asm volatile("red.release.gpu.global.add.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}
__device__ __forceinline__ void fence_acquire() { asm volatile("fence.acquire.gpu;" ::: "memory"); }
__device__ __forceinline__ uint4 ld_stream(const uint4* p) {
  uint4 v;
  asm volatile("ld.global.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}
__device__ __forceinline__ uint32_t ld_cg(const uint32_t* p) {
  uint32_t v;
  asm volatile("ld.global.cg.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

struct Params {
  // 0: counter hop (every thread reads and writes its share of n floats, then barrier and a
  // release add); 1: flag-in-data hop; 2: L2 pointer chase; 3: counter hop carrying nothing (as
  // amk's nop chain); 4: mode 0 with a relaxed add (no release: not a valid protocol, it prices
  // the release); 5: counter hop whose block reads all n floats but stores one a warp (a gemv's
  // row results)
  int mode;
  int chain_blocks;  // blocks [0, chain_blocks) run the probe, the others stream
  int steps;
  int n;  // values a hop carries (kN)
  uint32_t* counters;
  float* data;
  uint2* ll;
  const uint32_t* chase;
  const uint4* bg;
  uint64_t bg_vecs;   // a power of two
  int bg_unroll;      // LSU background: 16-byte loads a lane a batch
  int bg_tma_stages;  // TMA background instead (> 0): bulk copies of kTmaBytes in flight a block
  uint32_t* done;
  unsigned long long* out;  // [0] probe end (ns), [1] background bytes, [2] errors, [3] start
};

template <int U>
__device__ void background(const Params& p) {
  const uint64_t stride = static_cast<uint64_t>(gridDim.x - p.chain_blocks) * kThreads * U;
  uint64_t v = static_cast<uint64_t>(blockIdx.x - p.chain_blocks) * kThreads * U + threadIdx.x;
  uint32_t acc = 0;
  uint64_t loads = 0;
  for (;;) {  // one batch of U loads a lane at a time, the stop flag read beside it
    const uint32_t stop = ld_relaxed(p.done);
    uint4 r[U];
#pragma unroll
    for (int u = 0; u < U; ++u) r[u] = ld_stream(p.bg + ((v + u * kThreads) & (p.bg_vecs - 1)));
#pragma unroll
    for (int u = 0; u < U; ++u) acc ^= r[u].x ^ r[u].y ^ r[u].z ^ r[u].w;
    loads += U;
    v += stride;
    if (stop != 0) break;
  }
  if (acc == 0x12345678u) p.out[2] += 1;  // (keeps the loads)
  atomicAdd(&p.out[1], static_cast<unsigned long long>(loads * 16));
}

// The same stream through the copy engine: one thread keeps p.bg_tma_stages bulk copies
// (global -> shared, one mbarrier each) in flight and reissues each as it lands.
__device__ void background_tma(const Params& p) {
  extern __shared__ __align__(128) unsigned char smem[];
  if (threadIdx.x != 0) return;
  const int stages = p.bg_tma_stages;
  const uint32_t base = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  const uint32_t slots = base + 1024;  // mbarriers first
  for (int s = 0; s < stages; ++s)
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(base + 8 * s) : "memory");
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  const uint64_t chunks = p.bg_vecs * 16 / kTmaBytes;  // a power of two
  const uint64_t stride = gridDim.x - p.chain_blocks;
  uint64_t next = blockIdx.x - p.chain_blocks, landed = 0;
  auto issue = [&](int s) {
    const uint64_t src = reinterpret_cast<uint64_t>(p.bg) + (next & (chunks - 1)) * kTmaBytes;
    next += stride;
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(base + 8 * s),
                 "r"(kTmaBytes)
                 : "memory");
    asm volatile(
        "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, "
        "[%3];" ::"r"(slots + s * kTmaBytes),
        "l"(src), "r"(kTmaBytes), "r"(base + 8 * s)
        : "memory");
  };
  auto wait = [&](int s, uint32_t parity) {
    uint32_t ok = 0;
    while (!ok)
      asm volatile(
          "{ .reg .pred q; mbarrier.try_wait.parity.shared::cta.b64 q, [%1], %2; selp.u32 %0, 1, "
          "0, q; }"
          : "=r"(ok)
          : "r"(base + 8 * s), "r"(parity)
          : "memory");
  };
  for (int s = 0; s < stages; ++s) issue(s);
  bool stop = false;
  for (uint64_t i = 0;; ++i) {
    const int s = static_cast<int>(i % stages);
    wait(s, static_cast<uint32_t>((i / stages) & 1));
    ++landed;
    if (s == 0) stop = ld_relaxed(p.done) != 0;
    if (stop) {  // the copies still in flight land before the block exits
      for (uint64_t j = i + 1; j < i + stages; ++j)
        wait(static_cast<int>(j % stages), static_cast<uint32_t>((j / stages) & 1));
      break;
    }
    issue(s);
  }
  atomicAdd(&p.out[1], static_cast<unsigned long long>(landed * kTmaBytes));
}

__device__ void chain(const Params& p) {
  const int cb = p.chain_blocks;
  for (int i = 0; i < p.steps; ++i) {
    if ((i * 37) % cb != static_cast<int>(blockIdx.x)) continue;
    if (i == 0 && threadIdx.x == 0) p.out[3] = gtimer();
    if (p.mode != 1) {
      if (i > 0) {
        if (threadIdx.x == 0) {
          const uint64_t start = gtimer();
          for (uint32_t polls = 1; ld_relaxed(p.counters + i - 1) < 1; ++polls) {
            if (polls % 8 == 0 && gtimer() - start > 1000000000ull) {  // (as amk's wait)
              atomicAdd(&p.out[2], 1ull);
              break;
            }
          }
          fence_acquire();
        }
        __syncthreads();
      }
      const float* src = p.data + static_cast<size_t>(i) * kN;
      float* dst = p.data + static_cast<size_t>(i + 1) * kN;
      if (p.mode == 0 || p.mode == 4) {
        float v[kPer];  // every load in flight at once, then the stores
#pragma unroll
        for (int e = 0; e < kPer; ++e) v[e] = src[e * kThreads + threadIdx.x];
#pragma unroll
        for (int e = 0; e < kPer; ++e) dst[e * kThreads + threadIdx.x] = v[e] + 1.0f;
      } else if (p.mode == 5) {
        float sum = 0.0f;
#pragma unroll
        for (int e = 0; e < kPer; ++e) sum += src[e * kThreads + threadIdx.x];
        for (int o = 16; o > 0; o /= 2) sum += __shfl_xor_sync(0xFFFFFFFFu, sum, o);
        if (threadIdx.x % 32 == 0) dst[threadIdx.x] = sum;
      }
      __syncthreads();
      if (threadIdx.x == 0) {
        if (p.mode == 4)
          asm volatile("red.relaxed.gpu.global.add.u32 [%0], 1;" ::"l"(p.counters + i) : "memory");
        else
          red_release(p.counters + i, 1);
      }
    } else {
      // Every value of the step's input first (polled until its epoch is the launch's), a barrier
      // (a consumer needs all of them), then the outputs.
      const uint2* src = p.ll + static_cast<size_t>(i) * kN;
      uint2 v[kPer];
#pragma unroll
      for (int e = 0; e < kPer; ++e) v[e] = ld_relaxed2(src + e * kThreads + threadIdx.x);
      if (i > 0) {
        const uint64_t start = gtimer();
        for (uint32_t polls = 1;; ++polls) {
          bool all = true;
#pragma unroll
          for (int e = 0; e < kPer; ++e) all = all && v[e].y == 1u;
          if (all) break;
#pragma unroll
          for (int e = 0; e < kPer; ++e)
            if (v[e].y != 1u) v[e] = ld_relaxed2(src + e * kThreads + threadIdx.x);
          if (polls % 8 == 0 && gtimer() - start > 1000000000ull) {
            atomicAdd(&p.out[2], 1ull);
            break;
          }
        }
      }
      __syncthreads();
#pragma unroll
      for (int e = 0; e < kPer; ++e)
        st_relaxed2(p.ll + static_cast<size_t>(i + 1) * kN + e * kThreads + threadIdx.x,
                    make_uint2(__float_as_uint(__uint_as_float(v[e].x) + 1.0f), 1u));
    }
    if (i == p.steps - 1 && threadIdx.x == 0) {
      p.out[0] = gtimer();
      atomicExch(p.done, 1u);
    }
  }
}

__global__ void __launch_bounds__(kThreads, 1) probe(Params p) {
  extern __shared__ unsigned char pad[];  // (one block an SM)
  if (static_cast<int>(blockIdx.x) >= p.chain_blocks && p.bg_tma_stages > 0) {
    background_tma(p);
    return;
  }
  if (static_cast<int>(blockIdx.x) >= p.chain_blocks) {
    // clang-format off
    switch (p.bg_unroll) {
      case 4: background<4>(p); break;
      case 8: background<8>(p); break;
      case 16: background<16>(p); break;
      case 32: background<32>(p); break;
      default: break;
    }
    // clang-format on
    return;
  }
  if (p.mode == 2) {
    if (blockIdx.x == 0 && threadIdx.x == 0) {
      uint32_t k = 0;
      p.out[3] = gtimer();
      for (int s = 0; s < p.steps; ++s) k = ld_cg(p.chase + k);
      p.out[0] = gtimer();
      if (k == 0xFFFFFFFFu) p.out[2] += 1;
      atomicExch(p.done, 1u);
    }
    if (pad[0] == 1) p.out[2] += 1;
    return;
  }
  chain(p);
}

int main() {
  int sms = 0;
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  const int smem = 120 * 1024;
  CK(cudaFuncSetAttribute(probe, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  const int steps = 2000, n = kN;
  const uint64_t bg_bytes = 4ull << 30;
  const uint32_t chase_n = (8u << 20) / 4;  // 8 MiB: L2-resident
  uint32_t *counters, *done, *chase;
  float* data;
  uint2* ll;
  uint4* bg;
  unsigned long long* out;
  CK(cudaMalloc(&counters, steps * 4));
  CK(cudaMalloc(&done, 4));
  CK(cudaMalloc(&data, (steps + 1) * size_t{n} * 4));
  CK(cudaMalloc(&ll, (steps + 1) * size_t{n} * 8));
  CK(cudaMalloc(&bg, bg_bytes));
  CK(cudaMemset(bg, 1, bg_bytes));
  CK(cudaMalloc(&out, 4 * 8));
  CK(cudaMalloc(&chase, chase_n * 4));
  {  // one random cycle over lines 128 bytes apart
    const uint32_t lines = chase_n / 32;
    std::vector<uint32_t> order(lines), h(chase_n, 0);
    for (uint32_t i = 0; i < lines; ++i) order[i] = i;
    srand(7);
    for (uint32_t i = lines - 1; i > 0; --i) std::swap(order[i], order[rand() % (i + 1)]);
    for (uint32_t i = 0; i < lines; ++i) h[order[i] * 32] = order[(i + 1) % lines] * 32;
    CK(cudaMemcpy(chase, h.data(), chase_n * 4, cudaMemcpyHostToDevice));
  }
  std::printf("probe                  background       per step (ns)   background TB/s   errors\n");
  const int modes[] = {0, 3, 4, 5, 1, 2};
  const char* names[] = {"counter hop",          "flag-in-data hop",     "L2 round trip",
                         "counter hop, no data", "counter, relaxed add", "counter, warp stores"};
  struct Background {
    int unroll, tma_stages;
  };
  const Background backgrounds[] = {{0, 0},  {4, 0}, {8, 0}, {16, 0},
                                    {32, 0}, {0, 2}, {0, 4}, {0, 6}};
  for (int mode : modes) {
    for (const Background& b : backgrounds) {
      const bool idle = b.unroll == 0 && b.tma_stages == 0;
      const int chain_blocks = idle ? sms : (mode == 2 ? 1 : sms / 2);
      const int probe_steps = mode == 2 ? 20000 : steps;
      std::vector<double> per, tbs;
      unsigned long long errors = 0;
      for (int rep = 0; rep < 6; ++rep) {
        CK(cudaMemset(counters, 0, steps * 4));
        CK(cudaMemset(done, 0, 4));
        CK(cudaMemset(out, 0, 4 * 8));
        CK(cudaMemset(ll, 0, (steps + 1) * size_t{n} * 8));
        Params p{mode,  chain_blocks, probe_steps,   n,        counters,     data, ll,
                 chase, bg,           bg_bytes / 16, b.unroll, b.tma_stages, done, out};
        probe<<<sms, kThreads, smem>>>(p);
        CK(cudaGetLastError());
        CK(cudaDeviceSynchronize());
        unsigned long long h[4];
        CK(cudaMemcpy(h, out, sizeof h, cudaMemcpyDeviceToHost));
        if (rep == 0) continue;  // warm-up
        const double ns = static_cast<double>(h[0] - h[3]);
        per.push_back(ns / (mode == 2 ? probe_steps : probe_steps - 1));
        tbs.push_back(ns > 0 ? static_cast<double>(h[1]) / ns / 1e3 : 0.0);
        errors += h[2];
      }
      std::sort(per.begin(), per.end());
      std::sort(tbs.begin(), tbs.end());
      char bgname[32];
      if (idle)
        std::snprintf(bgname, sizeof bgname, "none");
      else if (b.tma_stages > 0)
        std::snprintf(bgname, sizeof bgname, "TMA %d x 16 KiB/SM", b.tma_stages);
      else
        std::snprintf(bgname, sizeof bgname, "%d x 4 KiB/SM", b.unroll);
      std::printf("%-22s %-18s %11.1f %17.2f %8llu\n", names[mode], bgname, per[per.size() / 2],
                  tbs[tbs.size() / 2], errors);
    }
  }
  return 0;
}
