// The NVSHMEM twin of benches/gpu_pt2pt.rs: the same figures, measured the same way, with
// NVSHMEM's own library, for scripts/compare-nvshmem. FSH_NPES processes (2 by default, or 1:
// loopback, no ping-pong) with FSH_RANK=0 and 1, on GPU rank % GPUs, unique-id bootstrap through the
// file FSH_UID_FILE. Prints `FIGURE <name> <value> <unit>` lines from PE 0.
//
//   nvcc -rdc=true -arch=sm_90 -O2 -I$NV/include gpu_pt2pt.cu -L<dir with libnvshmem_host.so>
//        -lnvshmem_host -lnvshmem_device -lcuda -o gpu_pt2pt_nvshmem
//   FSH_RANK=0 FSH_UID_FILE=/tmp/uid ./gpu_pt2pt_nvshmem & FSH_RANK=1 FSH_UID_FILE=/tmp/uid ./gpu_pt2pt_nvshmem
//
// Options: --blocks N --threads N --max-size BYTES --lat-iters N (as the Rust benchmark).
#include <cuda.h>
#include <cuda_runtime.h>
#include <nvshmem.h>
#include <nvshmemx.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <unistd.h>

#define CK(x)                                                                              \
    do {                                                                                   \
        cudaError_t e_ = (x);                                                              \
        if (e_ != cudaSuccess) {                                                           \
            fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
            exit(1);                                                                       \
        }                                                                                  \
    } while (0)

static int g_rank;

__global__ void put_bw(char* dst, const char* src, size_t bytes, int iters, int peer) {
    size_t chunk = bytes / gridDim.x, off = chunk * blockIdx.x;
    size_t len = blockIdx.x == gridDim.x - 1 ? bytes - off : chunk;
    for (int i = 0; i < iters; ++i) nvshmemx_putmem_nbi_block(dst + off, src + off, len, peer);
    nvshmem_quiet();
}
__global__ void get_bw(char* dst, const char* src, size_t bytes, int iters, int peer) {
    size_t chunk = bytes / gridDim.x, off = chunk * blockIdx.x;
    size_t len = blockIdx.x == gridDim.x - 1 ? bytes - off : chunk;
    for (int i = 0; i < iters; ++i) nvshmemx_getmem_nbi_block(dst + off, src + off, len, peer);
    nvshmem_quiet();
}
__global__ void p_lat(int* dst, int iters, int peer) {
    for (int i = 0; i < iters; ++i) { nvshmem_int_p(dst, i, peer); nvshmem_quiet(); }
}
__global__ void fadd_lat(uint64_t* dst, int iters, int peer, uint64_t* out) {
    uint64_t acc = 0;
    for (int i = 0; i < iters; ++i) acc += nvshmem_uint64_atomic_fetch_add(dst, 1, peer);
    *out = acc;
}
__global__ void pingpong(uint64_t* data, uint64_t* sig, int iters, int peer, int first, uint64_t base) {
    for (uint64_t i = base + 1; i <= base + iters; ++i) {
        if (first) {
            nvshmem_putmem_signal_nbi(data, data + 1, 8, sig, i, NVSHMEM_SIGNAL_SET, peer);
            nvshmem_signal_wait_until(sig, NVSHMEM_CMP_GE, i);
        } else {
            nvshmem_signal_wait_until(sig, NVSHMEM_CMP_GE, i);
            nvshmem_putmem_signal_nbi(data, data + 1, 8, sig, i, NVSHMEM_SIGNAL_SET, peer);
        }
    }
}

static void figure(const char* name, double value, const char* unit) {
    if (g_rank != 0) return;
    printf("%-36s %12.3f %s\n", name, value, unit);
    printf("FIGURE %s %.4f %s\n", name, value, unit);
    fflush(stdout);
}

static std::string size_name(size_t b) {
    char buf[32];
    if (b >= (1ull << 30)) snprintf(buf, sizeof buf, "%zuG", b >> 30);
    else if (b >= (1ull << 20)) snprintf(buf, sizeof buf, "%zuM", b >> 20);
    else snprintf(buf, sizeof buf, "%zuK", b >> 10);
    return buf;
}

template <typename F> static double timed_ms(cudaStream_t s, F launch) {
    launch();
    CK(cudaStreamSynchronize(s));
    cudaEvent_t a, b;
    CK(cudaEventCreate(&a));
    CK(cudaEventCreate(&b));
    CK(cudaEventRecord(a, s));
    launch();
    CK(cudaEventRecord(b, s));
    CK(cudaEventSynchronize(b));
    float ms = 0;
    CK(cudaEventElapsedTime(&ms, a, b));
    CK(cudaGetLastError());
    cudaEventDestroy(a);
    cudaEventDestroy(b);
    return ms;
}

static double now_us() {
    return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

int main(int argc, char** argv) {
    double t0 = now_us();
    unsigned blocks = 32, threads = 1024;
    size_t max_size = 1ull << 30;
    int lat_iters = 10000;
    for (int i = 1; i + 1 < argc; ++i) {
        if (!strcmp(argv[i], "--blocks")) blocks = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--threads")) threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--max-size")) max_size = strtoull(argv[++i], 0, 10);
        else if (!strcmp(argv[i], "--lat-iters")) lat_iters = atoi(argv[++i]);
    }
    g_rank = atoi(getenv("FSH_RANK") ? getenv("FSH_RANK") : "0");
    const int npes = atoi(getenv("FSH_NPES") ? getenv("FSH_NPES") : "2");
    if (npes != 1 && npes != 2) {
        fprintf(stderr, "FSH_NPES=%d: 1 or 2 PEs only\n", npes);
        return 2;
    }
    const char* uid_file = getenv("FSH_UID_FILE") ? getenv("FSH_UID_FILE") : "/tmp/fsh_nvshmem_uid";
    int devices = 0;
    CK(cudaGetDeviceCount(&devices));
    CK(cudaSetDevice(g_rank % devices));  // as ferroshmem: local rank modulo the GPUs
    nvshmemx_uniqueid_t id = NVSHMEMX_UNIQUEID_INITIALIZER;
    if (g_rank == 0) {
        nvshmemx_get_uniqueid(&id);
        std::string tmp = std::string(uid_file) + ".tmp";
        FILE* f = fopen(tmp.c_str(), "wb");
        fwrite(&id, sizeof id, 1, f);
        fclose(f);
        rename(tmp.c_str(), uid_file);
    } else {
        for (;;) {
            FILE* f = fopen(uid_file, "rb");
            if (f && fread(&id, sizeof id, 1, f) == 1) { fclose(f); break; }
            if (f) fclose(f);
            std::this_thread::sleep_for(std::chrono::microseconds(200));
        }
    }
    nvshmemx_init_attr_t attr = NVSHMEMX_INIT_ATTR_INITIALIZER;
    nvshmemx_set_attr_uniqueid_args(g_rank, npes, &id, &attr);
    nvshmemx_init_attr(NVSHMEMX_INIT_WITH_UNIQUEID, &attr);
    double init_ms = (now_us() - t0) / 1e3;
    int me = nvshmem_my_pe(), peer = (me + 1) % npes;
    double* init_sym = (double*)nvshmem_malloc(sizeof(double));
    CK(cudaMemcpy(init_sym, &init_ms, sizeof(double), cudaMemcpyHostToDevice));
    nvshmem_barrier_all();
    double other = 0;
    nvshmem_getmem(&other, init_sym, sizeof(double), peer);
    if (me == 0) {
        cudaDeviceProp prop;
        CK(cudaGetDeviceProperties(&prop, 0));
        printf("# nvshmem gpu_pt2pt: %d PE(s)%s, %s (%d SMs), OpenSHMEM spec %d.%d, device kernels %u x %u\n", npes,
               npes == 1 ? " (loopback)" : "", prop.name,
               prop.multiProcessorCount, NVSHMEM_MAJOR_VERSION, NVSHMEM_MINOR_VERSION, blocks, threads);
    }
    figure("init_ms", init_ms > other ? init_ms : other, "ms");
    nvshmem_barrier_all();
    if (unlink(uid_file) && me == 0) {}

    cudaStream_t s;
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    size_t max = max_size < (1ull << 30) ? max_size : (1ull << 30);
    const size_t sizes[] = {4ull << 10, 64ull << 10, 1ull << 20, 16ull << 20, 256ull << 20, 1ull << 30};
    char* big = (char*)nvshmem_malloc(max);
    char* local;
    CK(cudaMalloc(&local, max));
    uint64_t* small = (uint64_t*)nvshmem_calloc(64, sizeof(uint64_t));
    nvshmem_barrier_all();
    for (int kind = 0; kind < 2; ++kind) {
        for (size_t size : sizes) {
            if (size > max) continue;
            int iters = size >= (256ull << 20) ? 5 : 50;
            if (me == 0) {
                double ms = timed_ms(s, [&] {
                    if (kind == 0) put_bw<<<blocks, threads, 0, s>>>(big, local, size, iters, peer);
                    else get_bw<<<blocks, threads, 0, s>>>(local, big, size, iters, peer);
                });
                std::string name = std::string(kind == 0 ? "dev_put_bw_" : "dev_get_bw_") + size_name(size);
                figure(name.c_str(), (double)size * iters / (ms * 1e-3) / 1e9, "GB/s");
            }
            nvshmem_barrier_all();
        }
    }
    if (me == 0) {
        double ms = timed_ms(s, [&] { p_lat<<<1, 1, 0, s>>>((int*)small, lat_iters, peer); });
        figure("dev_p_quiet_us", ms * 1e3 / lat_iters, "us");
        ms = timed_ms(s, [&] { fadd_lat<<<1, 1, 0, s>>>(small, lat_iters, peer, small + 32); });
        figure("dev_fetch_add_us", ms * 1e3 / lat_iters, "us");
    }
    nvshmem_barrier_all();
    uint64_t* sig = (uint64_t*)nvshmem_calloc(8, sizeof(uint64_t));
    uint64_t* data = (uint64_t*)nvshmem_calloc(8, sizeof(uint64_t));
    uint64_t base = 0;
    double pp_ms = 0;
    for (int round = 0; round < 2 && npes == 2; ++round) {
        nvshmem_barrier_all();
        cudaEvent_t a, b;
        CK(cudaEventCreate(&a));
        CK(cudaEventCreate(&b));
        CK(cudaEventRecord(a, s));
        pingpong<<<1, 1, 0, s>>>(data, sig, lat_iters, peer, me == 0, base);
        CK(cudaEventRecord(b, s));
        CK(cudaEventSynchronize(b));
        float ms;
        CK(cudaEventElapsedTime(&ms, a, b));
        if (round == 1) pp_ms = ms;
        base += lat_iters;
    }
    if (npes == 2) figure("dev_put_signal_pingpong_us", pp_ms * 1e3 / (2.0 * lat_iters), "us");
    nvshmem_barrier_all();
    nvshmem_free(big);
    CK(cudaFree(local));

    const int n = 1000;
    nvshmem_barrier_all();
    double ms = timed_ms(s, [&] { for (int i = 0; i < n; ++i) nvshmemx_barrier_all_on_stream(s); });
    figure("barrier_all_on_stream_us", ms * 1e3 / n, "us");
    nvshmem_barrier_all();
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed));
    for (int i = 0; i < 100; ++i) nvshmemx_barrier_all_on_stream(s);
    CK(cudaStreamEndCapture(s, &graph));
    CK(cudaGraphInstantiate(&exec, graph, 0));
    ms = timed_ms(s, [&] { for (int i = 0; i < 10; ++i) CK(cudaGraphLaunch(exec, s)); });
    figure("barrier_all_on_stream_graph_us", ms * 1e3 / 1000, "us");
    nvshmem_barrier_all();
    char* src = (char*)nvshmem_malloc(max);
    char* dst = (char*)nvshmem_malloc(max);
    nvshmem_barrier_all();
    if (me == 0) {
        for (size_t size : sizes) {
            if (size > max) continue;
            int iters = size >= (256ull << 20) ? 5 : 50;
            double ms = timed_ms(s, [&] { for (int i = 0; i < iters; ++i) nvshmemx_putmem_on_stream(dst, src, size, peer, s); });
            std::string name = "host_put_on_stream_bw_" + size_name(size);
            figure(name.c_str(), (double)size * iters / (ms * 1e-3) / 1e9, "GB/s");
        }
        double best = 1e30, best_queue = 1e30;
        for (int r = 0; r < 5; ++r) {
            double t = now_us();
            for (int i = 0; i < n; ++i) nvshmemx_putmem_on_stream(dst, src, 4096, peer, s);
            double queued = (now_us() - t) / n;
            CK(cudaStreamSynchronize(s));
            double per = (now_us() - t) / n;
            best = per < best ? per : best;
            best_queue = queued < best_queue ? queued : best_queue;
        }
        figure("host_put_on_stream_4k_us", best, "us");
        figure("host_put_on_stream_4k_queue_us", best_queue, "us");
        uint64_t* word;
        CK(cudaMallocHost(&word, 8));
        *word = 7;
        best = 1e30;
        for (int r = 0; r < 5; ++r) {
            double t = now_us();
            for (int i = 0; i < lat_iters / 5; ++i) {
                nvshmem_putmem(dst, word, 8, peer);
                nvshmem_quiet();
            }
            double per = (now_us() - t) / (lat_iters / 5);
            best = per < best ? per : best;
        }
        figure("host_put8_quiet_us", best, "us");
    }
    nvshmem_barrier_all();
    double best = 1e30;
    for (int r = 0; r < 5; ++r) {
        double t = now_us();
        for (int i = 0; i < lat_iters / 5; ++i) nvshmem_barrier_all();
        double per = (now_us() - t) / (lat_iters / 5);
        best = per < best ? per : best;
    }
    figure("host_barrier_all_us", best, "us");
    nvshmem_free(src);
    nvshmem_free(dst);
    nvshmem_finalize();
    return 0;
}
