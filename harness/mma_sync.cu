// mma.sync issue rate by warps, blocks per SM and independent MMAs per warp (harness/mma.py builds and runs this).
//
// Every warp of every block issues ITERS x ILP warp-level MMAs (PTX mma.sync.aligned), ILP independent accumulators
// at a time, on register operands (no shared-memory traffic). Each block records its SM (%smid) and the SM's
// clock64() at its start and end, so a rate comes out in MMAs per SM clock cycle, whatever clock the GPU ran at.
//
// Output on stdout, one CSV line a configuration:
//   inst,ilp,warps,blocks_per_sm,iters,sms_seen,mma_per_sm_per_clk,min_sm,max_sm,kernel_us
// mma_per_sm_per_clk: the median over SMs of (MMAs the SM's blocks issued) / (last end - first start of them);
// kernel_us: the median of 5 launches timed with CUDA events (after one warm-up).

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <vector>

#define CHECK(x)                                                                              \
  do {                                                                                        \
    cudaError_t e_ = (x);                                                                     \
    if (e_ != cudaSuccess) {                                                                  \
      fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_));      \
      exit(1);                                                                                \
    }                                                                                         \
  } while (0)

__device__ __forceinline__ unsigned sm_id() {
  unsigned r;
  asm volatile("mov.u32 %0, %%smid;" : "=r"(r));
  return r;
}

// One warp-level MMA into float32 accumulators ACC[0..3], in place; A is a0-a3, B is b0-b1.
#define MMA_F32(INSTR, ACC)                                                                            \
  asm volatile(INSTR " {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"                        \
               : "+f"(ACC[0]), "+f"(ACC[1]), "+f"(ACC[2]), "+f"(ACC[3])                                \
               : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1))

// INST: 0 m16n8k16 f16 x f16 -> f32, 1 m16n8k16 bf16 x bf16 -> f32, 2 m16n8k32 e4m3 x e4m3 -> f32,
//       3 m16n8k16 f16 x f16 -> f16
template <int INST, int ILP>
__global__ void mma_loop(float* out, long long* stamps, int iters) {
  // operands: small finite values of each format, varied by lane so nothing folds to a constant
  unsigned lane = threadIdx.x & 31u;
  unsigned base = INST == 1 ? 0x3c003c00u : INST == 2 ? 0x28282828u : 0x20002000u;
  unsigned a0 = base + lane, a1 = base + 2 * lane, a2 = base + 3 * lane, a3 = base ^ lane, b0 = base + 5 * lane,
           b1 = base + 7 * lane;
  float c[ILP][4];
  unsigned h[ILP][2];
#pragma unroll
  for (int j = 0; j < ILP; ++j) {
    c[j][0] = c[j][1] = c[j][2] = c[j][3] = 0.f;
    h[j][0] = h[j][1] = 0u;
  }
  __syncthreads();
  long long t0 = clock64();
  for (int it = 0; it < iters; ++it) {
#pragma unroll
    for (int j = 0; j < ILP; ++j) {
      if (INST == 0) {
        MMA_F32("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32", c[j]);
      } else if (INST == 1) {
        MMA_F32("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32", c[j]);
      } else if (INST == 2) {
        MMA_F32("mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32", c[j]);
      } else {
        asm volatile(
            "mma.sync.aligned.m16n8k16.row.col.f16.f16.f16.f16 {%0,%1}, {%2,%3,%4,%5}, {%6,%7}, {%0,%1};\n"
            : "+r"(h[j][0]), "+r"(h[j][1])
            : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
      }
    }
  }
  __syncthreads();
  long long t1 = clock64();
  float s = 0.f;
#pragma unroll
  for (int j = 0; j < ILP; ++j) s += c[j][0] + c[j][1] + c[j][2] + c[j][3] + __uint_as_float(h[j][0] ^ h[j][1]);
  out[blockIdx.x * blockDim.x + threadIdx.x] = s;
  if (threadIdx.x == 0) {
    stamps[3 * blockIdx.x] = sm_id();
    stamps[3 * blockIdx.x + 1] = t0;
    stamps[3 * blockIdx.x + 2] = t1;
  }
}

typedef void (*Kernel)(float*, long long*, int);

template <int INST>
Kernel pick(int ilp) {
  switch (ilp) {
    case 1: return mma_loop<INST, 1>;
    case 2: return mma_loop<INST, 2>;
    case 4: return mma_loop<INST, 4>;
    default: return mma_loop<INST, 8>;
  }
}

static const char* NAMES[] = {"m16n8k16.f32.f16.f16.f32", "m16n8k16.f32.bf16.bf16.f32", "m16n8k32.f32.e4m3.e4m3.f32",
                              "m16n8k16.f16.f16.f16.f16"};

int main(int argc, char** argv) {
  int iters = argc > 1 ? atoi(argv[1]) : 4096;
  int sms = 0;
  CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  const int ilps[] = {1, 2, 4, 8};
  const int warps_list[] = {1, 2, 4, 8, 16};
  const int blocks_list[] = {1, 2, 4};
  int max_blocks = sms * 4;
  float* out;
  long long* stamps;
  CHECK(cudaMalloc(&out, sizeof(float) * max_blocks * 16 * 32));
  CHECK(cudaMalloc(&stamps, sizeof(long long) * 3 * max_blocks));
  std::vector<long long> host(3 * max_blocks);
  cudaEvent_t e0, e1;
  CHECK(cudaEventCreate(&e0));
  CHECK(cudaEventCreate(&e1));
  printf("inst,ilp,warps,blocks_per_sm,iters,sms_seen,mma_per_sm_per_clk,min_sm,max_sm,kernel_us\n");
  for (int inst = 0; inst < 4; ++inst) {
    for (int ilp : ilps) {
      Kernel k = inst == 0 ? pick<0>(ilp) : inst == 1 ? pick<1>(ilp) : inst == 2 ? pick<2>(ilp) : pick<3>(ilp);
      for (int warps : warps_list) {
        for (int bps : blocks_list) {
          if (warps * bps > 32) continue;  // 32 resident warps a block's SM can hold is plenty here
          int grid = sms * bps;
          k<<<grid, 32 * warps>>>(out, stamps, iters);  // warm-up
          CHECK(cudaGetLastError());
          CHECK(cudaDeviceSynchronize());
          std::vector<float> us;
          for (int r = 0; r < 5; ++r) {
            CHECK(cudaEventRecord(e0));
            k<<<grid, 32 * warps>>>(out, stamps, iters);
            CHECK(cudaEventRecord(e1));
            CHECK(cudaEventSynchronize(e1));
            float ms;
            CHECK(cudaEventElapsedTime(&ms, e0, e1));
            us.push_back(ms * 1000.f);
          }
          std::sort(us.begin(), us.end());
          CHECK(cudaMemcpy(host.data(), stamps, sizeof(long long) * 3 * grid, cudaMemcpyDeviceToHost));
          std::map<long long, std::vector<long long>> by_sm;  // sm -> {first start, last end, blocks}
          for (int b = 0; b < grid; ++b) {
            long long sm = host[3 * b], t0 = host[3 * b + 1], t1 = host[3 * b + 2];
            auto it = by_sm.find(sm);
            if (it == by_sm.end()) {
              by_sm[sm] = {t0, t1, 1};
            } else {
              it->second[0] = std::min(it->second[0], t0);
              it->second[1] = std::max(it->second[1], t1);
              it->second[2] += 1;
            }
          }
          std::vector<double> rates;
          for (auto& kv : by_sm) {
            double mmas = (double)kv.second[2] * warps * iters * ilp;
            rates.push_back(mmas / (double)(kv.second[1] - kv.second[0]));
          }
          std::sort(rates.begin(), rates.end());
          printf("%s,%d,%d,%d,%d,%zu,%.5f,%.5f,%.5f,%.2f\n", NAMES[inst], ilp, warps, bps, iters, rates.size(),
                 rates[rates.size() / 2], rates.front(), rates.back(), us[us.size() / 2]);
          fflush(stdout);
        }
      }
    }
  }
  return 0;
}
